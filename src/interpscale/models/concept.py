"""The concept module (§5.3) and its losses (Eqs. 9–14): h̃ = k̂ + û + ε (Eqs. 5–7), exact in eval mode
and under training's teacher forcing and dropouts (docs/models.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from interpscale.models.config import ModelConfig
from interpscale.errors import ConfigError

Selection = tuple[torch.Tensor, torch.Tensor]  # (σ of the selected logits, their ids) [.., k]


def compose(logits: torch.Tensor, emb: torch.Tensor, k: Optional[int]) -> tuple[torch.Tensor, Optional[Selection]]:
    """(Σ_i σ(logit_i) E_i (Eq. 7) [.., r] over all rows of ``emb`` [n, r] or the k largest logits,
    the selection or None). Top-k selects on the logits (σ is monotone) and composes with
    ``F.embedding_bag``: k·r work per token, no [.., k, r] gather, no dense [.., n] activations."""
    if k is None or k >= logits.size(-1):
        return torch.sigmoid(logits) @ emb, None
    top, idx = logits.topk(k, dim=-1, sorted=False)
    vals = torch.sigmoid(top)
    out = F.embedding_bag(idx.flatten(0, -2), emb, per_sample_weights=vals.flatten(0, -2).to(emb.dtype), mode="sum")
    return out.view(*idx.shape[:-1], emb.size(-1)), (vals, idx)


def scatter_selection(sel: Optional[Selection], dense: torch.Tensor) -> torch.Tensor:
    """Activations that entered the composition: ``dense`` [.., n], or zero outside the selection."""
    if sel is None:
        return dense
    vals, idx = sel
    return torch.zeros_like(dense).scatter(-1, idx, vals.to(dense.dtype))


@dataclass
class ConceptParts:
    known: torch.Tensor  # k̂ used in h̃ [B, T, d]
    unknown: torch.Tensor  # û used in h̃
    residual: torch.Tensor  # ε after dropout
    known_logits: torch.Tensor  # f(h) [B, T, n]
    known_act: Optional[torch.Tensor]  # k = σ(f(h)) (dense; None when need_acts=False)
    unknown_act: Optional[torch.Tensor]  # u = σ(g(h)) (dense; None when need_acts=False)
    known_pred: torch.Tensor  # k̂ from the head's own (top-k) activations
    unknown_pred: torch.Tensor  # û from the head's own activations
    hidden: torch.Tensor  # backbone h
    known_gt: Optional[torch.Tensor] = None  # k̂^GT (Eq. 11) when labels were given
    known_sel: Optional[Selection] = None  # top-k (σ values, ids); None: dense
    unknown_sel: Optional[Selection] = None
    unknown_coords: Optional[torch.Tensor] = None  # z with û = z·B (factorised U = A·B) [B, T, R]

    def sparse_acts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The activations that enter k̂ and û: dense, or zero outside the top-k."""
        return scatter_selection(self.known_sel, self.known_act), scatter_selection(self.unknown_sel, self.unknown_act)


class ConceptModule(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d, n, m, r = cfg.d_model, cfg.n_concepts, cfg.n_unknown, cfg.concept_rank
        if n <= 0:
            raise ConfigError("concept families need n_concepts > 0")
        self.known_head = nn.Linear(d, n, bias=False)  # f, predictor d×n
        self.known_emb = nn.Parameter(torch.empty(n, d))  # K
        if r:
            self.unk_down = nn.Linear(d, r, bias=False)  # d → R
            self.unk_pred = nn.Linear(r, m, bias=False)  # R → m
            self.unk_a = nn.Parameter(torch.empty(m, r))  # U = A·B
            self.unk_b = nn.Parameter(torch.empty(r, d))
        else:
            self.unk_down = None
            self.unk_pred = nn.Linear(d, m, bias=False)
            self.unk_emb = nn.Parameter(torch.empty(m, d))
        std = cfg.init_std
        nn.init.normal_(self.known_head.weight, std=std)
        with torch.no_grad():  # K starts on its detector direction, so e_c raises k_c at init
            self.known_emb.copy_(self.known_head.weight)
        nn.init.normal_(self.unk_pred.weight, std=std)
        if r:
            nn.init.normal_(self.unk_down.weight, std=std)
            nn.init.normal_(self.unk_a, std=(std / r ** 0.5) ** 0.5)  # product std ≈ std
            nn.init.normal_(self.unk_b, std=(std / r ** 0.5) ** 0.5)
        else:
            nn.init.normal_(self.unk_emb, std=std)
        self.anneal = False  # set by the model's set_phase: anneal-phase top-k

    @property
    def topk(self) -> tuple[Optional[int], Optional[int]]:
        c = self.cfg
        return (c.anneal_topk_known, c.anneal_topk_unknown) if self.anneal else (c.topk_known, c.topk_unknown)

    def ground_truth(self, chunk_ids: torch.Tensor, chunk_labels: torch.Tensor) -> torch.Tensor:
        """k̂^GT = Σ_i k_i^GT K_i per token (Eq. 11), composed once per chunk then gathered."""
        per_chunk = chunk_labels.to(self.known_emb.dtype) @ self.known_emb  # [B, C, d]
        idx = chunk_ids.clamp(min=0).unsqueeze(-1).expand(*chunk_ids.shape, per_chunk.size(-1))
        return per_chunk.gather(1, idx) * (chunk_ids >= 0).unsqueeze(-1).to(per_chunk.dtype)

    def unknown_matrix(self) -> torch.Tensor:
        """U [m, d] (materialised; only for attribution/steering, not the forward pass)."""
        return self.unk_a @ self.unk_b if self.unk_down is not None else self.unk_emb

    def forward(self, h: torch.Tensor, *, k_gt: Optional[torch.Tensor] = None,
                tf_known: Optional[torch.Tensor] = None, tf_unknown: Optional[torch.Tensor] = None,
                need_acts: bool = True) -> ConceptParts:
        """``k_gt`` [B, T, d]: k̂^GT (Eq. 11) per token, 0 outside chunks;
        ``tf_known`` / ``tf_unknown`` [B, T] bool: positions that take k̂^GT / û^GT.
        ``need_acts=False`` (the training loss) skips the dense activations nothing reads."""
        k_top, u_top = self.topk
        known_logits = self.known_head(h)
        k_hat, k_sel = compose(known_logits, self.known_emb, k_top)  # Eqs. 6-7
        # gradient detachment (App. K): the unknown head reads h but does not train the backbone
        factorised = self.unk_down is not None
        feats = F.gelu(self.unk_down(h.detach())) if factorised else h.detach()  # "Unknown decomposition: MLP"
        unknown_logits = self.unk_pred(feats)
        z, u_sel = compose(unknown_logits, self.unk_a if factorised else self.unk_emb, u_top)
        u_hat = z @ self.unk_b if factorised else z
        known, unknown = k_hat, u_hat
        if k_gt is not None:
            if tf_known is not None:
                known = torch.where(tf_known.unsqueeze(-1), k_gt, known)
            if tf_unknown is not None:
                unknown = torch.where(tf_unknown.unsqueeze(-1), h - k_gt, unknown)
        if self.training and self.cfg.p_cfg > 0:  # known-head dropout p_cfg (per token)
            keep = torch.rand(h.shape[:-1], device=h.device) >= self.cfg.p_cfg
            known = known * keep.unsqueeze(-1).to(known.dtype)
        residual = F.dropout(h - known - unknown, self.cfg.p_eps, self.training)  # ε with dropout p_ε
        k = torch.sigmoid(known_logits) if need_acts else None  # Eq. 6
        u = torch.sigmoid(unknown_logits) if need_acts else None
        return ConceptParts(known, unknown, residual, known_logits, k, u, k_hat, u_hat, h, k_gt, k_sel, u_sel,
                            z if factorised else None)


# --- losses -----------------------------------------------------------------------
def concept_loss(known_logits: torch.Tensor, chunk_ids: torch.Tensor, chunk_labels: torch.Tensor,
                 valid: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(OR-aggregated chunk BCE (Eqs. 9–10) summed over concepts, mean over the chunks holding a
    token; their number), in log space: log Π_t(1 − k_t) = −Σ_t softplus(f_t), summed per chunk
    with ``index_add`` over the flat (row, chunk) index."""
    B, T, n = known_logits.shape
    C = chunk_labels.size(1)
    inside = chunk_ids >= 0
    if valid is not None:
        inside = inside & valid.bool()
    dtype = torch.promote_types(known_logits.dtype, torch.float32)  # bf16 logits: sums in float32
    w = inside.flatten().to(dtype)
    slot = (torch.arange(B, device=chunk_ids.device)[:, None] * C + chunk_ids.clamp(min=0)).flatten()
    softplus = F.softplus(known_logits.to(dtype)).flatten(0, 1)  # −log(1 − k_{c,t}) per token
    s = -w.new_zeros(B * C, n).index_add(0, slot, softplus * w[:, None])
    count = w.new_zeros(B * C).index_add(0, slot, w)
    s = s.view(B, C, n).clamp(max=-1e-6)  # log(1 − k^chunk); clamp keeps log(1 − e^s) finite
    present = (count > 0).view(B, C)
    y = chunk_labels.to(dtype)
    bce = -(y * torch.log(-torch.expm1(s)) + (1 - y) * s).sum(-1)  # Eq. 10, [B, C]
    n_chunks = present.sum()
    return (bce * present).sum() / n_chunks.clamp(min=1), n_chunks


def reconstruction_loss(u_hat: torch.Tensor, h: torch.Tensor, k_gt_hat: torch.Tensor,
                        positions: torch.Tensor) -> torch.Tensor:
    """Eq. 12: mean over positions M of ‖û − (h − k̂^GT)‖²; the target is detached."""
    target = (h - k_gt_hat).detach()  # Eq. 11
    err = (u_hat - target).pow(2).sum(-1)
    return (err * positions).sum() / positions.sum().clamp(min=1)


def independence_loss(a: torch.Tensor, b_fixed: torch.Tensor, positions: torch.Tensor,
                      basis: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Eqs. 13–14: ‖Ψᵀ Φ‖²_F / (d²(B−1)) over the selected tokens, Φ (``b_fixed``) detached; tokens
    outside ``positions`` weigh 0 (no data-dependent shapes), fewer than two selected give 0. With
    ``basis`` [R, d], ``a`` holds coordinates z [B, T, R] of Ψ = z·basis (û = z·B, U = A·B):
    centring commutes with ·B, so ΨᵀΦ = Bᵀ(z̄ᵀΦ̄), the same value for 2NRd instead of 2Nd² FLOPs."""
    dtype = torch.promote_types(a.dtype, torch.float32)  # bf16 activations: centre and sum in float32
    w = positions.flatten().to(dtype)[:, None]
    psi, phi = a.flatten(0, -2).to(dtype), b_fixed.flatten(0, -2).detach().to(dtype)
    nb, d = w.sum(), phi.size(-1)
    psi = (psi - (w * psi).sum(0) / nb.clamp(min=1)) * w
    phi = phi - (w * phi).sum(0) / nb.clamp(min=1)
    cross = psi.T @ phi  # [d, d], or [R, d] in coordinates
    if basis is not None:
        cross = basis.T @ cross
    cross = cross.to(dtype)  # under autocast the products come back in bf16
    return torch.where(nb >= 2, cross.pow(2).sum() / (d * d * (nb - 1).clamp(min=1)), 0.0)
