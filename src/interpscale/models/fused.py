"""Hand-written forward/backward for the backbone's memory-bound elementwise work (App. G).

On CPU ``F.rms_norm`` and the rotate-half RoPE are composites of many full-size passes
(pow, mean, rsqrt, mul, cat, ...) and autograd saves and replays each one. The functions here
compute the same values with fewer passes over the activations, no saved intermediates and
no separate residual add; they are plain torch ops, so they run on CUDA too. Math is done in
float32 for float16/bfloat16 inputs. First-order gradients only (``once_differentiable``).

- :func:`rms_norm`: y = x · r · w with r = 1/sqrt(mean(x²) + eps).
- :func:`add_rms_norm`: x + rms_norm(y), the post-norm residual update.
- :func:`qk_norm_rope`: from the fused QKV projection to attention's q, k, v: QK-norm over
  the full projection width with learned gains (OLMo-2 style), then rotate-half RoPE, for
  MHA and GQA alike.
"""

from __future__ import annotations

import torch

_LOW = (torch.float16, torch.bfloat16)


def _up(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.dtype in _LOW else t


def _inv_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """1/sqrt(mean(x², -1) + eps) as [..., 1]: one read of x, no x² temporary."""
    n = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return n.square_().mul_(1.0 / x.size(-1)).add_(eps).rsqrt_()


def _norm_grads(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, out: torch.Tensor):
    """Backward of y = x·r·w, an RMSNorm over the last dim (r = 1/rms(x)) with gain w [d]:
    given dL/dy ``g``, writes dL/dx into ``out`` (which may be ``g``) and returns dL/dw.

    With p = dL/dy·x: dL/dw = Σ_rows r·p and dL/dx = r·(dL/dy·w) − x·r³·mean(p·w). Both
    reductions of p are matrix-vector products; p lives in ``out`` until dL/dx overwrites it,
    unless ``out`` is ``g``."""
    d = w.size(-1)
    p = (g * x if out is g else torch.mul(g, x, out=out)).reshape(-1, d)
    gw = torch.mv(p.t(), r.view(-1))
    c = torch.mv(p, w).view_as(r).mul_(r.pow(3).mul_(1.0 / d))
    torch.mul(g, w, out=out).mul_(r).addcmul_(x, c, value=-1.0)
    return gw


def _rms_norm_backward(x, w, r, g):
    xf = _up(x).contiguous()
    gx = torch.empty_like(xf)
    gw = _norm_grads(_up(g).contiguous(), xf, _up(w), r, gx)
    return gx.to(x.dtype), gw.to(w.dtype)


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps):
        xf, wf = _up(x), _up(w)
        r = _inv_rms(xf, eps)
        ctx.save_for_backward(x, w, r)
        return (xf * r).mul_(wf).to(torch.result_type(x, w))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        return *_rms_norm_backward(*ctx.saved_tensors, g), None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim with a learned gain; same values as ``F.rms_norm``."""
    return _RMSNorm.apply(x, weight, eps)


class _AddRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y, w, eps):
        yf, wf = _up(y), _up(w)
        r = _inv_rms(yf, eps)
        ctx.save_for_backward(y, w, r)
        ctx.x_dtype = x.dtype
        t, nd = yf * r, torch.result_type(y, w)
        if t.dtype == nd == x.dtype:
            return torch.addcmul(x, t, wf, out=t)  # x + (y·r)·w into the y·r buffer: one pass
        return x + t.mul_(wf).to(nd)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        return g.to(ctx.x_dtype), *_rms_norm_backward(*ctx.saved_tensors, g), None


def add_rms_norm(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x + rms_norm(y, weight, eps): the post-norm residual update without a separate add."""
    return _AddRMSNorm.apply(x, y, weight, eps)


def _rope_into(out: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, hd: int, swap: bool) -> None:
    """out = x·a + rot(x)·b, rot swapping the halves of every hd-wide head (no rot(x) copy):
    one full-width product, then the two half-width cross terms. ``swap`` exchanges the
    halves of ``b`` (RoPE's transpose, for the backward)."""
    torch.mul(x, a, out=out)
    h = hd // 2
    o, x, b = (t.view(t.shape[:-1] + (-1, hd)) for t in (out, x, b))
    b1, b2 = (b[..., h:], b[..., :h]) if swap else (b[..., :h], b[..., h:])
    o[..., :h].addcmul_(x[..., h:], b1)
    o[..., h:].addcmul_(x[..., :h], b2)


def _groups(heads: int, kv_heads: int) -> list[tuple[int, int]]:
    """(first, count) of the q/k projections normalised together: one [B, T, 2, d] pass for MHA."""
    return [(0, 2)] if heads == kv_heads else [(0, 1), (1, 1)]


class _QKNormRoPE(torch.autograd.Function):
    """qkv [B, T, (H + 2·Hkv)·hd] -> q [B, H, T, hd], k and v [B, Hkv, T, hd] (views in the
    [B, T, heads, hd] memory layout SDPA's CPU kernels use, so its gradients come back dense)."""

    @staticmethod
    def forward(ctx, qkv, wq, wk, cos, sin, heads, kv_heads, eps):
        B, T, _ = qkv.shape
        hd = qkv.size(-1) // (heads + 2 * kv_heads)
        widths, gains = [heads * hd, kv_heads * hd], [wq, wk]
        outs, rs, off = [], [], 0
        for i, n in _groups(heads, kv_heads):
            width = widths[i]
            x = _up(qkv[..., off: off + n * width]).view(B, T, n, width)
            r = _inv_rms(x, eps)  # [B, T, n, 1]
            # the QK-norm gain folded into the RoPE tables ([T, n, width], T·d work, not B·T·d):
            # y·cos + rot(y)·sin with y = x̂·w equals x̂·(w·cos) + rot(x̂)·(rot(w)·sin)
            w = torch.stack([_up(g) for g in gains[i: i + n]])
            w_rot = w.view(n, -1, 2, hd // 2).flip(-2).view(n, width)
            wc, ws = cos[:, None, :width] * w, sin[:, None, :width] * w_rot
            out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            _rope_into(out, x, wc, ws, hd, swap=False)
            out.mul_(r)
            out = out.to(qkv.dtype).view(B, T, n, -1, hd)
            outs += [out[:, :, j].transpose(1, 2) for j in range(n)]
            rs.append(r)
            off += n * width
        ctx.save_for_backward(qkv, wq, wk, cos, sin, *rs)
        ctx.heads = heads, kv_heads
        return outs[0], outs[1], qkv[..., off:].view(B, T, kv_heads, hd).transpose(1, 2)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gq, gk, gv):
        qkv, wq, wk, cos, sin, *rs = ctx.saved_tensors
        heads, kv_heads = ctx.heads
        B, T, _ = qkv.shape
        hd = qkv.size(-1) // (heads + 2 * kv_heads)
        widths, gains, gouts = [heads * hd, kv_heads * hd], [wq, wk], [gq, gk]
        gx = torch.empty(qkv.shape, dtype=_up(qkv).dtype, device=qkv.device)
        gxv = gx[..., qkv.size(-1) - kv_heads * hd:]
        gws, off = [], 0
        for (i, n), r in zip(_groups(heads, kv_heads), rs):
            width = widths[i]
            x = _up(qkv[..., off: off + n * width]).view(B, T, n, width)
            gy = gx[..., off: off + n * width].view(B, T, n, width)
            for j in range(n):  # dL/dy for y = x̂·w: RoPE's transpose (swapped signed sin)
                g = gouts[i + j]
                if g is None:
                    gy[:, :, j].zero_()
                else:
                    g = _up(g).transpose(1, 2).reshape(B, T, width)
                    _rope_into(gy[:, :, j], g, cos[:, :width], sin[:, :width], hd, swap=True)
            for j in range(n):  # the RMSNorm backward of each projection, in place
                w, gyj = _up(gains[i + j]), gy[:, :, j]
                gw = _norm_grads(gyj, x[:, :, j], w, r[:, :, j], gyj)
                gws.append(gw.to(gains[i + j].dtype))
            off += n * width
        if gv is None:
            gxv.zero_()
        else:
            gxv.view(B, T, kv_heads, hd).copy_(gv.transpose(1, 2))
        return gx.to(qkv.dtype), gws[0], gws[1], None, None, None, None, None


def qk_norm_rope(qkv: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 heads: int, kv_heads: int, eps: float):
    """QK-norm (RMSNorm over each projection's full width, gains ``wq``/``wk``) and rotate-half
    RoPE on the fused projection ``qkv``. ``cos``/``sin`` are [T, ≥ heads·hd]: the per-head
    tables repeated across heads, ``sin`` signed (−sin on each head's first half).
    Returns q [B, H, T, hd] and k, v [B, Hkv, T, hd]; v is a view of ``qkv``."""
    return _QKNormRoPE.apply(qkv, wq, wk, cos, sin, heads, kv_heads, eps)
