"""The one price of a (family, size), :func:`price`: P and M per trained token from the family's
formulas (Eq. 23 / Eq. 24 for the Steerling families), else measured on the meta device, where the
values the model reads off its batch are the batch's own (:class:`_BatchValues`), else -- a model
that reads a value computed from its weights -- in a real forward and backward on the CPU
(docs/own-model.md, "Pricing a family without formulas"), on a build that checks the protocol."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import FlopCounterMode
from torch.utils.weak import WeakIdKeyDictionary

from interpscale import paper
from interpscale.errors import UserError
from interpscale.models.registry import build_model, get_family, resolve_size
from interpscale.models.types import SPECIAL_IDS, Batch, DataFields

BUILDS = {"count": 0}  # meta builds made in this process (the planner's tests read it)
# a model the meta device cannot price is priced by a real CPU forward up to this many parameters
# (with their gradients ~8 bytes each); a larger one needs formulas (docs/own-model.md)
CPU_MEASURE_MAX_PARAMS = 250_000_000


@dataclass(frozen=True)
class Price:
    """One (family, size) as the planner prices it: non-embedding ``params`` P, ``flops_per_token``
    M (Eq. 23/24, or measured; None without a sequence length), the LM head's 6·d·V, the concept
    count it is built with (0 without concepts) and ``how``: "analytic" (the family's formulas),
    "measured" (counted on the meta device) or "measured-cpu" (counted in a real forward and
    backward on the CPU: the model reads a value the meta device does not have)."""

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
        P, M, how = _measure(family, size, key, None if seq_len is None else int(seq_len))
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


class _BatchValues(TorchDispatchMode):
    """The values of the pricing batch and of every tensor computed from it alone (no weight),
    kept on the CPU beside their meta tensors, so that a model reading one (``int(tokens.min())``
    in an input check, a mask's ``nonzero``) reads the batch's own value and takes the path it
    takes on real data; a value computed from the weights stays unreadable (the meta error).
    Tensors over ``max_numel`` elements are not kept."""

    def __init__(self, max_numel: int = 1 << 22) -> None:
        super().__init__()
        self.values, self.max_numel = WeakIdKeyDictionary(), max_numel

    def _real(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.is_meta:
            return self.values[x]
        return torch.device("cpu") if isinstance(x, torch.device) and x.type == "meta" else x

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        metas = [t for t in _tensors(args, kwargs) if t.is_meta]
        known = bool(metas) and all(t in self.values for t in metas)
        if not known:  # the model's own computation (weights, activations, gradients): as it is
            if metas and func._schema.is_mutable:  # a batch value written from the weights: unknown now
                for t in metas:
                    self.values.pop(t, None)
            return func(*args, **kwargs)
        if func is torch.ops.aten._local_scalar_dense.default:
            return self.values[args[0]].item()
        try:
            out = func(*args, **kwargs)
        except (RuntimeError, NotImplementedError):  # an output shape that depends on values (nonzero)
            out = None
        if (out is None or sum(t.numel() for t in tree_flatten(out)[0]
                                         if isinstance(t, torch.Tensor)) <= self.max_numel):
            real = func(*tree_map(self._real, args), **tree_map(self._real, kwargs))
            if out is None:
                out = tree_map(lambda r: torch.empty_strided(r.shape, r.stride(), dtype=r.dtype, device="meta")
                               if isinstance(r, torch.Tensor) else r, real)
            for m, r in zip(tree_flatten(out)[0], tree_flatten(real)[0]):
                if isinstance(m, torch.Tensor) and m.is_meta and isinstance(r, torch.Tensor):
                    self.values[m] = r
        return out


def _tensors(args: tuple, kwargs: dict):
    """The tensors among an op's arguments (and in its list arguments: ``cat``, ``index``)."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (x for x in a if isinstance(x, torch.Tensor))


def _tokens(model: nn.Module, seq_len: int) -> torch.Tensor:
    """[1, seq_len] ordinary token ids (no special id of the config or of ``SPECIAL_IDS``), cycling
    through the vocabulary's first ones; zeros where the config names no vocabulary."""
    cfg = getattr(model, "config", None)
    V = int(getattr(cfg, "vocab_size", 0) or 0)
    special = set(SPECIAL_IDS.values()) | {getattr(cfg, f"{k}_id", None) for k in SPECIAL_IDS}
    ids = [i for i in range(min(V, seq_len + 2 * len(special))) if i not in special] or [0]
    return torch.tensor([[ids[t % len(ids)] for t in range(seq_len)]], dtype=torch.long)


def _batch(model: nn.Module, seq_len: int, concept: bool, device: str) -> tuple[Batch, list[tuple[Any, Any]]]:
    """A [1, seq_len] batch of ordinary tokens (:func:`_tokens`; one chunk of no concepts for a
    concept family) on ``device``, and (its tensor, the tensor's CPU value) pairs."""
    real = {"tokens": _tokens(model, seq_len)}
    n = int(getattr(getattr(model, "config", None), "n_concepts", 0) or 0)
    if concept and n:
        real |= {"chunk_ids": torch.zeros(1, seq_len, dtype=torch.long), "chunk_labels": torch.zeros(1, 1, n)}
    on = {k: v.to(device) for k, v in real.items()}
    return Batch(**on), [(on[k], real[k]) for k in real]


def count_flops(model: nn.Module, seq_len: int, *, concept: bool = False) -> float:
    """M per trained token of a model on the meta device (or, built there, on the CPU): the
    matmul FLOPs of one ``loss`` forward + backward of a [1, N] batch and Eq. 23's attention,
    over the positions the model ran on (N, or N - 1 for a loss on ``tokens[:, :-1]``), + 6 per
    vector parameter (Eq. 23's 6P books norms and biases), less the LM head's 6·d·V;
    ``concept``: concept labels in the batch. On the meta device the batch's values are there to
    read (:class:`_BatchValues`)."""
    device = next((p.device.type for p in model.parameters()), "meta")
    batch, pairs = _batch(model, seq_len, concept, device)
    values, counter, eq23 = _BatchValues(), FlopCounterMode(display=False), _Eq23Counts(seq_len)
    for t, value in pairs:
        values.values[t] = value
    with values, counter, eq23:  # the counter innermost: the CPU copies of batch values go uncounted
        model.loss(batch, 0).total.backward()
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
def _measure(family: str, size: str, key: str, seq_len: Optional[int]) -> tuple[int, Optional[float], str]:
    """(P, M, how): counted on the meta build, else (the model reads a value computed from its
    weights) on a real CPU build of up to ``CPU_MEASURE_MAX_PARAMS`` parameters."""
    model = _build(family, size, key)
    model.zero_grad(set_to_none=True)
    P = nonembedding_params(model)
    if seq_len is None:
        return P, None, "measured"
    concept = get_family(family).is_concept
    try:
        return P, count_flops(model, seq_len, concept=concept), "measured"
    except (RuntimeError, NotImplementedError) as exc:
        if "meta" not in str(exc).lower():
            raise
        reason = str(exc).split("\n")[0]
    n = sum(p.numel() for p in model.parameters())
    if n > CPU_MEASURE_MAX_PARAMS:
        raise UserError(f"family {family!r} size {size}: its loss reads a value the meta device does not have "
                        f"({reason}) and {n:,} parameters are too many to price by a CPU forward "
                        f"(at most {CPU_MEASURE_MAX_PARAMS:,}); register the family with params_fn and flops_fn, "
                        "or read such values only off real tensors (`if not x.is_meta`) "
                        "(docs/own-model.md, 'Pricing a family without formulas')")
    args = json.loads(key)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        cpu = build_model(family, size, data=DataFields.from_dict(args["data"]), **args["overrides"])
    return P, count_flops(cpu, seq_len, concept=concept), "measured-cpu"
