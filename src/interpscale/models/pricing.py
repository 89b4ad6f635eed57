"""Measured pricing: parameters and FLOPs of a family that gives no formula, on the meta device.

The rule (docs/own-model.md, "Pricing"):

- **parameters** P = every parameter of the built module except the token embeddings
  (``nn.Embedding`` weights, which a tied LM head shares), each counted once;
- **FLOPs per training token** M = the matrix-multiply FLOPs that
  ``torch.utils.flop_counter.FlopCounterMode`` counts in one ``loss(batch, 0)`` forward and
  ``backward`` of a ``[1, seq_len]`` batch, divided by ``seq_len``, with two corrections
  that make it Eq. 23's quantity:
  (1) every ``scaled_dot_product_attention`` call is priced at Eq. 23's attention term,
  12·d_attn·N per token (QKᵀ and AV over the full N×N, forward + backward), whatever
  kernel would run (the counter sees a CPU fused kernel as nothing and the math path as
  its matmuls); summed over L layers of width d this is 12·L·d·N;
  (2) the LM head, 6·d·V (Eq. 23 leaves it out; the planner adds it as ``M_head``), is
  taken off where the module's config names ``d_model`` and ``vocab_size``.

The model is built once per (family, size, data, overrides) on the meta device: no memory,
no kernels, and a 5B plugin prices in about a second. Elementwise work (norms, activations,
softmax) is not counted, as in Eq. 23.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils.flop_counter import FlopCounterMode

from interpscale import paper
from interpscale.models.protocol import DataFields
from interpscale.models.types import Batch

BUILDS = {"count": 0}  # meta builds made in this process (the planner's tests read it)


@dataclass(frozen=True)
class Measured:
    """A measured price: non-embedding ``params``; ``flops_per_token`` (None when no
    sequence length was asked for); ``attention`` the Eq. 23 term it holds."""

    params: int
    flops_per_token: Optional[float] = None
    attention: float = 0.0


def nonembedding_params(model: nn.Module) -> int:
    """Parameters except token embeddings (shared tensors once)."""
    emb = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) in seen or id(p) in emb:
            continue
        seen.add(id(p))
        total += p.numel()
    return int(total)


class _AttentionAsEq23(TorchFunctionMode):
    """Replaces ``F.scaled_dot_product_attention`` by a FLOP-free stand-in of the same shape
    (its gradient still reaches q, k and v) and books 12·T·S·d_attn per call (Eq. 23)."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0.0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            q, k, v = args[:3]
            B, H, T, hd = q.shape
            S = k.shape[-2]
            self.flops += B * T * paper.attention_flops(1, H * hd, S)  # Eq. 23's term, one layer of width H·hd
            return q * 0 + (k.sum() + v.sum()) * 0
        return func(*args, **kwargs)


def _batch(model: nn.Module, seq_len: int, concept: bool) -> Batch:
    """A [1, seq_len] batch of token 0 (one chunk of no concepts for a concept family)."""
    tokens = torch.zeros(1, seq_len, dtype=torch.long, device="meta")
    n = int(getattr(getattr(model, "config", None), "n_concepts", 0) or 0)
    if not (concept and n):
        return Batch(tokens)
    return Batch(tokens, torch.zeros(1, seq_len, dtype=torch.long, device="meta"),
                 torch.zeros(1, 1, n, device="meta"))


def count_flops(model: nn.Module, seq_len: int, *, concept: bool = False) -> tuple[float, float]:
    """(M per token by the rule above, its attention part) for a model on the meta device;
    ``concept``: the batch carries concept labels (a concept family)."""
    counter, attention = FlopCounterMode(display=False), _AttentionAsEq23()
    with counter, attention:
        model.loss(_batch(model, seq_len, concept), 0).total.backward()
    cfg = getattr(model, "config", None)
    d, V = getattr(cfg, "d_model", None), getattr(cfg, "vocab_size", None)
    head = 6.0 * d * V if d and V else 0.0
    total = counter.get_total_flops() + attention.flops
    return total / seq_len - head, attention.flops / seq_len


def _key(family: str, data: DataFields, overrides: dict[str, Any]) -> str:
    """The cache key of one build: its arguments and the builder registered now (a family
    registered again with ``overwrite=True`` is measured again)."""
    from interpscale.models.registry import get_family

    return json.dumps({"builder": id(get_family(family).builder), "data": data.to_dict(), "overrides": overrides},
                      sort_keys=True, default=str)


@lru_cache(maxsize=256)
def _measure(family: str, size: str, key: str) -> tuple[nn.Module, int]:
    from interpscale.models.registry import build_model

    args = json.loads(key)
    BUILDS["count"] += 1  # lru_cache: once per (family, size, arguments)
    with torch.device("meta"):
        model = build_model(family, size, data=DataFields.from_dict(args["data"]), **args["overrides"])
    return model, nonembedding_params(model)


def measure(family: str, size: str, seq_len: Optional[int], *, data: DataFields = DataFields(),
            **overrides: Any) -> Measured:
    """Measured P (and M at ``seq_len``) of ``family``/``size``; one meta build per arguments."""
    model, params = _measure(family, size, _key(family, data, overrides))
    if seq_len is None:
        return Measured(params)
    flops, attention = _flops(family, size, _key(family, data, overrides), int(seq_len))
    return Measured(params, flops, attention)


@lru_cache(maxsize=1024)
def _flops(family: str, size: str, key: str, seq_len: int) -> tuple[float, float]:
    from interpscale.models.registry import get_family

    model, _ = _measure(family, size, key)
    model.zero_grad(set_to_none=True)
    return count_flops(model, seq_len, concept=get_family(family).is_concept)


# ---- what the planner asks ----------------------------------------------------------------
@dataclass(frozen=True)
class Price:
    """One (family, size) as the planner prices it: non-embedding ``params`` P, ``flops_per_token``
    M (Eq. 23/24, or measured), the LM head's ``head_flops`` (6·d·V, which Eq. 23 leaves out),
    the concept count the model is built with (0 for families without concepts) and ``how``
    M and P were obtained: "analytic" (the family's formulas) or "measured" (this module's rule)."""

    params: int
    flops_per_token: float
    head_flops: float
    n_concepts: int
    how: str


def model_config(family: str, size: str, *, data: DataFields = DataFields(), **overrides: Any) -> Any:
    """The config ``build_model`` would give the model, without allocating: the family's
    ``config_fn``, else read off its (cached) meta build."""
    from interpscale.models.registry import get_family

    spec = get_family(family)
    if spec.config_fn is not None:
        return spec.config_fn(size, data=data, **overrides)
    return getattr(_measure(family, size, _key(family, data, overrides))[0], "config", None)


def lm_head_flops(family: str, size: str, *, data: DataFields = DataFields(), **overrides: Any) -> float:
    """Forward + backward FLOPs per token of the d × V LM head, 2dV + 4dV (not in Eq. 23), read
    from the family's config (``d_model``, ``vocab_size``); 0 when the config names neither."""
    cfg = model_config(family, size, data=data, **overrides)
    d, V = getattr(cfg, "d_model", None), getattr(cfg, "vocab_size", None)
    return 6.0 * d * V if d and V else 0.0


def price(family: str, size: str, seq_len: int, *, data: DataFields = DataFields(), **overrides: Any) -> Price:
    """P, M, the head's FLOPs and the concept count of ``family``/``size`` as trained with ``data``;
    a family without formulas is built once per size on the meta device (``measure``)."""
    from interpscale.models.registry import flops_per_token, get_family, params_nonembedding

    spec = get_family(family)
    cfg = model_config(family, size, data=data, **overrides)
    n_concepts = int(getattr(cfg, "n_concepts", 0) or 0) if spec.is_concept else 0
    return Price(params_nonembedding(family, size, data=data, **overrides),
                 flops_per_token(family, size, seq_len, data=data, **overrides),
                 lm_head_flops(family, size, data=data, **overrides), n_concepts, spec.pricing)
