"""Top-k selection and composition Σ_j σ(f_j) E_{i_j} over the k selected rows (Eq. 7).

Eq. 24 prices the composition of a top-k head at k rows, not all n (or m): the known head
"composes ... via top-k_known selection" and the unknown head's "top-k_unknown selection"
leaves only 2dR + Rm. Scattering the k winners into a dense [.., n] tensor and multiplying
by E would cost the full 2nd. On CPU the k winners form a CSR matrix (MKL SpMM forward,
SDDMM and a transposed SpMM backward); elsewhere (CUDA, bf16) the k rows of E are gathered
or, when k·r exceeds n, the zero-filled dense product is used (whichever holds less).
"""

from __future__ import annotations

import math
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import numpy as np
import torch


def _argtopk(x: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest entries of the last axis (unordered). Large CPU float inputs
    use NumPy's introselect, ~20% faster than torch.topk's (value, index)-pair selection;
    both treat NaN as largest."""
    n = x.size(-1)
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and x.numel() >= 1 << 16:
        return torch.from_numpy(np.argpartition(x.detach().numpy(), n - k, axis=-1)[..., n - k:])
    return x.topk(k, dim=-1, sorted=False).indices


def _threshold_pick(a: np.ndarray, k: int) -> Optional[np.ndarray]:
    """Column ids [N, k] of the k largest entries of each row of ``a`` [N, C], from the k-th
    largest value (a value-only partition, ~2x cheaper than an index-carrying one) and one
    compare; None when a row ties at that value (or holds NaN), so ``>=`` keeps != k."""
    N, C = a.shape
    kth = np.partition(a, C - k, axis=-1)[:, C - k, None]
    pos = np.flatnonzero(a >= kth)
    if pos.size != N * k:
        return None
    return pos.reshape(N, k) - (np.arange(N) * C)[:, None]


def topk_indices(x: torch.Tensor, k: int) -> torch.Tensor:
    """Indices [.., k] of the k largest entries of the last axis (exact; order unspecified).

    Selection costs ~5-10 ns per entry on CPU whatever k is, so it runs on fewer entries: split
    the n entries into G strided groups of s; the groups that hold the top-k elements are
    among the k groups with the largest maxima (any other group's maximum is below all k),
    so the answer lies in those k·s entries. With s ≈ √(n/k) selection sees G + k·s ≈ 2√(nk)
    entries instead of n (1,254 of 3,072 at n = 3,072, k = 128). NumPy's selection is
    single-threaded, so with several torch threads the rows are split across as many workers.
    """
    n = x.size(-1)
    s = round(math.sqrt(n / k))
    G = n // max(s, 1)
    if s < 2 or G < k or x.device.type != "cpu":
        return x.topk(k, dim=-1, sorted=False).indices
    x2 = x.detach().reshape(-1, n)
    workers = min(torch.get_num_threads(), x2.size(0) // _ROWS_PER_WORKER)
    if workers > 1:
        idx = torch.cat(list(_pool().map(lambda rows: _grouped_topk(rows, k, s, G), x2.chunk(workers))))
    else:
        idx = _grouped_topk(x2, k, s, G)
    return idx.view(*x.shape[:-1], k)


def _grouped_topk(x2: torch.Tensor, k: int, s: int, G: int) -> torch.Tensor:
    N, n = x2.shape
    body = x2[:, : G * s].view(N, s, G)  # group g = {g, g+G, …, g+(s−1)G}
    fast = x2.dtype in (torch.float32, torch.float64)  # else (and on ties) index-carrying selection
    top_groups = _threshold_pick(body.amax(1).numpy(), k) if fast else None
    top_groups = torch.from_numpy(top_groups) if top_groups is not None else _argtopk(body.amax(1), k)  # [N, k]
    cand = body.gather(2, top_groups.unsqueeze(1).expand(N, s, k)).reshape(N, s * k)  # [N, s·k]
    tail = n - G * s  # entries that fit no group are always candidates
    if tail:
        cand = torch.cat([cand, x2[:, G * s:]], 1)
    pick = _threshold_pick(cand.numpy(), k) if fast else None
    pick = torch.from_numpy(pick) if pick is not None else _argtopk(cand, k)
    idx = top_groups.gather(1, pick.remainder(k)) + G * pick.div(k, rounding_mode="floor")
    if tail:
        idx = torch.where(pick >= s * k, pick - s * k + G * s, idx)
    return idx


_ROWS_PER_WORKER = 256
_POOL: Optional[ThreadPoolExecutor] = None


def _pool() -> ThreadPoolExecutor:
    """Workers for row-parallel selection (NumPy releases the GIL), created on first use."""
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="interpscale-topk")
    return _POOL


def _drop_pool() -> None:  # a forked child inherits the pool object but not its threads
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_drop_pool)


def select_topk(logits: torch.Tensor, k: Optional[int]) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """(σ of the k largest logits, their indices) on the last axis; None when k keeps all.

    σ is monotone, so selecting on the logits picks the same concepts as selecting on the
    activations and squashes only the k winners (ties at σ = 1 resolve by the logit).
    """
    if k is None or k >= logits.size(-1):
        return None
    idx = topk_indices(logits.detach(), k)
    return torch.sigmoid(logits.gather(-1, idx)), idx


def scatter_selection(sel: tuple[torch.Tensor, torch.Tensor], n: int) -> torch.Tensor:
    """Dense [.., n] activations, zero outside the selection (attribution, inspection)."""
    vals, idx = sel
    return vals.new_zeros(*vals.shape[:-1], n).scatter(-1, idx, vals)


def _csr(crow, col, vals, shape) -> torch.Tensor:
    with warnings.catch_warnings():  # "CSR support is in beta": tests check it against dense
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, vals, shape, check_invariants=False)


class Pattern:
    """The (token, column) positions of a top-k selection idx [N, k] in an [N, n] matrix, as
    CSR matrices carrying given values; the transpose's column sort is done once and shared
    by every backward product on the same selection."""

    def __init__(self, idx: torch.Tensor, n: int):
        self.idx, self.n = idx.reshape(-1, idx.size(-1)), n
        self._transpose = None

    def csr(self, vals: torch.Tensor) -> torch.Tensor:  # [N, n]
        N, k = self.idx.shape
        crow = torch.arange(0, N * k + 1, k, device=vals.device)
        return _csr(crow, self.idx.reshape(-1), vals.reshape(-1), (N, self.n))

    def csr_t(self, vals: torch.Tensor) -> torch.Tensor:  # [n, N]
        N, k = self.idx.shape
        if self._transpose is None:
            col = self.idx.reshape(-1)
            order = col.int().argsort().long()  # int32 keys sort ~2x faster than int64
            crow = torch.zeros(self.n + 1, dtype=torch.long, device=col.device)
            crow[1:] = torch.bincount(col, minlength=self.n).cumsum(0)
            self._transpose = (crow, order // k, order)
        crow, rows, order = self._transpose
        return _csr(crow, rows, vals.reshape(-1)[order], (self.n, N))


def _csr_ok(*ts: torch.Tensor) -> bool:
    """MKL sparse kernels: CPU, float32/float64, one dtype."""
    return all(t.device.type == "cpu" for t in ts) and ts[0].dtype in (torch.float32, torch.float64) \
        and all(t.dtype == ts[0].dtype for t in ts)


class _Compose(torch.autograd.Function):
    """vals [N, k] on ``pattern``, emb [n, r] -> S @ emb [N, r]."""

    @staticmethod
    def forward(ctx, vals, emb, pattern):
        ctx.save_for_backward(vals, emb)
        ctx.pattern = pattern
        return pattern.csr(vals) @ emb

    @staticmethod
    def backward(ctx, grad):
        vals, emb = ctx.saved_tensors
        p = ctx.pattern
        grad_vals = grad_emb = None
        if ctx.needs_input_grad[0]:  # ⟨grad_t, E_i⟩ only at the selected (t, i): SDDMM (beta=0: pattern only)
            grad_vals = torch.sparse.sampled_addmm(p.csr(vals), grad, emb.t(), beta=0.0).values().view_as(vals)
        if ctx.needs_input_grad[1]:
            grad_emb = p.csr_t(vals) @ grad
        return grad_vals, grad_emb, None


class _SelectedLogits(torch.autograd.Function):
    """(x @ Wᵀ) on ``pattern``, read from precomputed ``logits``; the gradient is sparse (k of
    n columns), so both backward products are SpMMs instead of dense 2·n·r."""

    @staticmethod
    def forward(ctx, x, weight, logits, pattern):
        ctx.save_for_backward(x, weight)
        ctx.pattern = pattern
        return logits.gather(-1, pattern.idx)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        p, grad = ctx.pattern, grad.contiguous()
        grad_x = p.csr(grad) @ weight if ctx.needs_input_grad[0] else None
        grad_w = p.csr_t(grad) @ x if ctx.needs_input_grad[1] else None
        return grad_x, grad_w, None, None


def _gather_is_smaller(k: int, emb: torch.Tensor) -> bool:
    """Gathered rows take k·r values per token, the dense route n: at the paper's sizes the
    known head (k = 32, r = d up to 3,840, n = 33,732) must go dense, the unknown head
    (k = 128, r = R = 256, m = 101,196) gathers."""
    return k * emb.size(1) < emb.size(0)


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.size(-1))


def selected_logits(x: torch.Tensor, weight: torch.Tensor, idx: torch.Tensor, logits: torch.Tensor,
                    pattern: Optional[Pattern] = None) -> torch.Tensor:
    """``logits.gather(-1, idx)`` where logits = x @ weightᵀ was computed without autograd;
    gradients reach x and weight through the selected entries only."""
    if not _csr_ok(x, weight, logits):  # CUDA, bf16: gathered rows or a dense recompute
        if _gather_is_smaller(idx.size(-1), weight):
            return torch.einsum("...r,...kr->...k", x, weight[idx])
        return (x @ weight.t()).gather(-1, idx)
    pattern = pattern or Pattern(idx, weight.size(0))
    return _SelectedLogits.apply(_flat(x), weight, _flat(logits), pattern).view(idx.shape)


def compose_rows(vals: torch.Tensor, idx: torch.Tensor, emb: torch.Tensor,
                 pattern: Optional[Pattern] = None) -> torch.Tensor:
    """Σ_j vals[.., j] · emb[idx[.., j]] -> [.., r] (vals, idx [.., k]; emb [n, r])."""
    if not _csr_ok(vals, emb):  # CUDA, bf16: gathered rows or the zero-filled dense product
        if _gather_is_smaller(idx.size(-1), emb):
            return torch.einsum("...k,...kr->...r", vals, emb[idx])
        return scatter_selection((vals, idx), emb.size(0)) @ emb
    pattern = pattern or Pattern(idx, emb.size(0))
    return _Compose.apply(_flat(vals), emb, pattern).view(*vals.shape[:-1], emb.size(-1))
