"""The one price of a (family, size), :func:`price`: P and M per trained token from the family's
formulas (Eq. 23 / Eq. 24 for the Steerling families), else measured on the meta device
(docs/own-model.md, "Pricing a family without formulas") on a build that checks the protocol."""

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
from interpscale.errors import UserError
from interpscale.models.registry import build_model, get_family, resolve_size
from interpscale.models.types import Batch, DataFields

BUILDS = {"count": 0}  # meta builds made in this process (the planner's tests read it)


@dataclass(frozen=True)
class Price:
    """One (family, size) as the planner prices it: non-embedding ``params`` P, ``flops_per_token``
    M (Eq. 23/24, or measured; None without a sequence length), the LM head's 6·d·V, the concept
    count it is built with (0 without concepts) and ``how``: "analytic" or "measured"."""

    params: int
    flops_per_token: Optional[float]
    head_flops: float
    n_concepts: int
    how: str


def price(family: str, size: str, seq_len: Optional[int] = None, *, data: DataFields = DataFields(),
          base: Optional[str] = None, measure: bool = False, **overrides: Any) -> Price:
    """P, M at ``seq_len``, the head's FLOPs and the concept count of ``family`` at size ``size``
    (defined on ``base`` when not known yet) as trained with ``data`` and ``overrides``;
    ``measure``: measured even where the family has formulas (to check them)."""
    if seq_len is not None and int(seq_len) <= 0:
        raise ValueError(f"seq_len must be a positive int, got {seq_len!r}")
    spec, size = get_family(family), resolve_size(size, base)
    cfg = model_config(family, size, data=data, **overrides)
    P = None if spec.params_fn is None or measure else spec.params_fn(size, data=data, **overrides)
    M = None if spec.flops_fn is None or seq_len is None or measure else spec.flops_fn(size, int(seq_len), data=data,
                                                                                       **overrides)
    how, key = "analytic", _key(family, data, overrides)
    if P is None or (seq_len is not None and M is None):
        (P, M), how = _measure(family, size, key, None if seq_len is None else int(seq_len)), "measured"
    elif not spec.builtin:
        _build(family, size, key)  # a plugin's formulas price it; its model is still checked
    n_concepts = int(getattr(cfg, "n_concepts", 0) or 0) if spec.is_concept else 0
    return Price(int(P), None if M is None else float(M), _head_flops(cfg), n_concepts, how)


def params_nonembedding(family: str, size: str, **kw: Any) -> int:
    return price(family, size, **kw).params


def flops_per_token(family: str, size: str, seq_len: int, **kw: Any) -> float:
    return price(family, size, seq_len, **kw).flops_per_token


def model_config(family: str, size: str, *, data: DataFields = DataFields(), **overrides: Any) -> Any:
    """The config ``build_model`` would give the model, without allocating: the family's
    ``config_fn``, else read off its (cached) meta build."""
    spec = get_family(family)
    if spec.config_fn is not None:
        return spec.config_fn(size, data=data, **overrides)
    return getattr(_build(family, size, _key(family, data, overrides)), "config", None)


def _head_flops(cfg: Any) -> float:
    """Forward + backward FLOPs per token of the d × V LM head, 2dV + 4dV (not in Eq. 23), from
    the config's ``d_model`` and ``vocab_size``; 0 when it names neither."""
    d, V = getattr(cfg, "d_model", None), getattr(cfg, "vocab_size", None)
    return 6.0 * d * V if d and V else 0.0


# ---- the protocol, checked on the meta build --------------------------------------------------
PROTOCOL = ("a model with loss(batch, step) -> LossOutput and a `config` record with `family`, `size` and "
            "to_dict() (checkpoints store it); name the width d_model, the vocabulary vocab_size, the depth "
            "n_layers (docs/own-model.md, 'The model protocol')")


def check_protocol(family: str, model: Any) -> None:
    """A UserError naming what the model protocol requires and what ``model`` lacks."""
    cfg = getattr(model, "config", None)
    missing = [what for what, ok in (
        ("loss(batch, step)", callable(getattr(model, "loss", None))),
        ("a `config` attribute", cfg is not None),
        ("config.family", cfg is None or hasattr(cfg, "family")),
        ("config.size", cfg is None or hasattr(cfg, "size")),
        ("config.to_dict()", cfg is None or callable(getattr(cfg, "to_dict", None))
         or hasattr(cfg, "__dataclass_fields__"))) if not ok]
    if missing:
        raise UserError(f"family {family!r}: its builder returns a {type(model).__name__} without "
                        f"{', '.join(missing)}; the model protocol requires {PROTOCOL}")


# ---- measured: one meta build per arguments -----------------------------------------------------
def nonembedding_params(model: nn.Module, vectors: bool = False) -> int:
    """Parameters except token embeddings (``parameters()`` yields a shared tensor once); ``vectors``:
    only those of fewer than 2 dimensions (norms, biases)."""
    emb = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    return int(sum(p.numel() for p in model.parameters() if id(p) not in emb and (p.ndim < 2 or not vectors)))


class _Eq23Counts(TorchFunctionMode):
    """Books Eq. 23's attention, 12·d_attn·N per query position, for each
    ``scaled_dot_product_attention`` call (replaced by a FLOP-free stand-in of the same shape whose
    gradient still reaches q, k and v), and the positions the token embedding looked up."""

    def __init__(self, seq_len: int) -> None:
        super().__init__()
        self.seq_len, self.attention, self.positions = seq_len, 0.0, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            q, k, v = args[:3]
            B, H, T, hd = q.shape
            self.attention += B * T * paper.attention_flops(1, H * hd, self.seq_len)  # Eq. 23, one layer
            return q * 0 + (k.sum() + v.sum()) * 0
        if func is F.embedding and self.positions is None:  # the first lookup: the token embedding
            self.positions = int(args[0].numel())
        return func(*args, **kwargs)


def _batch(model: nn.Module, seq_len: int, concept: bool) -> Batch:
    """A [1, seq_len] batch of token 0 (one chunk of no concepts for a concept family)."""
    tokens = torch.zeros(1, seq_len, dtype=torch.long, device="meta")
    n = int(getattr(getattr(model, "config", None), "n_concepts", 0) or 0)
    if not (concept and n):
        return Batch(tokens)
    return Batch(tokens, torch.zeros_like(tokens), torch.zeros(1, 1, n, device="meta"))


def count_flops(model: nn.Module, seq_len: int, *, concept: bool = False) -> float:
    """M per trained token of a model on the meta device: the matmul FLOPs of one ``loss``
    forward + backward of a [1, N] batch and Eq. 23's attention, over the positions the model
    ran on (N, or N - 1 for a loss on ``tokens[:, :-1]``), + 6 per vector parameter (Eq. 23's
    6P books norms and biases), less the LM head's 6·d·V; ``concept``: concept labels in the batch."""
    counter, eq23 = FlopCounterMode(display=False), _Eq23Counts(seq_len)
    with counter, eq23:
        model.loss(_batch(model, seq_len, concept), 0).total.backward()
    positions = eq23.positions if eq23.positions and eq23.positions <= seq_len else seq_len
    total = (counter.get_total_flops() + eq23.attention) / positions
    vectors = nonembedding_params(model, vectors=True)
    return total + 6.0 * vectors - _head_flops(getattr(model, "config", None))


def _key(family: str, data: DataFields, overrides: dict[str, Any]) -> str:
    """The cache key of one build: its arguments and the builder registered now (a family
    registered again with ``overwrite=True`` is measured again)."""
    return json.dumps({"builder": id(get_family(family).builder), "data": data.to_dict(), "overrides": overrides},
                      sort_keys=True, default=str)


@lru_cache(maxsize=256)
def _build(family: str, size: str, key: str) -> nn.Module:
    args = json.loads(key)
    BUILDS["count"] += 1  # lru_cache: once per (family, size, arguments)
    with torch.device("meta"):
        model = build_model(family, size, data=DataFields.from_dict(args["data"]), **args["overrides"])
    check_protocol(family, model)
    return model


@lru_cache(maxsize=1024)
def _measure(family: str, size: str, key: str, seq_len: Optional[int]) -> tuple[int, Optional[float]]:
    model = _build(family, size, key)
    model.zero_grad(set_to_none=True)
    M = None if seq_len is None else count_flops(model, seq_len, concept=get_family(family).is_concept)
    return nonembedding_params(model), M
