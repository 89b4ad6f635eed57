"""The family registry: one name -> how to build it and how to count it without building it.

Zoo modules register themselves with :func:`register_family`; they import this module
(``interpscale.models.registry``), never the ``interpscale.models`` package top level.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch.nn as nn

log = logging.getLogger(__name__)

Builder = Callable[..., nn.Module]  # builder(size, **overrides) -> model
ParamsFn = Callable[..., int]  # params_fn(size, **overrides) -> int
FlopsFn = Callable[..., float]  # flops_fn(size, seq_len, **overrides) -> float


@dataclass(frozen=True)
class FamilySpec:
    """A registered family. ``params_fn``/``flops_fn`` must not allocate; when omitted the
    module-level helpers fall back to building the model (fine for small sizes only)."""

    name: str
    builder: Builder
    params_fn: Optional[ParamsFn] = None
    flops_fn: Optional[FlopsFn] = None
    is_diffusion: bool = False
    is_concept: bool = False
    description: str = ""


FAMILIES: dict[str, FamilySpec] = {}


def register_family(
    name: str,
    builder: Builder,
    *,
    params_fn: Optional[ParamsFn] = None,
    flops_fn: Optional[FlopsFn] = None,
    is_diffusion: bool = False,
    is_concept: bool = False,
    description: str = "",
    overwrite: bool = False,
) -> FamilySpec:
    """Register ``name``; re-registering an existing name needs ``overwrite=True``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"family name must be a non-empty string, got {name!r}")
    if name in FAMILIES and not overwrite:
        raise ValueError(f"family {name!r} is already registered (pass overwrite=True to replace it)")
    if not callable(builder):
        raise ValueError(f"builder for family {name!r} is not callable: {builder!r}")
    spec = FamilySpec(name, builder, params_fn, flops_fn, bool(is_diffusion), bool(is_concept), description)
    FAMILIES[name] = spec
    log.debug("registered model family %s", name)
    return spec


def get_family(name: str) -> FamilySpec:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown model family {name!r}; registered: {sorted(FAMILIES)}") from None


def build_model(family: str, size: str, **overrides: Any) -> nn.Module:
    """Instantiate ``family`` at size preset ``size`` (see ``SIZES``) with config ``overrides``."""
    return get_family(family).builder(size, **overrides)


def params_nonembedding(family: str, size: str, **overrides: Any) -> int:
    """Non-embedding parameters of ``family``/``size``, analytically (no allocation).

    For the +concept families this is backbone + concept module (Table 23's "+Concept
    total"); Eq. 24's P is the backbone alone (see ``accounting.backbone_params``).
    """
    spec = get_family(family)
    if spec.params_fn is not None:
        return int(spec.params_fn(size, **overrides))
    return int(spec.builder(size, **overrides).params_nonembedding())


def flops_per_token(family: str, size: str, seq_len: int, **overrides: Any) -> float:
    """Forward+backward FLOPs per training token (Eq. 23; Eq. 24 for concept families)."""
    spec = get_family(family)
    if spec.flops_fn is not None:
        return float(spec.flops_fn(size, seq_len, **overrides))
    return float(spec.builder(size, **overrides).flops_per_token(seq_len))
