"""Training objectives and schedules: AR CE (Eq. 1), masked diffusion (Eq. 2), noise levels
(uniform, per-block t_b §5.4.2, moving Gaussian App. J.2), the α ramps of Tables 25–26. Nothing
reads tensor values on the host: schedules are arithmetic on the int ``step`` (symbolic when compiled)."""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from interpscale.models.config import ModelConfig
from interpscale.models.types import PhaseSchedule

IGNORE = -100  # target of positions without a loss term


def ar_targets(tokens: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Eq. 1's targets [B, T]: the next token, IGNORE at each row's last position and, with
    ``valid``, at pairs with an invalid end."""
    target = F.pad(tokens[:, 1:], (0, 1), value=IGNORE)
    if valid is None:
        return target
    keep = F.pad(valid[:, 1:] & valid[:, :-1], (0, 1), value=False)
    return target.masked_fill(~keep, IGNORE)


def mdm_targets(tokens: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """Eq. 2's targets: the clean token at masked positions, IGNORE elsewhere."""
    return tokens.masked_fill(~masked, IGNORE)


def cross_entropy_sum(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Σ CE over the positions whose target is not IGNORE (float32 softmax)."""
    return F.cross_entropy(logits.flatten(0, -2).float(), targets.flatten(), ignore_index=IGNORE, reduction="sum")


def _head_ce_sum(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return cross_entropy_sum(F.linear(h, weight), targets)


def chunked_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int) -> torch.Tensor:
    """Σ CE of the logits h·Wᵀ, ``chunk`` tokens at a time, each chunk's logits recomputed in the
    backward pass: one [chunk, V] block alive instead of [tokens, V]; same value and gradients."""
    h, targets = h.flatten(0, -2), targets.flatten()
    if h.size(0) <= chunk:  # one chunk: nothing to bound, skip the recompute
        return _head_ce_sum(h, weight, targets)
    return sum(checkpoint(_head_ce_sum, h[s:s + chunk], weight, targets[s:s + chunk], use_reentrant=False)
               for s in range(0, h.size(0), chunk))


def head_loss(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
              chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean CE of the tied LM head h·Wᵀ over the targets that are not IGNORE, their number)."""
    n = (targets != IGNORE).sum()
    return chunked_cross_entropy(h, weight, targets, chunk) / n.clamp(min=1), n


def mean_ce(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 1 / Eq. 2 from logits: (mean CE over the targets that are not IGNORE, their number)."""
    n = (targets != IGNORE).sum()
    return cross_entropy_sum(logits, targets) / n.clamp(min=1), n


def ar_loss(logits: torch.Tensor, tokens: torch.Tensor, valid: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 1 from logits: (mean next-token CE over valid pairs, number of pairs)."""
    return mean_ce(logits, ar_targets(tokens, valid))


def _frac(num: int, den: float) -> float:  # clamp(num / den, 0, 1)
    return min(max(num / max(den, 1e-9), 0.0), 1.0)


def noise_center(cfg: ModelConfig, step: int, max_steps: int) -> float:
    """Moving-Gaussian centre, linear from gauss_center[0] to [1] over the stable run (App. J.2)."""
    c0, c1 = cfg.gauss_center
    return c0 + (c1 - c0) * _frac(step, max(max_steps, 1))


def sample_noise_levels(cfg: ModelConfig, batch: int, seq_len: int, step: int, max_steps: int,
                        generator: Optional[torch.Generator] = None, device=None) -> torch.Tensor:
    """Per-position noise level t [B, T]: one t per sequence, or one t_b per block (§5.4.2),
    drawn uniform or from the moving Gaussian (σ = 0.3), clipped to [t_min, t_max]."""
    n_groups = math.ceil(seq_len / cfg.block_size) if cfg.per_block_t else 1
    shape = (batch, n_groups)
    if cfg.mask_schedule == "uniform":
        t = cfg.t_min + (cfg.t_max - cfg.t_min) * torch.rand(shape, generator=generator, device=device)
    else:
        center = noise_center(cfg, step, max_steps)
        t = (center + cfg.gauss_sigma * torch.randn(shape, generator=generator, device=device)).clamp(cfg.t_min, cfg.t_max)
    if cfg.per_block_t:
        return t.repeat_interleave(cfg.block_size, dim=1)[:, :seq_len]
    return t.expand(batch, seq_len)


def mask_batch(cfg: ModelConfig, tokens: torch.Tensor, step: int, max_steps: int,
               valid: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 2's corruption of a batch: noise levels t (§5.4.2), then [MASK] with probability t."""
    t = sample_noise_levels(cfg, tokens.size(0), tokens.size(1), step, max_steps, device=tokens.device)
    return mask_tokens(tokens, t, cfg.mask_id, valid)


def mask_tokens(tokens: torch.Tensor, t: torch.Tensor, mask_id: int, valid: Optional[torch.Tensor] = None,
                generator: Optional[torch.Generator] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Replace each valid token by [MASK] with probability t (Eq. 35). Every row with a valid
    token gets at least one masked position so Eq. 2 is defined. Returns (x_t, masked)."""
    u = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    ok = torch.ones_like(tokens, dtype=torch.bool) if valid is None else valid.bool()
    masked = (u < t) & ok
    # force one masked position in rows that drew none (the valid position with smallest u)
    empty = ~masked.any(1) & ok.any(1)
    pick = torch.where(ok, u, 2.0).argmin(1)
    forced = torch.arange(tokens.size(1), device=tokens.device) == pick[:, None]
    masked = masked | (forced & empty[:, None])
    return tokens.masked_fill(masked, mask_id), masked


def alpha_schedule(cfg: ModelConfig, phase: PhaseSchedule, step: int) -> tuple[float, float]:
    """Probabilities (α_known, α_unknown) of substituting ground truth at ``step``. Stable (Table 25):
    α_known cosine 1 → 0.5, α_unknown linear 1 → 0.5 by 0.1·T_max, then flat; anneal (Table 26): α_known
    linear 0.5 → 0 over ``anneal_steps``, α_unknown = 0. α_unknown is 1 − the tables' (docs/models.md)."""
    if phase.phase == "anneal":
        a0, a1 = cfg.anneal_alpha_known
        frac = _frac(step - phase.anneal_start, max(phase.anneal_steps, 1))
        return a0 + (a1 - a0) * frac, cfg.anneal_alpha_unknown
    frac = _frac(step, cfg.alpha_ramp_frac * phase.max_steps)
    k0, k1 = cfg.alpha_known_start, cfg.alpha_known_floor
    u0, u1 = cfg.alpha_unknown_start, cfg.alpha_unknown_floor
    return k1 + (k0 - k1) * 0.5 * (1 + math.cos(math.pi * frac)), u0 + (u1 - u0) * frac
