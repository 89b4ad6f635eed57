"""The typed config tree of a preset (one dataclass per section, like torchtitan's job config)
and its one loader, ``Preset.load(source, **overrides)``:

    Preset
      plan     PlanConfig      what to sweep (families, sizes, IsoFLOP slices; §8.1)
      model    {key: value}    model overrides, checked against the families' own configs
      data     {key: value}    the data source, checked against its kind's keys
      train    TrainConfig     how the Trainer runs (micro-batches, parallelism, compile, saving)
      recipe   Recipe          the App. G recipe ([train] keys that are RunSpec fields: part of the run id)
      launch   LaunchConfig    where and how many jobs (executor, parallelism, cluster)
      observe  ObserveConfig   what a run logs besides its metrics (TensorBoard, trackers)
      fit      FitConfig       the fits after the sweep (bootstrap replicates)

``Preset.load`` reads the TOML (a name under configs/ or a path), maps the older spellings
(``LAUNCH_ALIASES``), checks every key's type, every value's range (the fields' ``setting``
metadata) and the facts sections must agree on (``validate_config``), once, and builds the
tree; each section then travels whole to the component it configures (docs/launching.md).
**A new setting is one field here plus its use**: the TOML key, the schema check and
(``flag=True``) the ``--<name>`` flag (``add_flags``) follow from it.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import sysconfig
import tomllib
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, make_dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from interpscale import paper
from interpscale.data.corpus import CorpusConfig
from interpscale.data.loaders import DATA_KINDS, FILE_SOURCE_KEYS, resolve_data_paths
from interpscale.errors import ConfigError, UserError
from interpscale.executors import EXECUTORS
from interpscale.models import FAMILIES, SIZES
from interpscale.models.config import ModelConfig
from interpscale.models.plugins import load_plugins, where_looked
from interpscale.models.registry import check_model_table
from interpscale.models.zoo.common import ZooConfig
from interpscale.orchestration.parallel import PARALLEL
from interpscale.orchestration.spec import RunSpec

log = logging.getLogger(__name__)
Number = (int, float)
DESC = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
        dict: "a table"}


def setting(default: Any = None, *, help: str = "", desc: str = "", choices: Iterable[str] | None = None,
            positive: bool = False, check: Callable[[Any], str | None] | None = None, flag: bool = False,
            factory: Any = None) -> Any:
    """A config field: ``help`` (flag help), ``desc`` (what the schema says it expects),
    ``choices``, ``positive`` and ``check`` (value -> the problem, or None; both checked by
    ``check_values``) and ``flag`` (``add_flags`` offers ``--<name>``)."""
    meta = {"help": help, "desc": desc, "choices": tuple(choices) if choices else None, "positive": positive,
            "check": check, "flag": flag}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _open_unit(v: Any) -> str | None:
    return None if 0 < v < 1 else "must be in (0, 1)"


def _low_high(v: Any) -> str | None:
    ok = len(v) == 2 and all(isinstance(x, Number) for x in v) and v[0] <= v[1]
    return None if ok else "expected [low, high] numbers"


# -- the sections ------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanConfig:
    """``[plan]``: what the IsoFLOP sweep covers (docs/launching.md)."""

    families: list = setting(factory=list, desc="a list of family names")
    sizes: list = setting(factory=list, desc="a list of size names")
    slices: Any = setting(None, desc="a list of compute targets or a table {family = [C, ...]}")
    seq_len: int = setting(paper.SEQ_LEN, positive=True)
    batch_tokens: int = setting(paper.BATCH_TOKENS, positive=True)
    tolerance: float = setting(paper.SLICE_TOLERANCE, desc="a number in (0, 1)", check=_open_unit)
    tokens_per_param: list = setting(factory=list, desc="a [low, high] pair of numbers", check=_low_high)
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
            raise ConfigError(f"unknown parallelism {self.parallel!r}; expected one of {PARALLEL}")


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
    power_sims: int = setting(0, check=lambda v: None if isinstance(v, int) and v >= 0 else "a whole number >= 0",
                              help="simulated sweeps per truth behind the report's achieved power of an "
                                   "undetermined multiplier verdict (0: not simulated; docs/design.md)")


# the recipe: the RunSpec fields the planner does not set itself ([train] keys, part of the run id)
PLANNED = frozenset({"family", "size", "slice_flops", "flops", "params", "tokens", "seq_len", "batch_tokens",
                     "flops_per_token", "base_size", "model_overrides", "data", "plugins"})
_RECIPE_POSITIVE = ("vocab_size", "eval_batches", "log_every", "lr")


class _Given:
    def given(self) -> dict[str, Any]:
        """The keys the preset sets (the others keep RunSpec's defaults; an unset ``vocab_size``
        is the planner's to choose)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


def _recipe_fields() -> list[tuple[str, Any, Any]]:
    hints = typing.get_type_hints(RunSpec)
    return [(f.name, hints[f.name] | None, setting(None, positive=f.name in _RECIPE_POSITIVE))
            for f in fields(RunSpec) if f.name not in PLANNED]


# ``[train]`` recipe keys: one field per RunSpec field (its type; None = not set, RunSpec's default)
Recipe = make_dataclass("Recipe", _recipe_fields(), bases=(_Given,), frozen=True)
Recipe.__module__ = __name__
Recipe.__doc__ = ("``[train]`` keys that are RunSpec fields: what a run computes (lr, schedule, vocabulary; "
                  "part of the run id). One field per RunSpec field the planner does not set; None: not set.")

# [launch] keys kept from before the tree (same meaning, read into their section)
LAUNCH_ALIASES = {"micro_batch_tokens": "train", "parallel": "train", "compile": "train", "save_every_s": "train",
                  "n_boot": "fit", "slurm_partition": "launch"}
SECTION_CLASSES = {"plan": PlanConfig, "train": TrainConfig, "launch": LaunchConfig, "observe": ObserveConfig,
                   "fit": FitConfig}
SECTIONS = ("plan", "size_presets", "model", "train", "data", "launch", "observe", "fit")
# an override by field name -> the section that has the field (Preset.load)
OVERRIDE_SECTIONS = {f.name: section for section, cls in (("plan", PlanConfig), ("train", TrainConfig),
                                                          ("train", Recipe), ("launch", LaunchConfig),
                                                          ("observe", ObserveConfig), ("fit", FitConfig))
                     for f in fields(cls)}


@dataclass(frozen=True)
class Preset:
    """A validated preset (``Preset.load``); each section goes whole to its component."""

    plan: PlanConfig = field(default_factory=PlanConfig)
    model: dict = field(default_factory=dict)
    size_presets: dict = field(default_factory=dict)
    data: dict = field(default_factory=lambda: {"kind": "synthetic"})
    train: TrainConfig = field(default_factory=TrainConfig)
    recipe: Recipe = field(default_factory=Recipe)  # type: ignore[valid-type]
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    observe: ObserveConfig = field(default_factory=ObserveConfig)
    fit: FitConfig = field(default_factory=FitConfig)
    source: str = "config"

    @classmethod
    def load(cls, source: "str | os.PathLike | Mapping[str, Any] | Preset", **overrides: Any) -> "Preset":
        """The checked tree of ``source``: a preset name (``configs/<name>.toml``), a TOML path,
        a TOML table already read (named "config" in messages) or a tree (itself when nothing
        is overridden).  ``overrides`` (None keeps the preset's value): any section's field by
        name, a recipe key, or ``size_presets`` (added to the preset's); they are checked with
        the rest, as if the TOML said them."""
        if isinstance(source, Preset):
            if all(v is None for v in overrides.values()):
                return source
            table, name = source.to_table(), source.source
        elif isinstance(source, Mapping):
            table, name = dict(source), "config"
        else:
            table, name = load_preset(source), source
        plan = table.get("plan") if isinstance(table.get("plan"), Mapping) else {}
        written_for = [f for f in plan.get("families", []) if isinstance(f, str)]  # the [model] table's families
        return cls._build(validate_config(_overridden(table, overrides), name, model_families=written_for), name)

    @classmethod
    def _build(cls, cfg: Mapping[str, Any], source: Any) -> "Preset":
        """The tree of a checked TOML table; the older ``[launch]`` spellings go to their sections."""
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
                   recipe=Recipe(**{k: v for k, v in train.items() if k not in names}),
                   launch=LaunchConfig(**{**moved["launch"], **launch}),
                   observe=ObserveConfig(**cfg.get("observe", {})),
                   fit=FitConfig(**{**moved["fit"], **cfg.get("fit", {})}), source=str(source))

    def to_table(self) -> dict[str, Any]:
        """The TOML table of this tree (the values that differ from the fields' defaults)."""
        out: dict[str, Any] = {"model": dict(self.model), "size_presets": {k: dict(v) for k, v in
                                                                           self.size_presets.items()},
                               "data": dict(self.data), "train": {**_set(self.train), **_set(self.recipe)}}
        out.update({name: _set(getattr(self, name)) for name in ("plan", "launch", "observe", "fit")})
        return {k: v for k, v in out.items() if v}


def _set(section: Any) -> dict[str, Any]:
    """A section's values that are not its fields' defaults, in TOML's types (lists, not tuples)."""
    out = {}
    for f in fields(section):
        v = getattr(section, f.name)
        if v != (f.default_factory() if f.default_factory is not MISSING else f.default):
            out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


def _overridden(cfg: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` with ``overrides`` written into their sections (None keeps the preset's value)."""
    given = {k: list(v) if isinstance(v, tuple) else v for k, v in overrides.items() if v is not None}
    if bad := [k for k in given if k != "size_presets" and k not in OVERRIDE_SECTIONS]:
        raise ConfigError(f"unknown training option(s) {sorted(bad)}; allowed: {sorted(f.name for f in fields(Recipe))}")
    out = dict(cfg)
    plan = out.get("plan", {})
    if "families" in given and "slices" not in given and isinstance(plan, Mapping) and isinstance(
            plan.get("slices"), Mapping):  # a {family = [C, ...]} table: the families planned
        out["plan"] = {**plan, "slices": {f: c for f, c in plan["slices"].items() if f in given["families"]}}
    for key, value in given.items():
        section = OVERRIDE_SECTIONS.get(key, "size_presets")
        table = out.get(section, {})
        if isinstance(table, Mapping):  # else the schema names the section
            out[section] = {**table, **(value if key == "size_presets" else {key: value})}
    return out


# -- reading a preset ----------------------------------------------------------------------------
# presets: the checkout's configs/ (source tree, editable install), else the copy a wheel
# installs under <prefix>/share/interpscale/configs (pyproject data-files)
CONFIG_DIR = Path(__file__).resolve().parents[3] / "configs"
INSTALLED_CONFIG_DIR = Path(sysconfig.get_path("data")) / "share" / "interpscale" / "configs"


def config_dir() -> Path:
    """Where presets are found by name."""
    return CONFIG_DIR if CONFIG_DIR.is_dir() else INSTALLED_CONFIG_DIR


def list_presets() -> list[str]:
    return sorted(p.stem for p in config_dir().glob("*.toml"))


def load_preset(name_or_path: str | os.PathLike) -> dict[str, Any]:
    """The TOML table of a preset by name (``configs/<name>.toml``) or a path to any TOML file,
    unchecked (``Preset.load`` checks it); data paths are relative to the file."""
    p = Path(name_or_path)
    if not p.suffix:
        p = config_dir() / f"{name_or_path}.toml"
    if not p.is_file():
        raise UserError(f"unknown preset {str(name_or_path)!r}; available: {list_presets()} (or a .toml path)")
    with open(p, "rb") as f:
        try:
            cfg = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"preset {p} is not valid TOML: {exc}") from exc
    if isinstance(cfg.get("data"), dict):  # data paths are relative to the TOML, not the working directory
        cfg["data"] = resolve_data_paths(cfg["data"], p.resolve().parent)
    return cfg


_SAID: set[str] = set()


def deprecated(old: str, new: str) -> None:
    """One log line per process for a deprecated Python spelling (kept one release)."""
    if old not in _SAID:
        _SAID.add(old)
        log.warning("%s is deprecated and goes in the next release; write %s", old, new)


def load_config(preset: "str | os.PathLike | Preset") -> Preset:
    """Deprecated spelling of ``Preset.load(preset)`` (kept one release)."""
    deprecated("load_config(preset)", "Preset.load(preset)")
    return Preset.load(preset)


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
    """Ranges and choices of a section's values, from its fields' metadata (types are
    ``section_types``' business)."""
    for f in fields(cls):
        if f.name not in table or table[f.name] is None:
            continue
        v, meta = table[f.name], f.metadata
        if meta.get("choices") and v not in meta["choices"]:
            raise ConfigError(f"{where} {f.name} = {v!r}: expected one of {', '.join(meta['choices'])}"
                              f"{suggest(v, meta['choices'])}")
        if meta.get("positive") and isinstance(v, Number) and not v > 0:
            raise ConfigError(f"{where} {f.name} = {v!r}: must be positive")
        if meta.get("check") and (problem := meta["check"](v)):
            raise ConfigError(f"{where} {f.name} = {v!r}: {problem}")


PLAN_KEYS = section_types(PlanConfig)
LAUNCH_KEYS = {**section_types(LaunchConfig),  # + the keys kept from before [train] / [fit] had them
               **{k: {**section_types(TrainConfig), **section_types(FitConfig)}[k] for k in LAUNCH_ALIASES
                  if k != "slurm_partition"},
               "slurm_partition": ((str,), "a SLURM partition name")}


def _where(source: Any, section: str, key: str | None = None) -> str:
    return f"{source}: [{section}]" + (f" {key}" if key is not None else "")


def _type_name(v: Any) -> str:
    return "a boolean" if isinstance(v, bool) else DESC.get(type(v), type(v).__name__)


def _check_type(value: Any, types: tuple[type, ...], what: str, where: str) -> None:
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise ConfigError(f"{where} = {value!r}: expected {what}, got {_type_name(value)}")


def _check_keys(table: Mapping[str, Any], valid: Mapping[str, tuple[tuple[type, ...], str]], source: Any,
                section: str) -> None:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{_where(source, section)} must be a table, got {_type_name(table)}")
    for key, value in table.items():
        if key not in valid:
            raise ConfigError(f"{_where(source, section)}: unknown key {key!r}{suggest(key, valid)} "
                              f"(valid keys: {', '.join(sorted(valid))})")
        _check_type(value, valid[key][0], valid[key][1], _where(source, section, key))


def _check_section(table: Any, classes: tuple, source: Any, section: str, keys: Mapping | None = None) -> None:
    """A section of fields: its keys and their types (``keys``, else the classes' fields), then
    the ranges and choices of their metadata."""
    _check_keys(table, keys or {k: v for c in reversed(classes) for k, v in section_types(c).items()}, source,
                section)
    for cls in classes:
        check_values(cls, table, _where(source, section))


def _check_plan(plan: Any, source: Any) -> None:
    """``[plan]``: its fields; the plugins (imported before any family is looked up), the
    families registered; the slice targets."""
    _check_keys(plan, PLAN_KEYS, source, "plan")
    try:
        load_plugins([p for p in plan.get("plugins", []) if isinstance(p, str)])
    except UserError as exc:
        raise ConfigError(f"{_where(source, 'plan', 'plugins')}: {exc}") from exc
    for key in ("families", "sizes", "plugins"):
        for v in plan.get(key, []):
            _check_type(v, (str,), "a list of names", _where(source, "plan", key))
    for fam in plan.get("families", []):
        if fam not in FAMILIES:
            raise ConfigError(f"{_where(source, 'plan', 'families')}: unknown family {fam!r}"
                              f"{suggest(fam, FAMILIES)} (registered: {', '.join(sorted(FAMILIES))}). "
                              f"{where_looked(fam)}")
    check_values(PlanConfig, plan, _where(source, "plan"))
    slices = plan.get("slices")
    fams = plan.get("families") or list(FAMILIES)
    for fam, targets in ({None: slices} if isinstance(slices, list) else slices or {}).items():
        where = _where(source, "plan", "slices") if fam is None else _where(source, "plan.slices", fam)
        if fam is not None and fam not in fams:
            raise ConfigError(f"{_where(source, 'plan.slices')}: {fam!r} is not one of the planned families "
                              f"{list(fams)}{suggest(fam, fams)}")
        _check_type(targets, (list,), "a list of compute targets (FLOPs)", where)
        for c in targets:
            _check_type(c, Number, "a positive number of FLOPs", where)
            if not c > 0:
                raise ConfigError(f"{where}: target {c!r} must be positive")


def _model_keys() -> dict[str, tuple[tuple[type, ...], str]]:
    """``[model]`` / ``[size_presets.*]`` keys: ModelConfig's fields (and the zoo's)."""
    return {k: v for k, v in {**section_types(ZooConfig), **section_types(ModelConfig)}.items()
            if k not in ("family", "size")}


def _check_model(model: Any, families: list, mkeys: Mapping, source: Any) -> None:
    """``[model]``: shared keys (each a field of some planned family) and ``[model.<family>]``
    tables (each key a field of that family), typed where the built-in configs know the field."""
    if not isinstance(model, Mapping):
        raise ConfigError(f"{_where(source, 'model')} must be a table, got {_type_name(model)}")
    tables = {k: v for k, v in model.items() if isinstance(v, Mapping) and k in FAMILIES}
    shared = {k: v for k, v in model.items() if k not in tables}
    if not families:
        _check_keys(shared, mkeys, source, "model")
    for section, table in [("model", shared), *((f"model.{k}", v) for k, v in tables.items())]:
        _check_keys({k: v for k, v in table.items() if k in mkeys}, mkeys, source, section)
    try:
        check_model_table(model, [f for f in families if f in FAMILIES], where=_where(source, "model"))
    except UserError as exc:
        raise ConfigError(f"{source}: {exc}" if not str(exc).startswith(str(source)) else str(exc)) from exc


def _check_size_presets(presets: Any, sizes: list, mkeys: Mapping, source: Any) -> None:
    """``[size_presets.<name>]``: model keys on a ``base`` size preset; ``[plan] sizes`` each
    a size preset or one of these."""
    if not isinstance(presets, Mapping):
        raise ConfigError(f"{_where(source, 'size_presets')} must be a table of size tables")
    for name, p in presets.items():
        section = f"size_presets.{name}"
        _check_keys(p, {**mkeys, "base": ((str,), "a size preset name")}, source, section)
        if p.get("base") not in SIZES:
            raise ConfigError(f"{_where(source, section, 'base')} = {p.get('base')!r}: not a size preset"
                              f"{suggest(str(p.get('base')), SIZES)} (presets: {', '.join(SIZES)})")
    for s in sizes:
        if s not in SIZES and s not in presets:
            valid = list(SIZES) + list(presets)
            raise ConfigError(f"{_where(source, 'plan', 'sizes')}: unknown size {s!r}{suggest(s, valid)}")


def _check_data(data: Any, source: Any) -> None:
    """``[data]``: a known kind, its keys and types; ``path`` one path or a list of them."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{_where(source, 'data')} must be a table")
    kind = data.get("kind", "synthetic")
    _check_type(kind, (str,), "a data kind (synthetic, jsonl, parquet, ...)", _where(source, "data", "kind"))
    if kind not in DATA_KINDS:
        raise ConfigError(f"{_where(source, 'data', 'kind')} = {kind!r}: expected one of {', '.join(DATA_KINDS)}"
                          f"{suggest(kind, DATA_KINDS)}")
    if kind == "synthetic":
        _check_keys(data, {"kind": ((str,), "a data kind"), **section_types(CorpusConfig)}, source, "data")
        return
    _check_keys(data, FILE_SOURCE_KEYS, source, "data")
    path = data.get("path")
    if path is None:
        raise ConfigError(f"{_where(source, 'data')}: kind {kind!r} needs a path")
    if isinstance(path, list) and (kind == "prepared" or not path):
        raise ConfigError(f"{_where(source, 'data', 'path')} = {path!r}: expected "
                          + ("one prepared data directory" if kind == "prepared" else "at least one path"))
    for p in path if isinstance(path, list) else [path]:
        _check_type(p, (str,), "a file path (or a list of them)", _where(source, "data", "path"))


def validate_config(cfg: Mapping[str, Any], source: str | os.PathLike = "config", *,
                    model_families: Iterable[str] = ()) -> Mapping[str, Any]:
    """Check a preset's TOML table (``Preset.load``'s step): every section by its own fields,
    then the facts sections must agree on; ``ConfigError`` names the file, section and key.
    ``model_families``: families the ``[model]`` table was also written for (the preset's,
    when an override plans others)."""
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"{source}: expected a TOML table at the top level")
    for section in cfg:
        if section not in SECTIONS:
            raise ConfigError(f"{source}: unknown section [{section}]{suggest(section, SECTIONS)} "
                              f"(valid sections: {', '.join(f'[{s}]' for s in SECTIONS)})")
    plan, mkeys = cfg.get("plan", {}), _model_keys()
    _check_plan(plan, source)
    fams = list(plan.get("families") or [])
    _check_model(cfg.get("model", {}), fams + [f for f in model_families if fams and f not in fams], mkeys, source)
    _check_size_presets(cfg.get("size_presets", {}), plan.get("sizes", []), mkeys, source)
    _check_section(cfg.get("train", {}), (TrainConfig, Recipe), source, "train")
    _check_data(cfg.get("data", {}), source)
    _check_section(cfg.get("launch", {}), (LaunchConfig, TrainConfig, FitConfig), source, "launch", LAUNCH_KEYS)
    for section in ("observe", "fit"):
        _check_section(cfg.get(section, {}), (SECTION_CLASSES[section],), source, section)
    _cross_checks(cfg, source)
    return cfg


def _size_value(cfg: Mapping, size: str, key: str, *, explicit: bool = False):
    """A model setting of ``size``: its size preset's, else [model]'s, else (unless
    ``explicit``) the base preset's."""
    preset = cfg.get("size_presets", {}).get(size, {})
    for table in (preset, cfg.get("model", {})):
        if key in table:
            return table[key]
    return None if explicit else getattr(SIZES.get(preset.get("base", size)), key, None)


def _cross_checks(cfg: Mapping, source: Any) -> None:
    """The facts sections must agree on: the batch in whole sequences and micro-batches, CDLM
    blocks dividing the sequence, the concept count and the vocabulary set alike."""
    plan, train, data = cfg.get("plan", {}), cfg.get("train", {}), cfg.get("data", {})
    fams = plan.get("families", [])
    seq_len = plan.get("seq_len", PlanConfig.seq_len)
    batch_tokens = plan.get("batch_tokens", PlanConfig.batch_tokens)
    if batch_tokens % seq_len:
        raise ConfigError(f"{source}: [plan] batch_tokens = {batch_tokens} is not a multiple of seq_len = {seq_len}")
    for key in [k for k in train if "micro" in k]:  # a micro-batch (gradient accumulation) setting
        micro = train[key]
        whole = batch_tokens if "token" in key else batch_tokens // seq_len
        if not isinstance(micro, int) or micro <= 0 or whole % micro:
            raise ConfigError(f"{source}: [train] {key} = {micro!r} does not divide the batch "
                              f"({whole} {'tokens' if 'token' in key else 'sequences'})")
    for size in plan.get("sizes", []):
        if any(FAMILIES[f].is_diffusion for f in fams if f in FAMILIES):
            block = _size_value(cfg, size, "block_size")
            if isinstance(block, int) and block > 0 and seq_len % block:
                raise ConfigError(f"{source}: size {size!r} has block_size = {block}, which does not divide "
                                  f"[plan] seq_len = {seq_len} (CDLM denoises whole blocks)")
        if data.get("kind", "synthetic") == "synthetic":
            # the trainer takes the concept count from the data unless the config sets one
            n_model = _size_value(cfg, size, "n_concepts", explicit=True)
            n_data = data.get("n_concepts", CorpusConfig().n_concepts)
            if n_model is not None and n_model != n_data:
                raise ConfigError(f"{source}: size {size!r} has n_concepts = {n_model} but [data] n_concepts = "
                                  f"{n_data}; the concept head must match the corpus' concepts (set both)")
    if "vocab_size" in train and "vocab_size" in cfg.get("model", {}) and train["vocab_size"] != cfg["model"]["vocab_size"]:
        raise ConfigError(f"{source}: [train] vocab_size = {train['vocab_size']} but [model] vocab_size = "
                          f"{cfg['model']['vocab_size']}; the planner prices the model that is trained (set both alike)")


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
