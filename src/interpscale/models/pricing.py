"""Measured pricing: parameters and FLOPs of a family that gives no formula, on the meta device.

The rule (docs/own-model.md, "Pricing"): P = every parameter except the token embeddings
(``nn.Embedding`` weights, which a tied head shares), each counted once; M = the matmul FLOPs
``FlopCounterMode`` counts in one ``loss(batch, 0)`` forward + backward of a ``[1, seq_len]``
batch, per token, with every ``scaled_dot_product_attention`` call priced at Eq. 23's 12·d·N
per token (whatever kernel would run) and the LM head's 6·d·V taken off (Eq. 23 leaves it
out; the planner adds it as ``M_head``). Elementwise work is not counted, as in Eq. 23. One
meta build per (family, size, data, overrides): no memory, a 5B plugin prices in a second.
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
from interpscale.models.registry import build_model, flops_per_token, get_family, params_nonembedding
from interpscale.models.types import Batch

BUILDS = {"count": 0}  # meta builds made in this process (the planner's tests read it)


@dataclass(frozen=True)
class Measured:
    """Non-embedding ``params``, ``flops_per_token`` (None without a sequence length) and the
    Eq. 23 ``attention`` term it holds."""

    params: int
    flops_per_token: Optional[float] = None
    attention: float = 0.0


def nonembedding_params(model: nn.Module) -> int:
    """Parameters except token embeddings (``parameters()`` yields a shared tensor once)."""
    emb = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    return int(sum(p.numel() for p in model.parameters() if id(p) not in emb))


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
    return Batch(tokens, torch.zeros_like(tokens), torch.zeros(1, 1, n, device="meta"))


def count_flops(model: nn.Module, seq_len: int, *, concept: bool = False) -> tuple[float, float]:
    """(M per token by the rule above, its attention part) for a model on the meta device;
    ``concept``: the batch carries concept labels (a concept family)."""
    counter, attention = FlopCounterMode(display=False), _AttentionAsEq23()
    with counter, attention:
        model.loss(_batch(model, seq_len, concept), 0).total.backward()
    total = counter.get_total_flops() + attention.flops
    return total / seq_len - _head_flops(getattr(model, "config", None)), attention.flops / seq_len


def _key(family: str, data: DataFields, overrides: dict[str, Any]) -> str:
    """The cache key of one build: its arguments and the builder registered now (a family
    registered again with ``overwrite=True`` is measured again)."""
    return json.dumps({"builder": id(get_family(family).builder), "data": data.to_dict(), "overrides": overrides},
                      sort_keys=True, default=str)


@lru_cache(maxsize=256)
def _build(family: str, size: str, key: str) -> tuple[nn.Module, int]:
    args = json.loads(key)
    BUILDS["count"] += 1  # lru_cache: once per (family, size, arguments)
    with torch.device("meta"):
        model = build_model(family, size, data=DataFields.from_dict(args["data"]), **args["overrides"])
    return model, nonembedding_params(model)


def measure(family: str, size: str, seq_len: Optional[int], *, data: DataFields = DataFields(),
            **overrides: Any) -> Measured:
    """Measured P (and M at ``seq_len``) of ``family``/``size``; one meta build per arguments."""
    return _measure(family, size, _key(family, data, overrides), None if seq_len is None else int(seq_len))


@lru_cache(maxsize=1024)
def _measure(family: str, size: str, key: str, seq_len: Optional[int]) -> Measured:
    model, params = _build(family, size, key)
    if seq_len is None:
        return Measured(params)
    model.zero_grad(set_to_none=True)
    return Measured(params, *count_flops(model, seq_len, concept=get_family(family).is_concept))


# ---- what the planner asks ----------------------------------------------------------------
@dataclass(frozen=True)
class Price:
    """One (family, size) as the planner prices it: P, M (Eq. 23/24, or measured), the LM head's
    6·d·V, the concept count it is built with (0 without concepts) and ``how``: "analytic" or "measured"."""

    params: int
    flops_per_token: float
    head_flops: float
    n_concepts: int
    how: str


def model_config(family: str, size: str, *, data: DataFields = DataFields(), **overrides: Any) -> Any:
    """The config ``build_model`` would give the model, without allocating: the family's
    ``config_fn``, else read off its (cached) meta build."""
    spec = get_family(family)
    if spec.config_fn is not None:
        return spec.config_fn(size, data=data, **overrides)
    return getattr(_build(family, size, _key(family, data, overrides))[0], "config", None)


def lm_head_flops(family: str, size: str, *, data: DataFields = DataFields(), **overrides: Any) -> float:
    """Forward + backward FLOPs per token of the d × V LM head, 2dV + 4dV (not in Eq. 23), read
    from the family's config (``d_model``, ``vocab_size``); 0 when the config names neither."""
    return _head_flops(model_config(family, size, data=data, **overrides))


def _head_flops(cfg: Any) -> float:
    d, V = getattr(cfg, "d_model", None), getattr(cfg, "vocab_size", None)
    return 6.0 * d * V if d and V else 0.0


def price(family: str, size: str, seq_len: int, *, data: DataFields = DataFields(), **overrides: Any) -> Price:
    """P, M, the head's FLOPs and the concept count of ``family``/``size`` as trained with ``data``;
    a family without formulas is built once per size on the meta device (``measure``)."""
    spec = get_family(family)
    cfg = model_config(family, size, data=data, **overrides)
    n_concepts = int(getattr(cfg, "n_concepts", 0) or 0) if spec.is_concept else 0
    return Price(params_nonembedding(family, size, data=data, **overrides),
                 flops_per_token(family, size, seq_len, data=data, **overrides), _head_flops(cfg), n_concepts,
                 spec.pricing)
