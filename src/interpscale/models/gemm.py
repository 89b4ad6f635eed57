"""Bias-free linear layers through oneDNN on CPU (float32), plain ``F.linear`` elsewhere.

On CPU, ``F.linear`` and its backward call MKL's sgemm. On this project's machines (AMD
EPYC, AVX-512) oneDNN's JIT GEMM computes the forward product and the input gradient 5-20%
faster for the shapes a training step produces, and lopsided weight gradients (one side
≥ 4x the other) 3-30% faster; the other weight gradients stay on MKL, which is as fast
there (figures in ``benchmarks/README.md``). Values are the same float32 products up to
summation order.

Small products (under ``_MIN_MACS`` multiply-adds) go to ``F.linear``: oneDNN's per-call
overhead (~10 µs) outweighs its speed there, e.g. single-token decoding. So do autocast
regions (autocast chooses F.linear's dtype). ``torch.backends.mkldnn.flags(enabled=False)``
turns the path off; the benchmark uses it to measure a like-for-like GEMM.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

_MIN_MACS = 1 << 23
_LOPSIDED = 4  # weight gradients with one side >= 4x the other go through oneDNN


def _probe() -> bool:
    try:
        op = torch.ops.mkldnn._linear_pointwise
        x, w = torch.arange(12.0).view(4, 3), torch.arange(15.0).view(5, 3).cos()  # no RNG draw at import
        return torch.backends.mkldnn.is_available() and torch.allclose(op(x, w, None, "none", [], ""), x @ w.t())
    except (AttributeError, RuntimeError):  # torch built without oneDNN, or the op changed
        return False


_AVAILABLE = _probe()


def _use_onednn(x: torch.Tensor, w: torch.Tensor) -> bool:
    return (_AVAILABLE and x.device.type == "cpu" and x.dtype == w.dtype == torch.float32
            and x.numel() * w.size(0) >= _MIN_MACS and torch.backends.mkldnn.enabled
            and not torch.is_autocast_enabled("cpu"))  # autocast picks F.linear's dtype


def _mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w.T over the last dim of x; oneDNN when it pays off."""
    return _onednn(x, w) if _use_onednn(x, w) else F.linear(x, w)


def _onednn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):  # linear() already chose the oneDNN route
        ctx.save_for_backward(x, w)
        return _onednn(x, w)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gx = gw = None
        if ctx.needs_input_grad[0]:
            gx = _mm(g, w.t())  # g @ w: the transposed weight is a view, oneDNN reads it strided
        if ctx.needs_input_grad[1]:
            gw = _weight_grad(g.reshape(-1, g.size(-1)), x.reshape(-1, x.size(-1)), w)
        return gx, gw


def _weight_grad(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """gᵀx [M, K] for g [N, M], x [N, K]. oneDNN is fastest when its output is wide, so a
    lopsided product (one side ≥ 4x the other: SwiGLU's d↔4d, R = 64 vs m = 3,072 in the
    unknown head) goes through it in the orientation with the wide side last; MKL takes the
    rest (at 3x, W_qkv, the transposed result's copy into .grad eats the gain)."""
    M, K = w.shape
    if not _use_onednn(x, w) or max(M, K) < _LOPSIDED * min(M, K):
        return torch.mm(g.t(), x)
    return _onednn(x.t(), g.t()).t() if M > K else _onednn(g.t(), x.t())  # (xᵀg)ᵀ or gᵀx


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``F.linear(x, weight)`` without bias; oneDNN on CPU float32 for large enough products."""
    if _use_onednn(x, weight):
        return _Linear.apply(x, weight)
    return F.linear(x, weight)


class Linear(nn.Linear):
    """``nn.Linear(bias=False)`` (same parameters and state-dict keys) through :func:`linear`."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight)
