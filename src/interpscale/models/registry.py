"""The family registry: one name -> how to build it and how to count it without building it.
Built-in families register on import of ``interpscale.models``, a plugin's when its module is
imported (``models.plugins``). "Is it a diffusion / a concept family" is answered here only."""

from __future__ import annotations

import difflib
import json
import logging
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterable, Mapping, Optional

import torch.nn as nn

from interpscale._registry import Registry
from interpscale.errors import UserError
from interpscale.models.plugins import load_entry_points, where_looked
from interpscale.models.config import SIZES
from interpscale.models.types import DataFields

log = logging.getLogger(__name__)

BUILD_ATTR = "_interpscale_build"  # where build_model records (size, base, data, overrides) on the model
Builder = Callable[..., nn.Module]  # builder(size, *, data: DataFields, **overrides) -> model
ParamsFn = Callable[..., Optional[int]]  # params_fn(size, *, data, **overrides) -> int (None: measure)
FlopsFn = Callable[..., Optional[float]]  # flops_fn(size, seq_len, *, data, **overrides) -> float (None: measure)


@dataclass(frozen=True)
class FamilySpec:
    """A registered family. ``params_fn``/``flops_fn`` must not allocate; when omitted (or
    returning None) the counts are measured on the meta device (``models.pricing.price``). ``config_fields``: the
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


FAMILIES: Registry[FamilySpec] = Registry("family", hint=where_looked, on_miss=load_entry_points)


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


def register_class(name: str, cls: Any, config_fn: Callable[..., Any], *, overwrite: bool = True,
                   **kw: Any) -> FamilySpec:
    """Register ``name`` built as ``cls(config_fn(name, size, *, data, **overrides), **objects)``,
    ``objects`` the overrides named in ``cls.objects`` (a model's, not its config's: CoCoMix's teacher),
    and priced by ``cls.params_fn(config)`` / ``cls.flops_fn(config, seq_len)`` (None: measured)."""
    fn = partial(config_fn, name)
    params, flops = (partial(_class_count, cls, count, fn) for count in ("params_fn", "flops_fn"))
    return register_family(name, partial(_build_class, cls, fn), params_fn=params, flops_fn=flops,
                           config_fn=fn, overwrite=overwrite, **kw)


def _build_class(cls: Any, config_fn: Callable[..., Any], size: str, **overrides: Any) -> nn.Module:
    objects = {k: overrides.pop(k) for k in getattr(cls, "objects", ()) if k in overrides}
    return cls(config_fn(size, **overrides), **objects)


def _class_count(cls: Any, count: str, config_fn: Callable[..., Any], size: str, *seq_len: int,
                 **overrides: Any) -> Any:
    """P (``cls.params_fn``) or M at ``seq_len`` (``cls.flops_fn``) of the unbuilt config of ``size``."""
    return getattr(cls, count)(config_fn(size, **overrides), *seq_len)


def get_family(name: str) -> FamilySpec:
    """The family ``name``; an unknown name says where it looked and how to register one."""
    return FAMILIES.lookup(name)


def family_overrides(table: Mapping[str, Any], family: str) -> dict[str, Any]:
    """A preset's ``[model]`` table for one family: its shared keys that the family's config
    has (every shared key when the family declares no fields), then ``[model.<family>]``."""
    own = table.get(family)
    shared = accepted(family, {k: v for k, v in table.items() if not _is_family_table(table, k)})
    return {**shared, **(dict(own) if isinstance(own, Mapping) else {})}


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
        if not any(accepted(f, {key: value}) for f in families):
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


def accepted(family: str, table: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``table`` (a size preset, say) that ``family``'s config accepts (every key when
    the family declares no fields: its builder checks them)."""
    valid = get_family(family).config_fields
    return {k: v for k, v in table.items() if valid is None or k in valid}


def resolve_size(size: str, base: Optional[str] = None) -> str:
    """``size`` as a known preset: a name not known yet is defined on ``base`` (a sweep's
    ``[size_presets]`` entry, whose fields reach the builder as overrides); a ValueError otherwise."""
    if base and size != base and size not in SIZES:
        SIZES.define(size, base)
    if size not in SIZES:
        raise UserError(f"unknown size {size!r}; presets: {sorted(SIZES)} or generated L<layers>d<width>")
    return size


def build_model(family: str, size: str, *, data: Optional[DataFields] = None, base: Optional[str] = None,
                **overrides: Any) -> nn.Module:
    """``family`` at size preset ``size`` (defined on ``base`` when not known yet) with the data's
    fields and config ``overrides``, recorded on the model so that a checkpoint of a plugin family
    reloads through the same builder."""
    data = data if data is not None else DataFields()
    spec = get_family(family)
    model = spec.builder(resolve_size(size, base), data=data, **overrides)
    plain = {k: v for k, v in overrides.items() if _jsonable(v)}  # CoCoMix's teacher is attached, not recorded
    object.__setattr__(model, BUILD_ATTR, {"size": size, "base": base, "data": data.to_dict(), "overrides": plain})
    return model


def build_args(model: nn.Module) -> dict[str, Any]:
    """The ``data=``, ``base=`` and overrides ``build_model`` built ``model`` with (``{}`` when unknown)."""
    rec = getattr(model, BUILD_ATTR, None) or {}
    out = {"data": DataFields.from_dict(rec.get("data")), **dict(rec.get("overrides") or {})}
    return out | ({"base": rec["base"]} if rec.get("base") else {})
