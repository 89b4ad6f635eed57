"""Interpretability metrics of Steerling §7 (Table 5) on held-out annotated chunks: concept
loss (Eq. 9-10, OR-aggregated BCE, mean over chunks of the sum over concepts), concept
independence (Eq. 13-14, per batch of B token representations, mean over batches) and concept
contribution (Eq. 22, mean over predictions, the prediction being the arg-max token y), and
the inputs of known concept alignment: each concept's top-K tokens T_k(c) = TopK(W K_c) under
the LM head, handed to the alignment judge of ``interpscale.judges``.
Diffusion models are read off one forward pass of the input masked at ``mask_rate`` (0.5,
Eq. 36's setting), predictions at the masked positions; AR models see clean input.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

import torch
from torch import nn
from tqdm.auto import tqdm

from interpscale.metrics._common import (checked_batches, eval_mode, family_name, is_diffusion, model_device,
                                         seeded_generator, special_id, valid_mask)
from interpscale.metrics.loss import draw_mask
from interpscale.models.types import Batch, ModelOutput
from interpscale.errors import UserError

LOG_CLAMP = -100.0  # same floor torch's binary_cross_entropy puts on log terms


def concept_loss_terms(known_act: torch.Tensor, chunk_ids: torch.Tensor, chunk_labels: torch.Tensor,
                       valid: torch.Tensor) -> tuple[float, int]:
    """Summed Eq. 10 over the chunks of one batch, and the number of chunks seen; known_act
    [B, T, n] (sigmoid k), chunk_ids [B, T] (-1 outside chunks), chunk_labels [B, C, n] multi-hot."""
    B, T, n = known_act.shape
    C = chunk_labels.shape[1]
    if chunk_labels.shape[2] != n:
        raise ValueError(f"chunk_labels has {chunk_labels.shape[2]} concepts, model has {n}")
    keep = valid & (chunk_ids >= 0)
    if bool((chunk_ids[keep] >= C).any()):
        raise ValueError(f"chunk_ids index past chunk_labels' {C} chunks")
    rows = torch.arange(B, device=chunk_ids.device).unsqueeze(1).expand(B, T)
    gidx = (rows * C + chunk_ids)[keep]  # chunk index over the whole batch
    log1m_k = torch.log1p(-known_act.double().clamp(0.0, 1.0))[keep].clamp_min(LOG_CLAMP)
    # Eq. 9: log(1 - k_chunk) = sum_t log(1 - k_t) over the chunk's tokens
    s = torch.zeros(B * C, n, dtype=torch.float64, device=known_act.device).index_add_(0, gidx, log1m_k)
    seen = torch.zeros(B * C, dtype=torch.bool, device=known_act.device)
    seen[gidx] = True
    s = s[seen]
    y = chunk_labels.reshape(B * C, n)[seen].double()
    log_kc = torch.log(-torch.expm1(s)).clamp_min(LOG_CLAMP)  # log(1 - prod(1 - k_t))
    bce = -(y * log_kc + (1 - y) * s.clamp_min(LOG_CLAMP)).sum(-1)
    return float(bce.sum()), int(seen.sum())


def concept_independence(k_hat: torch.Tensor, u_hat: torch.Tensor) -> float:
    """Eq. 14 on B token representations: ||Psi^T Phi||_F^2 / (d^2 (B - 1)), k_hat/u_hat [B, d]."""
    if k_hat.shape != u_hat.shape or k_hat.dim() != 2:
        raise ValueError(f"k_hat and u_hat must both be [B, d], got {tuple(k_hat.shape)} and {tuple(u_hat.shape)}")
    Bn, d = k_hat.shape
    if Bn < 2:
        raise ValueError(f"independence needs at least 2 token representations, got {Bn}")
    phi = k_hat.double() - k_hat.double().mean(0)  # Eq. 13
    psi = u_hat.double() - u_hat.double().mean(0)
    return float((psi.T @ phi).pow(2).sum() / (d * d * (Bn - 1)))


def concept_contribution(known: torch.Tensor, unknown: torch.Tensor, residual: torch.Tensor,
                         w_y: torch.Tensor) -> torch.Tensor:
    """Eq. 22 per prediction: (|k^T W_y| + |u^T W_y|) / (that + |eps^T W_y|); inputs [N, d]."""
    a, b, c = ((x * w_y).sum(-1).abs() for x in (known, unknown, residual))
    den = a + b + c
    return torch.where(den > 0, (a + b) / den.clamp_min(torch.finfo(den.dtype).tiny), torch.ones_like(den))


def lm_head_weight(model: nn.Module) -> torch.Tensor:
    """The [V, d] LM-head matrix W whose rows W_y give Eq. 8's logit decomposition."""
    for name in ("lm_head", "head", "output"):
        mod = getattr(model, name, None)
        if isinstance(mod, torch.Tensor) and mod.dim() == 2:  # SteerlingLM: tied embedding matrix
            return mod
        if isinstance(mod, nn.Linear):
            return mod.weight
    get = getattr(model, "get_output_embeddings", None)
    if callable(get) and isinstance(get(), nn.Linear):
        return get().weight
    raise ValueError(f"cannot find the LM head of {type(model).__name__} (looked for .lm_head / .head / .output)")


def interp_metrics(model: nn.Module, batches: Iterable[Batch], *, seed: int = 0,
                   mask_rate: Optional[float] = None, progress: bool = False) -> dict[str, float]:
    """``concept_loss``, ``concept_independence``, ``concept_contribution`` of a concept model on
    annotated batches (``chunk_ids`` / ``chunk_labels``); ``seed`` fixes the masks."""
    diffusion = is_diffusion(model)
    if mask_rate is None:
        mask_rate = 0.5 if diffusion else 0.0
    if not 0.0 <= mask_rate < 1.0:
        raise ValueError(f"mask_rate must lie in [0, 1), got {mask_rate}")
    if mask_rate > 0 and not diffusion:
        raise ValueError(f"mask_rate={mask_rate} only applies to diffusion models; {family_name(model)!r} is autoregressive")
    mask_id = special_id(model, "mask_id")
    data = checked_batches(batches, mask_id=mask_id)
    for i, b in enumerate(data):
        if b.chunk_ids is None or b.chunk_labels is None:
            raise UserError(f"batch {i} has no concept annotations (chunk_ids / chunk_labels); interp metrics need annotated chunks")
    device, W = model_device(model), lm_head_weight(model)
    gen = seeded_generator(device, seed, "interp")
    cl_sum, n_chunks, indep, contrib_sum, n_pred = 0.0, 0, [], 0.0, 0
    with eval_mode(model):
        for i, batch in enumerate(tqdm(data, desc="interp metrics", disable=not progress)):
            batch = batch.to(device)
            x, valid = batch.tokens, valid_mask(batch)
            pred = valid
            if diffusion and mask_rate > 0:
                pred, _ = draw_mask(mask_rate, valid, gen)
                x = x.masked_fill(pred, mask_id)
            out: ModelOutput = model(x)
            if any(v is None for v in (out.known, out.unknown, out.residual, out.known_act)):
                raise UserError(f"interp metrics need a concept family (known/unknown/residual outputs); "
                                f"{family_name(model)!r} returned none")
            s, c = concept_loss_terms(out.known_act, batch.chunk_ids, batch.chunk_labels.to(out.known_act.dtype), valid)
            cl_sum, n_chunks = cl_sum + s, n_chunks + c
            if int(valid.sum()) >= 2:
                indep.append(concept_independence(out.known[valid], out.unknown[valid]))
            w_y = W[out.logits[pred].argmax(-1)].to(out.known.dtype)  # the predicted token y's row of W
            cc = concept_contribution(out.known[pred], out.unknown[pred], out.residual[pred], w_y)
            contrib_sum, n_pred = contrib_sum + float(cc.double().sum()), n_pred + int(cc.numel())
    if n_chunks == 0:
        raise UserError("no annotated chunk in the validation set (every chunk_id is -1 or padding)")
    independence = sum(indep) / len(indep) if indep else float("nan")
    return {"concept_loss": cl_sum / n_chunks, "concept_independence": independence,
            "concept_contribution": contrib_sum / max(n_pred, 1)}


def known_concept_embeddings(model: nn.Module) -> torch.Tensor:
    """K [n, d]: the known-concept embedding matrix of a concept family."""
    concept = getattr(model, "concept", None)
    K = getattr(concept, "known_emb", None) if concept is not None else getattr(model, "known_emb", None)
    if not isinstance(K, torch.Tensor):
        raise UserError(f"{family_name(model)!r} has no known-concept embeddings (not a concept family)")
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
        raise UserError(f"{len(cards)} concept cards for a model with {n} known concepts")
    cards = [c if isinstance(c, ConceptCard) else ConceptCard.from_dict(c) for c in cards]
    return score_alignment(cards, alignment_inputs(model, decode, k=k), judge=judge, n_sample=n_sample, seed=seed)
