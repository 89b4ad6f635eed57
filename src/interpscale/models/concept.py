"""The concept module (§5.3) and its losses (Eqs. 9–14).

h̃ = k̂ + û + ε with k̂ = Σ k_i K_i, û = Σ u_j U_j, ε = h − k̂ − û (Eqs. 5–7). In eval mode
h̃ = h exactly; training adds teacher forcing (§5.4.2), known-head dropout p_cfg and
residual dropout p_ε, all of which keep the decomposition exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from interpscale.models.config import ModelConfig
from interpscale.models.gemm import Linear, linear
from interpscale.models.sparse import (Pattern, compose_rows, scatter_selection, select_topk, selected_logits,
                                      topk_indices)


def _dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout; the mask comes from one uniform draw (CPU bernoulli_ is ~3x slower)."""
    if not training or p <= 0:
        return x
    return x * (torch.rand_like(x) >= p).to(x.dtype).mul_(1.0 / (1.0 - p))


@dataclass
class ConceptParts:
    known: torch.Tensor  # k̂ used in h̃ [B, T, d]
    unknown: torch.Tensor  # û used in h̃
    residual: torch.Tensor  # ε after dropout
    known_logits: torch.Tensor  # f(h) [B, T, n]
    known_act: Optional[torch.Tensor]  # k = σ(f(h)) (dense; None when need_acts=False)
    unknown_act: Optional[torch.Tensor]  # u = σ(g(h)) (dense; no gradient under unknown top-k)
    known_pred: torch.Tensor  # k̂ from the head's own (top-k) activations
    unknown_pred: torch.Tensor  # û from the head's own activations
    hidden: torch.Tensor  # backbone h
    known_gt: Optional[torch.Tensor] = None  # k̂^GT (Eq. 11) when labels were given
    known_sel: Optional[tuple[torch.Tensor, torch.Tensor]] = None  # top-k (σ values, ids); None: dense
    unknown_sel: Optional[tuple[torch.Tensor, torch.Tensor]] = None
    unknown_coords: Optional[torch.Tensor] = None  # z with û = z·B (factorised U = A·B) [B, T, R]

    def sparse_acts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The activations that enter k̂ and û: dense, or zero outside the top-k."""
        return tuple(act if sel is None else scatter_selection(sel, act.size(-1))
                     for act, sel in ((self.known_act, self.known_sel), (self.unknown_act, self.unknown_sel)))


class ConceptModule(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d, n, m, r = cfg.d_model, cfg.n_concepts, cfg.n_unknown, cfg.concept_rank
        if n <= 0:
            raise ValueError("concept families need n_concepts > 0")
        self.known_head = Linear(d, n)  # f, predictor d×n
        self.known_emb = nn.Parameter(torch.empty(n, d))  # K
        if r:
            self.unk_down = Linear(d, r)  # d → R
            self.unk_pred = Linear(r, m)  # R → m
            self.unk_a = nn.Parameter(torch.empty(m, r))  # U = A·B
            self.unk_b = nn.Parameter(torch.empty(r, d))
        else:
            self.unk_down = None
            self.unk_pred = Linear(d, m)
            self.unk_emb = nn.Parameter(torch.empty(m, d))
        std = cfg.init_std
        nn.init.normal_(self.known_head.weight, std=std)
        with torch.no_grad():  # K starts on its detector direction, so e_c raises k_c at init
            self.known_emb.copy_(self.known_head.weight)
        if r:
            nn.init.normal_(self.unk_down.weight, std=std)
            nn.init.normal_(self.unk_pred.weight, std=std)
            nn.init.normal_(self.unk_a, std=(std / r ** 0.5) ** 0.5)  # product std ≈ std
            nn.init.normal_(self.unk_b, std=(std / r ** 0.5) ** 0.5)
        else:
            nn.init.normal_(self.unk_pred.weight, std=std)
            nn.init.normal_(self.unk_emb, std=std)
        self.anneal = False  # set by the model's set_phase: anneal-phase top-k

    # --- pieces -------------------------------------------------------------------
    @property
    def topk(self) -> tuple[Optional[int], Optional[int]]:
        c = self.cfg
        return (c.anneal_topk_known, c.anneal_topk_unknown) if self.anneal else (c.topk_known, c.topk_unknown)

    def unknown_features(self, h: torch.Tensor) -> torch.Tensor:
        # "Unknown decomposition: MLP" (App. K): down-projection, GELU, then the predictor over m
        return F.gelu(self.unk_down(h)) if self.unk_down is not None else h

    def _unknown(self, h: torch.Tensor, need_acts: bool):
        """(û, selection, z with û = z·B or None, dense u or None) for the unknown head."""
        feats = self.unknown_features(h)
        emb = self.unk_a if self.unk_down is not None else self.unk_emb
        k = self.topk[1]
        if k is None or k >= self.cfg.n_unknown:
            u = torch.sigmoid(self.unk_pred(feats))
            coords, sel = linear(u, emb.t()), None
        else:
            # only the k selected logits receive gradient: select on logits computed without
            # autograd, then differentiate just those k through the predictor (Eq. 24: Rm)
            with torch.no_grad():
                logits = self.unk_pred(feats)
            idx = topk_indices(logits, k)
            pattern = Pattern(idx, self.cfg.n_unknown)  # shared by the predictor's and A's backward
            sel = (torch.sigmoid(selected_logits(feats, self.unk_pred.weight, idx, logits, pattern)), idx)
            coords = compose_rows(*sel, emb, pattern)
            u = torch.sigmoid(logits) if need_acts else None
        if self.unk_down is None:
            return coords, sel, None, u
        return linear(coords, self.unk_b.t()), sel, coords, u

    def ground_truth(self, chunk_ids: torch.Tensor, chunk_labels: torch.Tensor) -> torch.Tensor:
        """k̂^GT = Σ_i k_i^GT K_i per token (Eq. 11), composed once per chunk then gathered."""
        per_chunk = chunk_labels.to(self.known_emb.dtype) @ self.known_emb  # [B, C, d]
        idx = chunk_ids.clamp(min=0).unsqueeze(-1).expand(*chunk_ids.shape, per_chunk.size(-1))
        return per_chunk.gather(1, idx) * (chunk_ids >= 0).unsqueeze(-1).to(per_chunk.dtype)

    def unknown_matrix(self) -> torch.Tensor:
        """U [m, d] (materialised; only for attribution/steering, not the forward pass)."""
        return self.unk_a @ self.unk_b if self.unk_down is not None else self.unk_emb

    # --- forward ------------------------------------------------------------------
    def forward(
        self,
        h: torch.Tensor,
        *,
        k_gt: Optional[torch.Tensor] = None,
        tf_known: Optional[torch.Tensor] = None,
        tf_unknown: Optional[torch.Tensor] = None,
        need_acts: bool = True,
    ) -> ConceptParts:
        """``k_gt`` [B, T, d]: k̂^GT (Eq. 11) per token, 0 outside chunks;
        ``tf_known`` / ``tf_unknown`` [B, T] bool: positions that take k̂^GT / û^GT.
        ``need_acts=False`` (the training loss) skips the dense activations nothing reads."""
        known_logits = self.known_head(h)
        k_sel = select_topk(known_logits, self.topk[0])
        k = torch.sigmoid(known_logits) if (need_acts or k_sel is None) else None  # Eq. 6
        k_hat = linear(k, self.known_emb.t()) if k_sel is None else compose_rows(*k_sel, self.known_emb)  # Eq. 7
        # gradient detachment (App. K): the unknown head reads h but does not train the backbone
        u_hat, u_sel, z, u = self._unknown(h.detach(), need_acts)
        known, unknown = k_hat, u_hat
        if k_gt is not None:
            if tf_known is not None:
                known = torch.where(tf_known.unsqueeze(-1), k_gt, known)
            if tf_unknown is not None:
                unknown = torch.where(tf_unknown.unsqueeze(-1), h - k_gt, unknown)
        if self.training and self.cfg.p_cfg > 0:  # known-head dropout p_cfg (per token)
            keep = torch.rand(h.shape[:-1], device=h.device) >= self.cfg.p_cfg
            known = known * keep.unsqueeze(-1).to(h.dtype)
        residual = _dropout(h - known - unknown, self.cfg.p_eps, self.training)  # ε with dropout p_ε
        return ConceptParts(known, unknown, residual, known_logits, k, u, k_hat, u_hat, h, k_gt, k_sel, u_sel, z)


# --- losses -----------------------------------------------------------------------
_MEMBERSHIP_MAX_CHUNKS = 64  # above this, chunk sums use scatter_add


def concept_loss(known_logits: torch.Tensor, chunk_ids: torch.Tensor, chunk_labels: torch.Tensor,
                 valid: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, int]:
    """OR-aggregated chunk BCE (Eqs. 9–10), summed over concepts, mean over chunks.

    Computed in log space: log Π(1 − k_t) = −Σ softplus(f_t).
    """
    B, T, n = known_logits.shape
    C = chunk_labels.size(1)
    inside = chunk_ids >= 0
    if valid is not None:
        inside = inside & valid
    softplus = F.softplus(known_logits.float())  # −log(1 − k_{c,t}) per token
    if C <= _MEMBERSHIP_MAX_CHUNKS:
        # sum over each chunk's tokens as a [B, C, T] (−1 / 0) membership matmul: 2·C·n per
        # token, cheaper than scatter_add (and its gather backward) when chunks are few
        member = (chunk_ids.unsqueeze(1) == torch.arange(C, device=chunk_ids.device)[:, None]) & inside.unsqueeze(1)
        s = torch.bmm(-member.float(), softplus)  # log(1 − k^chunk) [B, C, n]
        count = member.sum(-1)
    else:
        idx = chunk_ids.clamp(min=0).unsqueeze(-1).expand(B, T, n)
        s = torch.zeros(B, C, n, device=known_logits.device).scatter_add(
            1, idx, softplus * -inside.unsqueeze(-1).float())
        count = torch.zeros(B, C, device=known_logits.device).scatter_add(1, chunk_ids.clamp(min=0), inside.float())
    present = count > 0
    if not bool(present.any()):
        return known_logits.sum() * 0.0, 0
    s = s.clamp(max=-1e-6)  # keep log(1 − e^s) finite
    log_k_chunk = torch.log(-torch.expm1(s))
    y = chunk_labels.float()
    bce = -(y * log_k_chunk + (1 - y) * s).sum(-1)  # Eq. 10, [B, C]
    return bce[present].mean(), int(present.sum())


def reconstruction_loss(u_hat: torch.Tensor, h: torch.Tensor, k_gt_hat: torch.Tensor,
                        positions: torch.Tensor) -> torch.Tensor:
    """Eq. 12: mean over positions M of ‖û − (h − k̂^GT)‖²; the target is detached."""
    target = (h - k_gt_hat).detach()  # Eq. 11
    err = (u_hat - target).pow(2).sum(-1)
    n = positions.sum().clamp(min=1)
    return (err * positions).sum() / n


def _rows(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """[N_selected, ·] rows of x [B, T, ·] (a view when every position is selected)."""
    return x.flatten(0, -2) if bool(positions.all()) else x[positions]


def independence_loss(a: torch.Tensor, b_fixed: torch.Tensor, positions: torch.Tensor,
                      basis: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Eqs. 13–14: ‖Ψᵀ Φ‖²_F / (d²(B−1)) over the selected tokens; Φ (``b_fixed``) is detached.

    With ``basis`` [R, d], ``a`` holds coordinates z [B, T, R] of Ψ = z·basis (û = z·B for
    the factorised U = A·B): centring commutes with ·B, so ΨᵀΦ = Bᵀ(z̄ᵀΦ̄), the same value
    for 2NRd instead of 2Nd² FLOPs.
    """
    psi = _rows(a, positions)
    phi = _rows(b_fixed, positions).detach()
    nb, d = phi.shape
    if nb < 2:
        return a.sum() * 0.0
    psi = psi - psi.mean(0, keepdim=True)
    phi = phi - phi.mean(0, keepdim=True)
    cross = psi.T @ phi  # [d, d], or [R, d] in coordinates
    if basis is not None:
        cross = basis.T @ cross
    return cross.pow(2).sum() / (d * d * (nb - 1))
