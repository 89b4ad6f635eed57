"""The typed config tree of a preset (one dataclass per section, like torchtitan's job config):

    Preset
      plan     PlanConfig      what to sweep (families, sizes, IsoFLOP slices; §8.1)
      model    {key: value}    model overrides, checked against the families' own configs
      data     {key: value}    the data source, checked against its kind's keys
      train    TrainConfig     how the Trainer runs (micro-batches, parallelism, compile, saving)
               + recipe        the App. G recipe ([train] keys that are RunSpec fields: part of the run id)
      launch   LaunchConfig    where and how many jobs (executor, parallelism, cluster)
      observe  ObserveConfig   what a run logs besides its metrics (TensorBoard, trackers)
      fit      FitConfig       the fits after the sweep (bootstrap replicates)

Each section validates itself from its own fields and travels whole to the component it
configures (docs/launching.md).  **A new setting is one field here plus its use**: the TOML
key, the schema check and (``flag=True``) the ``--<name>`` flag (``add_flags``) follow from it.
"""

from __future__ import annotations

import argparse
import difflib
import types
import typing
from dataclasses import dataclass, field, fields, replace
from typing import Any, Iterable, Mapping

from interpscale import paper
from interpscale.errors import ConfigError
from interpscale.executors import EXECUTORS
from interpscale.orchestration.parallel import PARALLEL

Number = (int, float)
DESC = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
        dict: "a table"}


def setting(default: Any = None, *, help: str = "", desc: str = "", choices: Iterable[str] | None = None,
            positive: bool = False, flag: bool = False, factory: Any = None) -> Any:
    """A config field: ``help`` (flag help), ``desc`` (what the schema says it expects),
    ``choices``, ``positive`` (checked by ``check``) and ``flag`` (``add_flags`` offers
    ``--<name>``)."""
    meta = {"help": help, "desc": desc, "choices": tuple(choices) if choices else None, "positive": positive,
            "flag": flag}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


# -- the sections ------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanConfig:
    """``[plan]``: what the IsoFLOP sweep covers (docs/launching.md)."""

    families: list = setting(factory=list, desc="a list of family names")
    sizes: list = setting(factory=list, desc="a list of size names")
    slices: Any = setting(None, desc="a list of compute targets or a table {family = [C, ...]}")
    seq_len: int = setting(paper.SEQ_LEN, positive=True)
    batch_tokens: int = setting(paper.BATCH_TOKENS, positive=True)
    tolerance: float = setting(paper.SLICE_TOLERANCE, desc="a number in (0, 1)")
    tokens_per_param: list = setting(factory=list, desc="a [low, high] pair of numbers")
    max_sizes_per_slice: int = setting(0, positive=True)
    plugins: list = setting(factory=list, desc="a list of module names that register model families")


@dataclass(frozen=True)
class TrainConfig:
    """``[train]`` settings of the Trainer itself: how a run is executed, not what it
    computes (the recipe — lr, schedule, vocabulary — is the RunSpec's and part of the run id)."""

    micro_batch_tokens: int | None = setting(
        None, flag=True, desc="an integer (tokens per rank and micro-batch)",
        help="tokens per rank per micro-batch (gradient accumulation); the global batch is unchanged")
    parallel: str = setting("ddp", flag=True, choices=PARALLEL, desc="ddp or fsdp",
                            help="data parallelism across ranks (default ddp)")
    compile: bool | None = setting(None, flag=True,
                                   help="torch.compile the loss (default: on CUDA only; --no-compile: eager)")
    compile_mode: str = setting("default", flag=True,
                                choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
                                help="torch.compile mode of the loss (when compiled)")
    save_every_s: float = setting(60.0, positive=True, desc="a number (seconds between resume states)",
                                  help="seconds between resume states (the work a preemption can lose)")
    save_every_steps: int | None = setting(None, positive=True, help="also save the resume state every N steps")

    def __post_init__(self) -> None:  # built in code too, not only from a checked preset
        if self.parallel not in PARALLEL:
            raise ValueError(f"unknown parallelism {self.parallel!r}; expected one of {PARALLEL}")


@dataclass(frozen=True)
class ObserveConfig:
    """``[observe]``: what a run records besides metrics.jsonl."""

    tensorboard: bool = setting(True, help="write TensorBoard event files under RUN_DIR/tb")
    trackers: list = setting(factory=list, desc='a list of tracker names: "tensorboard", "wandb", "mlflow"',
                             help="experiment trackers besides metrics.jsonl (wandb / mlflow: optional extras; "
                                  "docs/training.md, Trackers)")


@dataclass(frozen=True)
class LaunchConfig:
    """``[launch]``: the executor and the jobs (cluster keys go to SLURM as they are)."""

    executor: str = setting("local", flag=True, choices=EXECUTORS, desc="one of local, slurm, debug",
                            help="default: the preset's [launch] executor, else local")
    max_parallel: int = setting(2, flag=True, positive=True, help="jobs running at once (local)")
    runs_per_job: int = setting(1, flag=True, positive=True, help="runs packed into one job")
    threads_per_job: int = setting(1, positive=True)
    nodes: int = setting(1, flag=True, positive=True, help="nodes per run (multi-node data parallel)")
    tasks_per_node: int = setting(1, positive=True)
    # cluster settings (SLURM; timeout_min applies to local jobs too)
    gpus_per_node: int | None = setting(None, flag=True, help="GPUs per node = tasks per node (one rank per GPU)")
    timeout_min: int | None = setting(None, flag=True, desc="an integer (minutes)", help="slurm/local job time limit")
    partition: str | None = setting(None, flag=True, desc="a SLURM partition name", help="slurm partition")
    cpus_per_task: int | None = setting(None)
    mem_gb: float | None = setting(None)
    max_array_size: int | None = setting(None)

    CLUSTER = ("timeout_min", "gpus_per_node", "cpus_per_task", "mem_gb", "max_array_size", "partition")

    @property
    def slurm(self) -> dict[str, Any]:
        """The cluster settings that are set (``gpus_per_node`` only for SLURM)."""
        out = {k: getattr(self, k) for k in self.CLUSTER if getattr(self, k) is not None}
        if self.executor != "slurm":
            out.pop("gpus_per_node", None)
        return out


@dataclass(frozen=True)
class FitConfig:
    """``[fit]``: the fits after the sweep."""

    n_boot: int = setting(100, positive=True, help="bootstrap replicates for the fits")


# [launch] keys kept from before the tree (same meaning, read into their section)
LAUNCH_ALIASES = {"micro_batch_tokens": "train", "parallel": "train", "compile": "train", "save_every_s": "train",
                  "n_boot": "fit", "slurm_partition": "launch"}
SECTION_CLASSES = {"plan": PlanConfig, "train": TrainConfig, "launch": LaunchConfig, "observe": ObserveConfig,
                   "fit": FitConfig}


@dataclass(frozen=True)
class Preset:
    """A validated preset (``Preset.load``); each section goes whole to its component."""

    plan: PlanConfig = field(default_factory=PlanConfig)
    model: dict = field(default_factory=dict)
    size_presets: dict = field(default_factory=dict)
    data: dict = field(default_factory=lambda: {"kind": "synthetic"})
    train: TrainConfig = field(default_factory=TrainConfig)
    recipe: dict = field(default_factory=dict)  # [train] keys that are RunSpec fields
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    observe: ObserveConfig = field(default_factory=ObserveConfig)
    fit: FitConfig = field(default_factory=FitConfig)
    source: str = "config"

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any], source: Any = "config") -> "Preset":
        """The tree of a loaded TOML table (validate it first: ``config_schema.validate_config``)."""
        launch = dict(cfg.get("launch", {}))
        moved: dict[str, dict] = {"train": {}, "fit": {}, "launch": {}}
        for key, section in LAUNCH_ALIASES.items():
            if key in launch:
                moved[section]["partition" if key == "slurm_partition" else key] = launch.pop(key)
        train = dict(cfg.get("train", {}))
        names = {f.name for f in fields(TrainConfig)}
        return cls(plan=PlanConfig(**cfg.get("plan", {})), model=dict(cfg.get("model", {})),
                   size_presets={k: dict(v) for k, v in cfg.get("size_presets", {}).items()},
                   data=dict(cfg.get("data", {"kind": "synthetic"})),
                   train=TrainConfig(**{**moved["train"], **{k: v for k, v in train.items() if k in names}}),
                   recipe={k: v for k, v in train.items() if k not in names},
                   launch=LaunchConfig(**{**moved["launch"], **launch}),
                   observe=ObserveConfig(**cfg.get("observe", {})),
                   fit=FitConfig(**{**moved["fit"], **cfg.get("fit", {})}), source=str(source))


# -- validation from the fields -----------------------------------------------------------------
def _kind(hint: Any) -> type:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None: X
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    base = typing.get_origin(hint) or hint
    base = list if base is tuple else base  # TOML has no tuples
    return base if base in DESC else object


def section_types(cls) -> dict[str, tuple[tuple[type, ...], str]]:
    """key -> (accepted types, description) of a dataclass's fields (a config section, RunSpec,
    a model config): the type from the annotation, the description from the metadata's desc."""
    out, hints = {}, typing.get_type_hints(cls)
    for f in fields(cls):
        kind = _kind(hints[f.name])
        accepted = Number if kind is float else (list, dict) if kind is object else (kind,)
        desc = f.metadata.get("desc") or (f"one of {', '.join(f.metadata['choices'])}" if f.metadata.get("choices")
                                          else DESC.get(kind, "a value"))
        out[f.name] = (accepted, desc)
    return out


def suggest(name: str, valid: Iterable[str]) -> str:
    """``; did you mean 'x'?`` for the closest of ``valid`` to ``name`` ("" when none is close)."""
    close = difflib.get_close_matches(str(name), list(valid), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_values(cls, table: Mapping[str, Any], where: str) -> None:
    """Ranges and choices of a section's values (types are ``section_types``' business)."""
    for f in fields(cls):
        if f.name not in table or table[f.name] is None:
            continue
        v, meta = table[f.name], f.metadata
        if meta.get("choices") and v not in meta["choices"]:
            raise ConfigError(f"{where} {f.name} = {v!r}: expected one of {', '.join(meta['choices'])}"
                              f"{suggest(v, meta['choices'])}")
        if meta.get("positive") and isinstance(v, Number) and not v > 0:
            raise ConfigError(f"{where} {f.name} = {v!r}: must be positive")


# -- command-line flags from the fields ----------------------------------------------------------
def add_flags(parser: argparse.ArgumentParser, cls) -> None:
    """``--<field-name>`` for every ``flag=True`` field of ``cls`` (bools get ``--x/--no-x``);
    the default None keeps the preset's value (``flag_values``)."""
    hints = typing.get_type_hints(cls)  # once per class, as section_types
    for f in fields(cls):
        if not f.metadata.get("flag"):
            continue
        kind, name = _kind(hints[f.name]), "--" + f.name.replace("_", "-")
        kw: dict[str, Any] = {"default": None, "help": f.metadata.get("help") or None, "dest": f.name}
        if kind is bool:
            parser.add_argument(name, action=argparse.BooleanOptionalAction, **kw)
        else:
            parser.add_argument(name, type=kind if kind in (int, float) else str, choices=f.metadata.get("choices"),
                                **kw)


def flag_values(args: argparse.Namespace, cls) -> dict[str, Any]:
    """The ``cls`` fields given on the command line (``add_flags``)."""
    return {f.name: getattr(args, f.name) for f in fields(cls) if getattr(args, f.name, None) is not None}


def with_settings(config, **settings: Any):
    """``config`` with ``settings`` (its field names) replaced, itself when there are none."""
    return replace(config, **settings) if settings else config


def split_settings(settings: Mapping[str, Any], *classes) -> list[dict[str, Any]]:
    """``settings`` divided among ``classes`` by field name; TypeError names any that none has."""
    out: list[dict[str, Any]] = [{} for _ in classes]
    for key, value in settings.items():
        i = next((i for i, c in enumerate(classes) if key in {f.name for f in fields(c)}), None)
        if i is None:
            valid = sorted(f.name for c in classes for f in fields(c))
            raise TypeError(f"unknown setting {key!r}{suggest(key, valid)} (settings: {', '.join(valid)})")
        out[i][key] = value
    return out
