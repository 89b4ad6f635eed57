"""Data contracts shared by the zoo, the training loop, the metrics and the judges.

Everything that crosses a subpackage boundary is one of these small dataclasses, so
orchestration and metrics can be written against the zoo without knowing its internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

import torch

# Special token ids reserved at the bottom of every vocabulary this project builds
# (the bundled tokenizer and the BPEs that interpscale.data trains both honour them).
# These are the defaults of ModelConfig's pad_id / eos_id / eoc_id / mask_id; model code
# reads the config, so a pretrained tokenizer's ids can be passed as build_model overrides.
PAD_ID = 0
EOS_ID = 1
EOC_ID = 2  # end-of-chunk: closes each concept-annotated chunk (paper §4.5.2)
MASK_ID = 3  # diffusion [MASK]; also the "absence" baseline for IG (Eq. 16)
SPECIAL_TOKENS = ("[PAD]", "[EOS]", "[EOC]", "[MASK]")
# the same four by name (the keys of a prepared corpus' ``special_ids`` and, with "_id", of the
# model config's fields) -> default id, and -> the token's text
SPECIAL_IDS = {"pad": PAD_ID, "eos": EOS_ID, "eoc": EOC_ID, "mask": MASK_ID}
SPECIAL_TEXT = dict(zip(SPECIAL_IDS, SPECIAL_TOKENS))

Phase = Literal["stable", "anneal"]


@dataclass
class Batch:
    """One training / evaluation batch.

    tokens:       [B, T] int64 token ids (clean, never containing [MASK]).
    chunk_ids:    [B, T] int64, index of the chunk each token belongs to along the
                  second axis of ``chunk_labels`` (per row); -1 for tokens in no chunk.
    chunk_labels: [B, C, n] float {0,1} multi-hot known-concept labels per chunk.
    valid:        [B, T] bool, False on padding; None means all valid.
    Concept fields are None for data without concept annotations.
    """

    tokens: torch.Tensor
    chunk_ids: Optional[torch.Tensor] = None
    chunk_labels: Optional[torch.Tensor] = None
    valid: Optional[torch.Tensor] = None

    def to(self, device: torch.device | str) -> "Batch":
        move = lambda x: None if x is None else x.to(device, non_blocking=True)  # noqa: E731
        return Batch(move(self.tokens), move(self.chunk_ids), move(self.chunk_labels), move(self.valid))

    @property
    def n_tokens(self) -> int:
        return int(self.tokens.numel() if self.valid is None else self.valid.sum())


@dataclass
class ModelOutput:
    """What every family's ``forward`` returns.

    logits: [B, T, V].  For concept families ``known + unknown + residual`` ([B, T, d]
    each) is the bottlenecked hidden state h~ whose LM-head image equals ``logits``
    exactly (Eq. 5, Eq. 8).  ``known_act`` [B, T, n] / ``unknown_act`` [B, T, m] are the
    sigmoid activations k, u (Eq. 6).  ``hidden`` is the backbone output h.  ``parts``
    holds the concept module's full record (``ConceptParts``) for attribution.
    """

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
    """``total`` is the scalar to backpropagate (Eq. 15); ``parts`` are detached 0-d
    tensors (no host sync inside the step; ``float(v)`` reads one) named as in the paper
    (``lm``, ``concept``, ``rec``, ``indep``, ...); ``n_tokens`` counts the positions the LM
    loss averaged over (a 0-d tensor for the Steerling families)."""

    total: torch.Tensor
    parts: dict[str, Union[torch.Tensor, float]] = field(default_factory=dict)
    n_tokens: Union[torch.Tensor, int] = 0


@dataclass(frozen=True)
class PhaseSchedule:
    """Where training is: ``phase`` (stable or anneal), ``max_steps`` (T_max of the stable
    run, used by the α ramps of Table 25) and, in the anneal phase, ``anneal_steps`` (the
    length of the 20% linear decay, used by Table 26's α_known 0.5→0 ramp).
    ``anneal_start`` is the global step at which the anneal began (the anneal ramps use
    ``step - anneal_start``; leave 0 if the loop counts anneal steps from zero)."""

    phase: Phase = "stable"
    max_steps: int = 1
    anneal_steps: int = 0
    anneal_start: int = 0
