"""The family registry: one name -> how to build it and how to count it without building it.

Built-in families register on import of ``interpscale.models``, a plugin's when its module is
imported (``models.plugins``). "Is it a diffusion / a concept family" is answered here only.
"""

from __future__ import annotations

import difflib
import json
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional

import torch.nn as nn

from interpscale._registry import Registry
from interpscale.errors import UserError
from interpscale.models import plugins
from interpscale.models.protocol import BUILD_ATTR, DataFields

log = logging.getLogger(__name__)

Builder = Callable[..., nn.Module]  # builder(size, *, data: DataFields, **overrides) -> model
ParamsFn = Callable[..., int]  # params_fn(size, *, data, **overrides) -> int
FlopsFn = Callable[..., float]  # flops_fn(size, seq_len, *, data, **overrides) -> float


@dataclass(frozen=True)
class FamilySpec:
    """A registered family. ``params_fn``/``flops_fn`` must not allocate; when omitted the
    counts are measured on the meta device (``models.pricing``). ``config_fields``: the
    override names the family accepts (None: not declared, the builder checks them)."""

    name: str
    builder: Builder
    params_fn: Optional[ParamsFn] = None
    flops_fn: Optional[FlopsFn] = None
    is_diffusion: bool = False
    is_concept: bool = False
    description: str = ""
    config_fields: Optional[frozenset[str]] = None
    config_fn: Optional[Callable[..., Any]] = None  # config_fn(size, *, data, **overrides) -> config, no allocation

    @property
    def builtin(self) -> bool:
        """Registered by this package (else by a plugin module, whose runs record their plugins)."""
        fn = getattr(self.builder, "func", self.builder)  # functools.partial -> the function
        return str(getattr(fn, "__module__", "")).startswith("interpscale.")

    @property
    def pricing(self) -> str:
        """"analytic" (the family's formulas) or "measured" (counted on the meta device)."""
        return "analytic" if self.params_fn is not None and self.flops_fn is not None else "measured"


FAMILIES: Registry[FamilySpec] = Registry("family", hint=plugins.where_looked,
                                          on_miss=plugins.load_entry_points)


def register_family(name: str, builder: Builder, *, params_fn: Optional[ParamsFn] = None,
                    flops_fn: Optional[FlopsFn] = None, is_diffusion: bool = False, is_concept: bool = False,
                    description: str = "", config_fields: Optional[Any] = None,
                    config_fn: Optional[Callable[..., Any]] = None, overwrite: bool = False) -> FamilySpec:
    """Register ``name`` (again only with ``overwrite=True``). ``config_fields``: the names
    ``[model.<name>]`` may set (an iterable or a dataclass; None: the builder checks them);
    ``config_fn``: the config a build would have, without building (else read off a meta build)."""
    if not callable(builder):
        raise ValueError(f"builder for family {name!r} is not callable: {builder!r}")
    if config_fields is not None and hasattr(config_fields, "__dataclass_fields__"):
        config_fields = set(config_fields.__dataclass_fields__) - {"family", "size"}
    fields = None if config_fields is None else frozenset(config_fields)
    spec = FamilySpec(name, builder, params_fn, flops_fn, bool(is_diffusion), bool(is_concept), description, fields,
                      config_fn)
    FAMILIES.register(name, spec, overwrite=overwrite)
    log.debug("registered model family %s", name)
    return spec


def get_family(name: str) -> FamilySpec:
    """The family ``name``; an unknown name says where it looked and how to register one."""
    return FAMILIES.lookup(name)


def family_overrides(table: Mapping[str, Any], family: str) -> dict[str, Any]:
    """A preset's ``[model]`` table for one family: its shared keys that the family's config
    has (every shared key when the family declares no fields), then ``[model.<family>]``."""
    own = table.get(family)
    own = dict(own) if isinstance(own, Mapping) else {}
    valid = get_family(family).config_fields
    shared = {k: v for k, v in table.items() if not _is_family_table(table, k)
              and (valid is None or k in valid)}
    return {**shared, **own}


def check_model_table(table: Mapping[str, Any], families: Iterable[str], where: str = "[model]") -> None:
    """Every ``[model.<family>]`` key is a field of that family; every shared key a field of
    at least one planned family (UserError naming the key and a close match otherwise)."""
    families = list(families)
    for key, value in table.items():
        if _is_family_table(table, key):  # [model.<family>]: that family's fields (None: its builder checks)
            valid = get_family(key).config_fields
            bad = [k for k in value if valid is not None and k not in valid]
            if bad:
                at = f"[model.{key!r}]" if "+" in key else f"[model.{key}]"
                raise UserError(f"{at}: unknown key {bad[0]!r}{_close(bad[0], valid)}; "
                                f"{key!r} takes: {', '.join(sorted(valid))}")
            continue
        if not any(get_family(f).config_fields is None or key in get_family(f).config_fields
                   for f in families):
            fields = {k for f in families for k in (get_family(f).config_fields or ())}
            raise UserError(f"{where}: unknown key {key!r}{_close(key, fields)}; no planned family "
                            f"({', '.join(families)}) takes it. Family-specific knobs go in [model.<family>] tables")


def _close(key: str, names: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, sorted(names), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _is_family_table(table: Mapping[str, Any], key: str) -> bool:
    return isinstance(table[key], Mapping) and key in FAMILIES


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def build_model(family: str, size: str, *, data: Optional[DataFields] = None, **overrides: Any) -> nn.Module:
    """``family`` at size preset ``size`` with the data's fields and config ``overrides``, recorded
    on the model so that a checkpoint of a plugin family reloads through the same builder."""
    data = data if data is not None else DataFields()
    model = get_family(family).builder(size, data=data, **overrides)
    plain = {k: v for k, v in overrides.items() if _jsonable(v)}  # CoCoMix's teacher is attached, not recorded
    object.__setattr__(model, BUILD_ATTR, {"size": size, "data": data.to_dict(), "overrides": plain})
    return model


def params_nonembedding(family: str, size: str, *, data: Optional[DataFields] = None, **overrides: Any) -> int:
    """Non-embedding parameters: the family's formula, else counted on the meta device. +concept
    families: backbone + concept module (Table 23's "+Concept total"; Eq. 24's P is the backbone)."""
    spec, data = get_family(family), data if data is not None else DataFields()
    if spec.params_fn is not None:
        return int(spec.params_fn(size, data=data, **overrides))
    from interpscale.models.pricing import measure

    return measure(family, size, None, data=data, **overrides).params


def flops_per_token(family: str, size: str, seq_len: int, *, data: Optional[DataFields] = None,
                    **overrides: Any) -> float:
    """Forward+backward FLOPs per training token: the family's formula (Eq. 23; Eq. 24 for concept
    families), else measured on the meta device (``models.pricing``)."""
    if int(seq_len) <= 0:
        raise ValueError(f"seq_len must be a positive int, got {seq_len!r}")
    spec, data = get_family(family), data if data is not None else DataFields()
    if spec.flops_fn is not None:
        return float(spec.flops_fn(size, int(seq_len), data=data, **overrides))
    from interpscale.models.pricing import measure

    return measure(family, size, int(seq_len), data=data, **overrides).flops_per_token
