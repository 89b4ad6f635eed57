"""Exact attribution: input IG from the [MASK] embedding (Eq. 16) and chunk-level concept
contributions (Eq. 17), both built on the model's own forward."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from interpscale.models.types import evaluating
from interpscale.errors import UserError


@dataclass(frozen=True)
class IGResult:
    """Per-token scores φ [B, T]; ``delta`` = ℓ_y(x) − ℓ_y(baseline) [B]; ``completeness_error``
    = |Σφ − delta| / |delta| (Sundararajan et al.'s completeness check)."""

    scores: torch.Tensor
    delta: torch.Tensor
    completeness_error: torch.Tensor


def integrated_gradients(model, tokens: torch.Tensor, position: int, target: int | torch.Tensor, *,
                         steps: int = 64, positions: Optional[torch.Tensor] = None,
                         method: str = "midpoint", batch_size: int = 16) -> IGResult:
    """Eq. 16: IG of the logit ℓ_y at ``position`` along T_[MASK] → T_x for the tokens of ``positions``
    [T] bool (default: all); ``method``: Eq. 16's right ends s/S or midpoints (s − ½)/S, error O(1/S²)."""
    if method not in ("midpoint", "right"):
        raise ValueError(f"method must be 'midpoint' or 'right', got {method!r}")
    tokens = model.check_tokens(tokens)
    B, T = tokens.shape
    if not 0 <= position < T:
        raise ValueError(f"position {position} outside [0, {T})")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    target = torch.as_tensor(target, device=tokens.device).long().expand(B)
    emb = model.backbone.embed.weight
    x = emb[tokens].detach()  # [B, T, d]
    sel = torch.ones(T, dtype=torch.bool, device=tokens.device) if positions is None else positions.bool()
    base = torch.where(sel[None, :, None], emb[model.config.mask_id].detach().expand_as(x), x)
    diff = x - base
    with evaluating(model):
        grads = torch.zeros_like(x)
        alphas = torch.arange(1, steps + 1, dtype=x.dtype, device=x.device)
        alphas = (alphas - 0.5 if method == "midpoint" else alphas) / steps
        for chunk in alphas.split(batch_size):
            path = (base[None] + chunk[:, None, None, None] * diff[None]).reshape(-1, T, x.size(-1))
            path.requires_grad_(True)
            out = model.run(None, embeds=path)
            ell = out.logits[:, position].gather(-1, target.repeat(len(chunk))[:, None]).sum()
            (g,) = torch.autograd.grad(ell, path)
            grads += g.view(len(chunk), B, T, -1).sum(0)
        with torch.no_grad():
            ends = model.run(None, embeds=torch.cat([x, base])).logits[:, position]
            ell_end = ends.gather(-1, target.repeat(2)[:, None]).squeeze(-1)
    scores = (diff * grads / steps).sum(-1)  # Eq. 16
    delta = ell_end[:B] - ell_end[B:]
    err = (scores.sum(-1) - delta).abs() / delta.abs().clamp_min(1e-12)
    return IGResult(scores.detach(), delta.detach(), err.detach())


@dataclass(frozen=True)
class ConceptContributions:
    """Eq. 17 per chunk: ``known`` [B, C, n], ``unknown`` [B, C, m], ``residual`` [B, C];
    ``total`` [B, C] = Σ_t ℓ_{y_t} over the chunk, equal to known.sum + unknown.sum + residual."""

    known: torch.Tensor
    unknown: torch.Tensor
    residual: torch.Tensor
    total: torch.Tensor


@torch.no_grad()
def concept_contributions(model, tokens: torch.Tensor, chunk_ids: torch.Tensor, *,
                          targets: Optional[torch.Tensor] = None, n_chunks: Optional[int] = None) -> ConceptContributions:
    """Γ^known_i = Σ_{t∈chunk} k_{i,t} K_iᵀ W_{y_t}, Γ^unknown_j likewise, plus the residual, for
    the ``targets`` y_t [B, T] (default: the argmax), with the activations composed (after top-k)."""
    if getattr(model, "concept", None) is None:
        raise UserError(f"family {model.config.family!r} has no concept module")
    tokens = model.check_tokens(tokens)
    if chunk_ids.shape != tokens.shape:
        raise ValueError(f"chunk_ids shape {tuple(chunk_ids.shape)} != tokens shape {tuple(tokens.shape)}")
    with evaluating(model):
        out = model.run(tokens)
    cm = model.concept
    targets = out.logits.argmax(-1) if targets is None else targets
    W_y = model.lm_head[targets]  # [B, T, d]
    k, u = out.parts.sparse_acts()  # the activations that entered k̂ and û
    per_known = k * (W_y @ cm.known_emb.T)  # [B, T, n]
    if cm.unk_down is not None:
        per_unknown = u * ((W_y @ cm.unk_b.T) @ cm.unk_a.T)  # U_jᵀ W_y through the factors
    else:
        per_unknown = u * (W_y @ cm.unk_emb.T)
    per_res = (out.residual * W_y).sum(-1, keepdim=True)  # [B, T, 1], and ℓ_{y_t} beside it
    C = int(chunk_ids.max()) + 1 if n_chunks is None else n_chunks
    inside = (chunk_ids >= 0).to(per_known.dtype)[..., None]
    idx = chunk_ids.clamp(min=0)[..., None]

    def pool(x):  # [B, T, k] summed over the tokens of each chunk: [B, C, k]
        return x.new_zeros(x.size(0), C, x.size(-1)).scatter_add(1, idx.expand_as(x), x * inside)

    residual, total = pool(torch.cat([per_res, out.logits.gather(-1, targets[..., None])], -1)).unbind(-1)
    return ConceptContributions(pool(per_known), pool(per_unknown), residual, total)
