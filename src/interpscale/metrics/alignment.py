"""Known concept alignment inputs (Steerling §7): each concept's top-K tokens T_k(c) =
TopK(W K_c) under the LM head, handed to the alignment judge of ``interpscale.judges``."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from torch import nn

from interpscale.metrics._common import family_name
from interpscale.metrics.interp import lm_head_weight


def known_concept_embeddings(model: nn.Module) -> torch.Tensor:
    """K [n, d]: the known-concept embedding matrix of a concept family."""
    concept = getattr(model, "concept", None)
    K = getattr(concept, "known_emb", None) if concept is not None else getattr(model, "known_emb", None)
    if not isinstance(K, torch.Tensor):
        raise ValueError(f"{family_name(model)!r} has no known-concept embeddings (not a concept family)")
    return K


def concept_top_tokens(model: nn.Module, k: int = 10, concepts: Optional[Sequence[int]] = None) -> torch.Tensor:
    """Ids [n_sel, k] of the k vocabulary tokens with the largest W K_c, best first."""
    K = known_concept_embeddings(model)
    if concepts is not None:
        K = K[torch.as_tensor(list(concepts), dtype=torch.long, device=K.device)]
    W = lm_head_weight(model)
    if not 1 <= k <= W.shape[0]:
        raise ValueError(f"k must be in [1, {W.shape[0]}], got {k}")
    with torch.no_grad():
        return (K @ W.T).topk(k, dim=-1).indices.cpu()  # [n, V] -> top-k ids


def alignment_inputs(model: nn.Module, decode, *, k: int = 10) -> list[list[str]]:
    """Top-k tokens of every known concept, decoded by ``decode`` (id -> text, or a tokenizer)."""
    dec = (lambda i: decode.decode([int(i)])) if hasattr(decode, "decode") else decode
    return [[dec(i) for i in row] for row in concept_top_tokens(model, k).tolist()]


def known_concept_alignment(model: nn.Module, cards: Sequence[Any], decode, *, judge: Any = None, k: int = 10,
                            n_sample: Optional[int] = None, seed: int = 0):
    """The judges' ``AlignmentResult``: ratings (1-5, App. E) of the top-k tokens of a seeded subset
    of ``n_sample`` concepts against their cards (``cards[i]`` describes known concept i)."""
    from interpscale.judges import ConceptCard, score_alignment

    n = known_concept_embeddings(model).shape[0]
    if len(cards) != n:
        raise ValueError(f"{len(cards)} concept cards for a model with {n} known concepts")
    cards = [c if isinstance(c, ConceptCard) else ConceptCard.from_dict(c) for c in cards]
    return score_alignment(cards, alignment_inputs(model, decode, k=k), judge=judge, n_sample=n_sample, seed=seed)
