"""Data contracts shared by the zoo, the training loop, the metrics and the judges: what crosses
a subpackage boundary is one of these small dataclasses."""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator, Literal, Mapping, Optional, Union

import torch

# Special token ids reserved at the bottom of every vocabulary this project builds (the bundled
# tokenizer and interpscale.data's BPEs): the defaults of every config's pad_id / eos_id / eoc_id /
# mask_id; model code reads the config, so a pretrained tokenizer's ids can be passed instead.
PAD_ID = 0
EOS_ID = 1
EOC_ID = 2  # end-of-chunk: closes each concept-annotated chunk (paper §4.5.2)
MASK_ID = 3  # diffusion [MASK]; also the "absence" baseline for IG (Eq. 16)
SPECIAL_TOKENS = ("[PAD]", "[EOS]", "[EOC]", "[MASK]")
# by name (a prepared corpus' ``special_ids`` keys; with "_id", the config fields) -> id, -> text
SPECIAL_IDS = {"pad": PAD_ID, "eos": EOS_ID, "eoc": EOC_ID, "mask": MASK_ID}
SPECIAL_TEXT = dict(zip(SPECIAL_IDS, SPECIAL_TOKENS))

Phase = Literal["stable", "anneal"]


@dataclass(frozen=True)
class DataFields:
    """What the training data decides about a model, the one argument builders get for it: the
    tokenizer's ``vocab_size`` (the model's may be larger), the concept library's ``n_concepts``
    (concept families only), ``special_ids`` ``{"pad", "eos", "eoc", "mask"} -> id`` where they
    differ from ``SPECIAL_IDS``. ``None`` / missing keys mean "the family's default"."""

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


@dataclass
class Batch:
    """One training / evaluation batch; the concept fields are None without concept annotations."""

    tokens: torch.Tensor  # [B, T] int64 ids (clean, never containing [MASK])
    chunk_ids: Optional[torch.Tensor] = None  # [B, T] int64: chunk per token (chunk_labels axis 1), -1: none
    chunk_labels: Optional[torch.Tensor] = None  # [B, C, n] float {0,1} multi-hot known concepts per chunk
    valid: Optional[torch.Tensor] = None  # [B, T] bool, False on padding; None: all valid

    def to(self, device: torch.device | str) -> "Batch":
        move = lambda x: None if x is None else x.to(device, non_blocking=True)  # noqa: E731
        return Batch(move(self.tokens), move(self.chunk_ids), move(self.chunk_labels), move(self.valid))

    @property
    def n_tokens(self) -> int:
        return int(self.tokens.numel() if self.valid is None else self.valid.sum())


@dataclass
class ModelOutput:
    """What every family's ``forward`` returns: ``logits`` [B, T, V] and the backbone output
    ``hidden`` h. For concept families ``known + unknown + residual`` ([B, T, d] each) is the
    bottlenecked h~ whose LM-head image equals ``logits`` exactly (Eqs. 5, 8); ``known_act`` [B, T, n]
    / ``unknown_act`` [B, T, m] are k, u (Eq. 6); ``parts`` is the ``ConceptParts`` record."""

    logits: torch.Tensor
    hidden: Optional[torch.Tensor] = None
    known: Optional[torch.Tensor] = None
    unknown: Optional[torch.Tensor] = None
    residual: Optional[torch.Tensor] = None
    known_act: Optional[torch.Tensor] = None
    unknown_act: Optional[torch.Tensor] = None
    parts: Optional[Any] = None


@dataclass
class LossOutput:
    """``total`` to backpropagate (Eq. 15); ``parts`` detached 0-d tensors (no host sync in the
    step) named as in the paper (``lm``, ``concept``, ``rec``, ``indep``, ...); ``n_tokens`` the
    positions the LM loss averaged over."""

    total: torch.Tensor
    parts: dict[str, Union[torch.Tensor, float]] = field(default_factory=dict)
    n_tokens: Union[torch.Tensor, int] = 0


@dataclass(frozen=True)
class PhaseSchedule:
    """Where training is: ``phase``; ``max_steps`` (T_max of the stable run, Table 25's α ramps);
    in the anneal, ``anneal_steps`` (the 20% decay, Table 26's α_known 0.5→0 ramp) counted from
    the global step ``anneal_start``."""

    phase: Phase = "stable"
    max_steps: int = 1
    anneal_steps: int = 0
    anneal_start: int = 0


@contextlib.contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """``model`` in eval mode (dropout off) inside the block; its train/eval state restored after."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
