"""The model protocol: what the trainer, the evaluator, the planner and checkpointing need
(docs/own-model.md). Required: a builder ``builder(size, *, data: DataFields, **overrides)``
and a model with ``loss(batch, step) -> LossOutput`` and a ``config`` (``family``, ``size``,
``to_dict()``). Optional, with the defaults of :class:`FamilyModel` (and of the helpers below,
which the trainer calls so that any object with a ``loss`` works): ``check_batch``,
``set_phase``, ``params_nonembedding`` / ``flops_per_token``, ``generate`` and ``blocks``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Optional, Protocol, runtime_checkable

import torch
import torch.nn as nn
import torch.nn.functional as F

from interpscale.models.types import SPECIAL_IDS, Batch, LossOutput, PhaseSchedule


@dataclass(frozen=True)
class DataFields:
    """What the training data decides about a model, the one argument builders get for it: the
    tokenizer's ``vocab_size`` (the model's may be larger), the concept library's ``n_concepts``
    (concept families only), ``special_ids`` ``{"pad", "eos", "eoc", "mask"} -> id`` where they
    differ from ``types.SPECIAL_IDS``. ``None`` / missing keys mean "the family's default"."""

    vocab_size: Optional[int] = None
    n_concepts: Optional[int] = None
    special_ids: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.special_ids) - set(SPECIAL_IDS))
        if unknown:
            raise ValueError(f"DataFields.special_ids: unknown name(s) {unknown}; known: {sorted(SPECIAL_IDS)}")
        object.__setattr__(self, "special_ids", {k: int(v) for k, v in self.special_ids.items()})

    def config_fields(self, *, concept: bool) -> dict[str, int]:
        """The fields under config names (``vocab_size``, ``n_concepts``, ``<name>_id``); ``n_concepts``
        only for a concept family."""
        out = {} if self.vocab_size is None else {"vocab_size": int(self.vocab_size)}
        if concept and self.n_concepts is not None:
            out["n_concepts"] = int(self.n_concepts)
        return out | {f"{k}_id": v for k, v in self.special_ids.items()}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"special_ids": dict(self.special_ids)}

    @classmethod
    def from_dict(cls, d: Optional[Mapping[str, Any]]) -> "DataFields":
        return cls(**dict(d or {}))


@runtime_checkable
class LanguageModel(Protocol):
    """The required part of a model: a config record and the training loss."""

    config: Any

    def loss(self, batch: Batch, step: int) -> LossOutput: ...


def find_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's transformer blocks: ``model.blocks()`` if it is a method, else the children
    of the first ``nn.ModuleList`` whose attribute path ends in ``blocks``."""
    own = getattr(model, "blocks", None)
    if callable(own) and not isinstance(own, nn.Module):
        return list(own())
    for name, m in model.named_modules():
        if name.endswith("blocks") and isinstance(m, nn.ModuleList):
            return list(m)
    return []


def set_phase(model: Any, phase: PhaseSchedule) -> None:
    """``model.set_phase(phase)`` where the model has it, else ``model.phase = phase``."""
    if callable(getattr(model, "set_phase", None)):
        model.set_phase(phase)
    else:
        model.phase = phase


def check_batch(model: Any, batch: Batch) -> None:
    if callable(getattr(model, "check_batch", None)):
        model.check_batch(batch)


class FamilyModel(nn.Module):
    """A base class supplying the protocol's optional parts; subclass it and write
    ``__init__``, ``forward(tokens) -> ModelOutput | logits`` and ``loss``."""

    config: Any

    def __init__(self) -> None:
        super().__init__()
        self.phase = PhaseSchedule()

    @property
    def is_diffusion(self) -> bool:  # registry facts
        return _registry().get_family(self.config.family).is_diffusion

    @property
    def is_concept(self) -> bool:
        return _registry().get_family(self.config.family).is_concept

    def check_batch(self, batch: Batch) -> None:
        return None

    def set_phase(self, phase: PhaseSchedule) -> None:
        self.phase = phase

    def params_nonembedding(self) -> int:
        return _registry().params_nonembedding(self.config.family, self.config.size, **build_args(self))

    def flops_per_token(self, seq_len: int) -> float:
        return _registry().flops_per_token(self.config.family, self.config.size, seq_len, **build_args(self))

    @torch.no_grad()
    def generate(self, tokens: torch.Tensor, max_new_tokens: int, *, temperature: float = 0.0,
                 seed: int = 0) -> torch.Tensor:
        """Greedy (temperature 0) or sampled continuation, the context cropped to ``config.max_seq_len``."""
        gen = torch.Generator(device=tokens.device).manual_seed(seed)
        window = int(getattr(self.config, "max_seq_len", 0) or tokens.size(1) + max_new_tokens)
        for _ in range(max_new_tokens):
            out = self(tokens[:, -window:])
            logits = (out if isinstance(out, torch.Tensor) else out.logits)[:, -1]
            if temperature <= 0:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                nxt = torch.multinomial(F.softmax(logits / temperature, -1), 1, generator=gen)
            tokens = torch.cat([tokens, nxt], dim=1)
        return tokens


def _registry():
    from interpscale.models import registry  # it imports this module

    return registry


BUILD_ATTR = "_interpscale_build"  # where build_model records (data, overrides) on the model


def build_args(model: nn.Module) -> dict[str, Any]:
    """The ``data=`` and overrides ``build_model`` built ``model`` with (``{}`` when unknown)."""
    rec = getattr(model, BUILD_ATTR, None) or {}
    return {"data": DataFields.from_dict(rec.get("data")), **dict(rec.get("overrides") or {})}
