"""Noise levels and masks for the diffusion loss estimators (Steerling App. H, Eq. 35): a valid
position is [MASK] when its uniform draw ``U_i`` falls below its noise level.  Antithetic pairs
reuse the draws as ``(t, U) -> (lo + hi - t, 1 - U)``, which masks exactly the complement of the
first pass when the two levels sum to one (each token scored once per pair).
"""

from __future__ import annotations

import torch

GRID_RATES: tuple[float, ...] = tuple(k / 10 for k in range(1, 10))  # Eq. 37, t_k = k/10
T_RANGE: tuple[float, float] = (1e-3, 1.0 - 1e-3)  # Eq. 39, t ~ U(1e-3, 1 - 1e-3)


def stratified_uniform(n: int, lo: float, hi: float, gen: torch.Generator) -> torch.Tensor:
    """``n`` draws on (lo, hi), one in each of ``n`` equal strata, in random order."""
    perm = torch.randperm(n, generator=gen, device=gen.device).to(torch.float64)
    jitter = torch.rand(n, generator=gen, device=gen.device, dtype=torch.float64)
    return lo + (hi - lo) * (perm + jitter) / n


def uniform_levels(shape: tuple[int, ...], lo: float, hi: float, gen: torch.Generator) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(shape, generator=gen, device=gen.device, dtype=torch.float64)


def block_levels(n_rows: int, seq_len: int, block: int, lo: float, hi: float, gen: torch.Generator, *,
                 stratified: bool) -> torch.Tensor:
    """Per-position noise levels [n_rows, seq_len], one level per block (Eq. 40; a trailing
    partial block gets its own); ``stratified`` spreads each row's over one stratum per block."""
    n_blocks = -(-seq_len // block)
    levels = (torch.stack([stratified_uniform(n_blocks, lo, hi, gen) for _ in range(n_rows)]) if stratified
              else uniform_levels((n_rows, n_blocks), lo, hi, gen))
    return levels.repeat_interleave(block, dim=1)[:, :seq_len]


def draw_mask(rate: torch.Tensor | float, valid: torch.Tensor, gen: torch.Generator, *,
              uniforms: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask valid positions with probability ``rate`` (scalar, [B, 1] or [B, T]); returns
    ``(mask, uniforms)`` (pass ``1 - uniforms`` back in for the antithetic twin).  At least one
    valid position is always masked, a uniform random one, so ``1/|M|`` is defined and the
    masked mean stays unbiased for a context-free model."""
    if uniforms is None:
        uniforms = torch.rand(valid.shape, generator=gen, device=valid.device)
    if isinstance(rate, torch.Tensor):
        rate = rate.to(device=valid.device, dtype=uniforms.dtype)
    mask = (uniforms < rate) & valid
    if not bool(mask.any()):
        flat = valid.reshape(-1).nonzero().squeeze(1)
        pick = flat[torch.randint(len(flat), (1,), generator=gen, device=gen.device).to(flat.device)]
        mask = mask.reshape(-1).index_fill(0, pick, True).reshape(valid.shape)
    return mask, uniforms
