"""Training objectives and schedules: AR CE (Eq. 1), masked diffusion (Eq. 2), noise-level
schedules (uniform, per-block t_b §5.4.2, moving Gaussian App. J.2) and the teacher-forcing
α ramps of Tables 25–26."""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from interpscale.models.config import ModelConfig
from interpscale.models.types import PhaseSchedule


def ar_loss(logits: torch.Tensor, tokens: torch.Tensor, valid: Optional[torch.Tensor]) -> tuple[torch.Tensor, int]:
    """Eq. 1: mean next-token CE over valid (input, target) pairs.

    The CE runs over the full [B·T, V] view of ``logits`` (no copy of ``logits[:, :-1]``,
    nor of its gradient) with the targets shifted left and ``ignore_index`` where there is no
    pair: each row's last position and, with ``valid``, pairs with an invalid end."""
    B, T = tokens.shape
    target = torch.empty_like(tokens)
    target[:, :-1] = tokens[:, 1:]
    target[:, -1] = -100
    if valid is None:  # fast path: every pair counts
        n = B * (T - 1)
    else:
        keep = valid[:, 1:] & valid[:, :-1]
        target[:, :-1].masked_fill_(~keep, -100)
        n = int(keep.sum())
        if n == 0:
            raise ValueError("batch has no valid (input, target) pairs for the AR loss")
    return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=-100), n


def mdm_loss(logits: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Eq. 2: CE on masked positions, averaged over all masked positions of the batch."""
    n = int(masked.sum())
    if n == 0:
        raise ValueError("no masked positions in the batch for the diffusion loss")
    ce = F.cross_entropy(logits[masked].float(), tokens[masked])
    return ce, n


def noise_center(cfg: ModelConfig, step: int, max_steps: int) -> float:
    """Moving-Gaussian centre, linear from gauss_center[0] to [1] over the stable run (App. J.2)."""
    frac = min(max(step / max(max_steps, 1), 0.0), 1.0)
    c0, c1 = cfg.gauss_center
    return c0 + (c1 - c0) * frac


def sample_noise_levels(cfg: ModelConfig, batch: int, seq_len: int, step: int, max_steps: int,
                        generator: Optional[torch.Generator] = None, device=None) -> torch.Tensor:
    """Per-position noise level t [B, T]: one t per sequence, or one t_b per block (§5.4.2),
    drawn uniform or from the moving Gaussian (σ = 0.3), clipped to [t_min, t_max]."""
    n_groups = math.ceil(seq_len / cfg.block_size) if cfg.per_block_t else 1
    shape = (batch, n_groups)
    if cfg.mask_schedule == "uniform":
        t = cfg.t_min + (cfg.t_max - cfg.t_min) * torch.rand(shape, generator=generator)
    else:
        t = noise_center(cfg, step, max_steps) + cfg.gauss_sigma * torch.randn(shape, generator=generator)
        t = t.clamp(cfg.t_min, cfg.t_max)
    if cfg.per_block_t:
        t = t.repeat_interleave(cfg.block_size, dim=1)[:, :seq_len]
    else:
        t = t.expand(batch, seq_len)
    return t.to(device)


def mask_tokens(tokens: torch.Tensor, t: torch.Tensor, mask_id: int, valid: Optional[torch.Tensor] = None,
                generator: Optional[torch.Generator] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Replace each valid token by [MASK] with probability t (Eq. 35). Every row with a valid
    token gets at least one masked position so Eq. 2 is defined. Returns (x_t, masked)."""
    u = torch.rand(tokens.shape, generator=generator).to(tokens.device)
    masked = u < t
    ok = torch.ones_like(masked) if valid is None else valid.bool()
    masked &= ok
    # force one masked position in rows that drew none (the valid position with smallest u)
    empty = ~masked.any(1) & ok.any(1)
    if bool(empty.any()):
        pick = torch.where(ok, u, torch.full_like(u, 2.0)).argmin(1)
        masked[empty, pick[empty]] = True
    return torch.where(masked, torch.full_like(tokens, mask_id), tokens), masked


def alpha_schedule(cfg: ModelConfig, phase: PhaseSchedule, step: int) -> tuple[float, float]:
    """Probabilities (α_known, α_unknown) of substituting ground truth at ``step``.

    Stable (Table 25): α_known cosine 1 → 0.5 and α_unknown linear 1 → 0.5 by 0.1·T_max,
    then flat. Table 25 prints α_unknown as "0.0 → 0.5" and Table 26 as "1.0": those are the
    probability of using the *predicted* unknown (App. I: "fully rely on the learned unknown
    head"; §5.4.2/App. K: the GT probability anneals from 1), so here α_unknown = 1 − that.
    Anneal (Table 26): α_known linear 0.5 → 0 over ``anneal_steps`` counted from
    ``phase.anneal_start``; α_unknown = 0 (predicted unknown only).
    """
    if phase.phase == "anneal":
        a0, a1 = cfg.anneal_alpha_known
        frac = min(max((step - phase.anneal_start) / max(phase.anneal_steps, 1), 0.0), 1.0)
        return a0 + (a1 - a0) * frac, cfg.anneal_alpha_unknown
    frac = min(max(step / max(cfg.alpha_ramp_frac * phase.max_steps, 1e-9), 0.0), 1.0)
    ak = cfg.alpha_known_floor + (cfg.alpha_known_start - cfg.alpha_known_floor) * 0.5 * (1 + math.cos(math.pi * frac))
    au = cfg.alpha_unknown_start + (cfg.alpha_unknown_floor - cfg.alpha_unknown_start) * frac
    return ak, au
