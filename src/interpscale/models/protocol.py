"""The model protocol (docs/own-model.md, "The model protocol"): the required ``loss`` and
``config``, and the optional parts with :class:`FamilyModel`'s defaults and the helpers the
trainer calls so that any object with a ``loss`` works."""

from __future__ import annotations

from typing import Any, Optional, Protocol, runtime_checkable

import torch
import torch.nn as nn
import torch.nn.functional as F

from interpscale.models.pricing import price
from interpscale.models.registry import BUILD_ATTR, accepted, build_args, get_family
from interpscale.models.types import Batch, DataFields, LossOutput, PhaseSchedule

__all__ = ["BUILD_ATTR", "DataFields", "FamilyModel", "LanguageModel", "build_args", "check_batch", "find_blocks",
           "set_phase"]


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
    ``__init__``, ``forward(tokens) -> ModelOutput | logits`` and ``loss``. This package's classes
    also name their ``config_class`` (checkpoints rebuild through :meth:`from_config`) and price a
    config unbuilt by ``params_fn(config)`` / ``flops_fn(config, seq_len)`` (``registry.register_class``)."""

    config: Any
    config_class: Any = None
    _facts: Optional[tuple[bool, bool]] = None  # the registry's (is_diffusion, is_concept), read once at build

    def __init__(self, config: Any = None) -> None:
        super().__init__()
        self.phase = PhaseSchedule()
        if config is not None:  # compiled code reads the facts: no registry lookup in the graph
            spec = get_family(config.family)
            self.config, self._facts = config, (spec.is_diffusion, spec.is_concept)

    @classmethod
    def from_config(cls, data: dict[str, Any]) -> "FamilyModel":
        return cls(cls.config_class.from_dict(data))

    @property
    def is_diffusion(self) -> bool:
        return self._facts[0] if self._facts else get_family(self.config.family).is_diffusion

    @property
    def is_concept(self) -> bool:
        return self._facts[1] if self._facts else get_family(self.config.family).is_concept

    def check_batch(self, batch: Batch) -> None:
        return None

    def set_phase(self, phase: PhaseSchedule) -> None:
        self.phase = phase

    def params_nonembedding(self) -> int:
        """P of this model: ``pricing.price`` with the arguments it was built with."""
        return price(self.config.family, self.config.size, **self._price_args()).params

    def flops_per_token(self, seq_len: int) -> float:
        """M per trained token at ``seq_len`` (``pricing.price``)."""
        return price(self.config.family, self.config.size, seq_len, **self._price_args()).flops_per_token

    def _price_args(self) -> dict[str, Any]:
        """``build_model``'s arguments, else (built from a config: a checkpoint, a direct
        construction) every config field the family accepts, on the nano base when the size
        is not known here (the fields override every base value)."""
        if getattr(self, BUILD_ATTR, None):
            return build_args(self)
        cfg = self.config
        fields = cfg.to_dict() if callable(getattr(cfg, "to_dict", None)) else dict(vars(cfg))
        fields = {k: v for k, v in fields.items() if k not in ("family", "size")}
        return accepted(cfg.family, fields) | {"base": "nano"}

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
