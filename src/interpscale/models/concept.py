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


def topk_sparsify(x: torch.Tensor, k: Optional[int]) -> torch.Tensor:
    """Keep the k largest entries of the last axis, zero the rest (k=None: dense)."""
    if k is None or k >= x.size(-1):
        return x
    vals, idx = x.topk(k, dim=-1, sorted=False)
    return torch.zeros_like(x).scatter(-1, idx, vals)


@dataclass
class ConceptParts:
    known: torch.Tensor  # k̂ used in h̃ [B, T, d]
    unknown: torch.Tensor  # û used in h̃
    residual: torch.Tensor  # ε after dropout
    known_logits: torch.Tensor  # f(h) [B, T, n]
    known_act: torch.Tensor  # k = σ(f(h)) (dense)
    unknown_act: torch.Tensor  # u = σ(g(h)) (dense)
    known_pred: torch.Tensor  # k̂ from the head's own (top-k) activations
    unknown_pred: torch.Tensor  # û from the head's own activations
    hidden: torch.Tensor  # backbone h
    known_gt: Optional[torch.Tensor] = None  # k̂^GT (Eq. 11) when labels were given


class ConceptModule(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d, n, m, r = cfg.d_model, cfg.n_concepts, cfg.n_unknown, cfg.concept_rank
        if n <= 0:
            raise ValueError("concept families need n_concepts > 0")
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
        if r:
            nn.init.normal_(self.unk_down.weight, std=std)
            nn.init.normal_(self.unk_pred.weight, std=std)
            nn.init.normal_(self.unk_a, std=(std / r ** 0.5) ** 0.5)  # product std ≈ std
            nn.init.normal_(self.unk_b, std=(std / r ** 0.5) ** 0.5)
        else:
            nn.init.normal_(self.unk_pred.weight, std=std)
            nn.init.normal_(self.unk_emb, std=std)
        self.eps_drop = nn.Dropout(cfg.p_eps)
        self.anneal = False  # set by the model's set_phase: anneal-phase top-k

    # --- pieces -------------------------------------------------------------------
    @property
    def topk(self) -> tuple[Optional[int], Optional[int]]:
        c = self.cfg
        return (c.anneal_topk_known, c.anneal_topk_unknown) if self.anneal else (c.topk_known, c.topk_unknown)

    def unknown_logits(self, h: torch.Tensor) -> torch.Tensor:
        # "Unknown decomposition: MLP" (App. K): down-projection, GELU, predictor over m
        return self.unk_pred(F.gelu(self.unk_down(h))) if self.unk_down is not None else self.unk_pred(h)

    def compose_known(self, k: torch.Tensor) -> torch.Tensor:
        return topk_sparsify(k, self.topk[0]) @ self.known_emb  # Eq. 7

    def compose_unknown(self, u: torch.Tensor) -> torch.Tensor:
        k = self.topk[1]
        if self.unk_down is not None and k is not None and k < u.size(-1) and u.is_cuda:
            # top-k compose through A touches k rows only (Eq. 24 counts 2dR + Rm, no m·R);
            # on CPU the gather + scatter-add backward is slower than the dense R·m matmul
            vals, idx = u.topk(k, dim=-1, sorted=False)
            return torch.einsum("...k,...kr->...r", vals, self.unk_a[idx]) @ self.unk_b
        u = topk_sparsify(u, k)
        return (u @ self.unk_a) @ self.unk_b if self.unk_down is not None else u @ self.unk_emb

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
    ) -> ConceptParts:
        """``k_gt`` [B, T, d]: k̂^GT (Eq. 11) per token, 0 outside chunks;
        ``tf_known`` / ``tf_unknown`` [B, T] bool: positions that take k̂^GT / û^GT."""
        known_logits = self.known_head(h)
        k = torch.sigmoid(known_logits)  # Eq. 6
        # gradient detachment (App. K): the unknown head reads h but does not train the backbone
        u = torch.sigmoid(self.unknown_logits(h.detach()))
        k_hat, u_hat = self.compose_known(k), self.compose_unknown(u)
        known, unknown = k_hat, u_hat
        if k_gt is not None:
            if tf_known is not None:
                known = torch.where(tf_known.unsqueeze(-1), k_gt, known)
            if tf_unknown is not None:
                unknown = torch.where(tf_unknown.unsqueeze(-1), h - k_gt, unknown)
        if self.training and self.cfg.p_cfg > 0:  # known-head dropout p_cfg (per token)
            keep = torch.rand(h.shape[:-1], device=h.device) >= self.cfg.p_cfg
            known = known * keep.unsqueeze(-1).to(h.dtype)
        residual = self.eps_drop(h - known - unknown)  # ε with dropout p_ε
        return ConceptParts(known, unknown, residual, known_logits, k, u, k_hat, u_hat, h, k_gt)


# --- losses -----------------------------------------------------------------------
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
    idx = chunk_ids.clamp(min=0).unsqueeze(-1).expand(B, T, n)
    log_not = -F.softplus(known_logits.float()) * inside.unsqueeze(-1)  # log(1 − k_{c,t})
    s = torch.zeros(B, C, n, device=known_logits.device).scatter_add(1, idx, log_not)  # log(1 − k^chunk)
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


def independence_loss(a: torch.Tensor, b_fixed: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Eqs. 13–14: ‖Ψᵀ Φ‖²_F / (d²(B−1)) over the selected tokens; Φ (``b_fixed``) is detached."""
    psi = a[positions]
    phi = b_fixed[positions].detach()
    nb, d = psi.shape
    if nb < 2:
        return a.sum() * 0.0
    psi = psi - psi.mean(0, keepdim=True)
    phi = phi - phi.mean(0, keepdim=True)
    return (psi.T @ phi).pow(2).sum() / (d * d * (nb - 1))
