"""Validation of a preset (TOML) before anything runs: every section, key (an unknown one with
the closest valid spelling) and value type, and the facts sections must agree on; one
``ConfigError`` naming the file, the section and the key."""

from __future__ import annotations

import os
from typing import Any, Mapping

from interpscale import paper
from interpscale.data.corpus import CorpusConfig
from interpscale.data.loaders import DATA_KINDS, FILE_SOURCE_KEYS
from interpscale.errors import ConfigError, UserError
from interpscale.models import FAMILIES, SIZES
from interpscale.models.config import ModelConfig
from interpscale.models.plugins import load_plugins, where_looked
from interpscale.models.registry import check_model_table
from interpscale.models.zoo.common import ZooConfig
from interpscale.orchestration.config import (DESC, LAUNCH_ALIASES, SECTION_CLASSES, FitConfig, LaunchConfig,
                                             Number, PlanConfig, TrainConfig, check_values, section_types,
                                             suggest)
from interpscale.orchestration.spec import RunSpec

# [plan] and [launch]: key -> (accepted types, description for the message), from the sections' fields
PLAN_KEYS = section_types(PlanConfig)
LAUNCH_KEYS = {**section_types(LaunchConfig),  # + the keys kept from before [train] / [fit] had them
               **{k: {**section_types(TrainConfig), **section_types(FitConfig)}[k] for k in LAUNCH_ALIASES
                  if k != "slurm_partition"},
               "slurm_partition": ((str,), "a SLURM partition name")}
SECTIONS = ("plan", "size_presets", "model", "train", "data", "launch", "observe", "fit")
# the recipe's (RunSpec's) positive [train] keys; the sections' own say so in their fields
POSITIVE = ("vocab_size", "eval_batches", "log_every", "lr")
# RunSpec fields the planner sets itself: not [train] options
_PLANNED = {"family", "size", "slice_flops", "flops", "params", "tokens", "seq_len", "batch_tokens",
            "flops_per_token", "base_size", "model_overrides", "data", "plugins"}


def _where(source: Any, section: str, key: str | None = None) -> str:
    return f"{source}: [{section}]" + (f" {key}" if key is not None else "")


def _type_name(v: Any) -> str:
    return "a boolean" if isinstance(v, bool) else DESC.get(type(v), type(v).__name__)


def _check_type(value: Any, types: tuple[type, ...], what: str, where: str) -> None:
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise ConfigError(f"{where} = {value!r}: expected {what}, got {_type_name(value)}")


def recipe_keys() -> set[str]:
    """The ``[train]`` keys that are RunSpec fields (part of the run id); the others are TrainConfig's."""
    return set(section_types(RunSpec)) - _PLANNED


def _check_data_source(data: Mapping[str, Any], kind: str, source: Any) -> None:
    """``[data]``: a known kind, its keys and types; ``path`` one path or a list of them."""
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


def _check_keys(table: Mapping[str, Any], valid: Mapping[str, tuple[tuple[type, ...], str]], source: Any,
                section: str) -> None:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{_where(source, section)} must be a table, got {_type_name(table)}")
    for key, value in table.items():
        if key not in valid:
            raise ConfigError(f"{_where(source, section)}: unknown key {key!r}{suggest(key, valid)} "
                              f"(valid keys: {', '.join(sorted(valid))})")
        _check_type(value, valid[key][0], valid[key][1], _where(source, section, key))


def _check_slices(plan: Mapping[str, Any], source: Any) -> None:
    """``[plan] slices``: positive targets, a list or ``{family = [C, ...]}`` over planned families."""
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


def validate_config(cfg: Mapping[str, Any], source: str | os.PathLike = "config") -> Mapping[str, Any]:
    """Check a loaded preset; raise ``ConfigError`` naming the file, section and key at fault."""
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"{source}: expected a TOML table at the top level")
    for section in cfg:
        if section not in SECTIONS:
            raise ConfigError(f"{source}: unknown section [{section}]{suggest(section, SECTIONS)} "
                              f"(valid sections: {', '.join(f'[{s}]' for s in SECTIONS)})")
    plan = cfg.get("plan", {})
    _check_keys(plan, PLAN_KEYS, source, "plan")
    try:  # [plan] plugins register families: imported before any family is looked up
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
    if "tolerance" in plan and not 0 < plan["tolerance"] < 1:
        raise ConfigError(f"{_where(source, 'plan', 'tolerance')} = {plan['tolerance']!r}: must be in (0, 1)")
    tpp = plan.get("tokens_per_param")
    if tpp is not None and (len(tpp) != 2 or not all(isinstance(x, Number) for x in tpp) or not tpp[0] <= tpp[1]):
        raise ConfigError(f"{_where(source, 'plan', 'tokens_per_param')} = {tpp!r}: expected [low, high] numbers")
    _check_slices(plan, source)

    # [model] / [size_presets.*] keys: ModelConfig's fields (and the zoo's)
    mkeys = {k: v for k, v in {**section_types(ZooConfig), **section_types(ModelConfig)}.items()
             if k not in ("family", "size")}
    _check_model(cfg.get("model", {}), plan.get("families") or [], mkeys, source)
    presets = cfg.get("size_presets", {})
    if not isinstance(presets, Mapping):
        raise ConfigError(f"{_where(source, 'size_presets')} must be a table of size tables")
    for name, p in presets.items():
        section = f"size_presets.{name}"
        _check_keys(p, {**mkeys, "base": ((str,), "a size preset name")}, source, section)
        if p.get("base") not in SIZES:
            raise ConfigError(f"{_where(source, section, 'base')} = {p.get('base')!r}: not a size preset"
                              f"{suggest(str(p.get('base')), SIZES)} (presets: {', '.join(SIZES)})")
    for s in plan.get("sizes", []):
        if s not in SIZES and s not in presets:
            valid = list(SIZES) + list(presets)
            raise ConfigError(f"{_where(source, 'plan', 'sizes')}: unknown size {s!r}{suggest(s, valid)}")

    recipe = {k: v for k, v in section_types(RunSpec).items() if k not in _PLANNED}
    _check_keys(cfg.get("train", {}), {**recipe, **section_types(TrainConfig)}, source, "train")

    data = cfg.get("data", {})
    if not isinstance(data, Mapping):
        raise ConfigError(f"{_where(source, 'data')} must be a table")
    kind = data.get("kind", "synthetic")
    _check_type(kind, (str,), "a data kind (synthetic, jsonl, parquet, ...)", _where(source, "data", "kind"))
    _check_data_source(data, kind, source)

    _check_keys(cfg.get("launch", {}), LAUNCH_KEYS, source, "launch")
    for section in ("observe", "fit"):
        _check_keys(cfg.get(section, {}), section_types(SECTION_CLASSES[section]), source, section)
    for section, cls in SECTION_CLASSES.items():  # ranges and choices, from the sections' fields
        for c in (cls, TrainConfig, FitConfig) if section == "launch" else (cls,):  # + [launch]'s older keys
            check_values(c, cfg.get(section, {}), _where(source, section))
    train = cfg.get("train", {})
    for key in POSITIVE:
        if key in train and not train[key] > 0:
            raise ConfigError(f"{_where(source, 'train', key)} = {train[key]!r}: must be positive")
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
    plan, train, data = cfg.get("plan", {}), cfg.get("train", {}), cfg.get("data", {})
    fams = plan.get("families", [])
    seq_len = plan.get("seq_len", paper.SEQ_LEN)
    batch_tokens = plan.get("batch_tokens", paper.BATCH_TOKENS)
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
