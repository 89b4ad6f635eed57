"""The hand-written forward/backward passes (models/fused.py) against straightforward autograd
references: RMSNorm, the post-norm residual update, QK-norm + RoPE, and the shifted AR loss."""

import pytest
import torch
import torch.nn.functional as F

from interpscale.models.backbone import _exceeds
from interpscale.models.fused import add_rms_norm, qk_norm_rope, rms_norm
from interpscale.models.objectives import ar_loss
from interpscale.models.types import Batch

EPS = 1e-6


def _grads(out, inputs, seed=1):
    """Gradients of a random linear functional of ``out`` (a tensor or a tuple of tensors)."""
    outs = out if isinstance(out, tuple) else (out,)
    g = torch.Generator().manual_seed(seed)
    cots = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs]
    return torch.autograd.grad(outs, inputs, cots)


def _leaf(*shape, dtype=torch.float32, scale=1.0, shift=0.0):
    return (shift + scale * torch.randn(*shape, dtype=dtype)).requires_grad_()


def _close(a, b, tol):
    for x, y in zip(a if isinstance(a, (tuple, list)) else (a,), b if isinstance(b, (tuple, list)) else (b,)):
        torch.testing.assert_close(x, y, atol=tol, rtol=tol)


def _rope_ref(x, cos, sin):  # x [B, T, h, hd]; cos/sin [T, hd], sin signed (−sin on the first half)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos[:, None] + torch.cat([x2, x1], dim=-1) * sin[:, None]


def _qk_ref(qkv, wq, wk, cos, sin, H, Hkv):
    B, T, _ = qkv.shape
    hd = cos.size(-1)
    q, k, v = qkv.split([H * hd, Hkv * hd, Hkv * hd], dim=-1)
    q = _rope_ref(F.rms_norm(q, (H * hd,), wq, EPS).view(B, T, H, hd), cos, sin)
    k = _rope_ref(F.rms_norm(k, (Hkv * hd,), wk, EPS).view(B, T, Hkv, hd), cos, sin)
    return q.transpose(1, 2), k.transpose(1, 2), v.reshape(B, T, Hkv, hd).transpose(1, 2)


def _tables(T, hd, dtype=torch.float32):
    ang = torch.outer(torch.arange(T, dtype=torch.float64), 1.0 / 5e5 ** (torch.arange(0, hd, 2) / hd)).repeat(1, 2)
    sign = torch.cat([-torch.ones(hd // 2), torch.ones(hd // 2)]).double()
    return ang.cos().to(dtype), (ang.sin() * sign).to(dtype)


def test_rms_norm_matches_f_rms_norm():
    x, w = _leaf(3, 7, 64, scale=0.05), _leaf(64, shift=1.0, scale=0.3)
    ours, ref = rms_norm(x, w, EPS), F.rms_norm(x, (64,), w, EPS)
    _close(ours, ref, 1e-5)
    _close(_grads(ours, (x, w)), _grads(ref, (x, w)), 1e-5)


def test_add_rms_norm_matches_residual_plus_norm():
    x, y, w = _leaf(2, 9, 32), _leaf(2, 9, 32, scale=3.0), _leaf(32, shift=1.0, scale=0.3)
    ours, ref = add_rms_norm(x, y, w, EPS), x + F.rms_norm(y, (32,), w, EPS)
    _close(ours, ref, 1e-5)
    _close(_grads(ours, (x, y, w)), _grads(ref, (x, y, w)), 1e-5)


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2)])
def test_qk_norm_rope_matches_reference(heads, kv_heads):
    B, T, hd = 2, 12, 16
    qkv = _leaf(B, T, (heads + 2 * kv_heads) * hd)
    wq, wk = _leaf(heads * hd, shift=1.0, scale=0.3), _leaf(kv_heads * hd, shift=1.0, scale=0.3)
    cos, sin = _tables(T, hd)
    ours = qk_norm_rope(qkv, wq, wk, cos.repeat(1, heads), sin.repeat(1, heads), heads, kv_heads, EPS)
    ref = _qk_ref(qkv, wq, wk, cos, sin, heads, kv_heads)
    _close(ours, ref, 1e-5)
    _close(_grads(ours, (qkv, wq, wk)), _grads(ref, (qkv, wq, wk)), 1e-5)


def test_fused_functions_pass_gradcheck():
    x, y, w = _leaf(2, 3, 8, dtype=torch.float64), _leaf(2, 3, 8, dtype=torch.float64), _leaf(8, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a, b: rms_norm(a, b, EPS), (x, w))
    assert torch.autograd.gradcheck(lambda a, b, c: add_rms_norm(a, b, c, EPS), (x, y, w))
    H, Hkv, hd, T = 2, 1, 4, 3
    cos, sin = _tables(T, hd, torch.float64)
    qkv = _leaf(2, T, (H + 2 * Hkv) * hd, dtype=torch.float64)
    wq, wk = _leaf(H * hd, dtype=torch.float64), _leaf(Hkv * hd, dtype=torch.float64)
    fn = lambda a, b, c: qk_norm_rope(a, b, c, cos.repeat(1, H), sin.repeat(1, H), H, Hkv, EPS)
    assert torch.autograd.gradcheck(fn, (qkv, wq, wk))


def test_bfloat16_inputs():
    x, w = _leaf(2, 5, 32).bfloat16().detach().requires_grad_(), _leaf(32).bfloat16().detach().requires_grad_()
    y = rms_norm(x, w, EPS)
    assert y.dtype == torch.bfloat16
    _close(y.float(), F.rms_norm(x.float(), (32,), w.float(), EPS), 3e-2)
    gx, gw = _grads(y, (x, w))
    assert gx.dtype == gw.dtype == torch.bfloat16 and torch.isfinite(gx).all() and torch.isfinite(gw).all()
    H, hd, T = 2, 8, 6
    cos, sin = _tables(T, hd, torch.bfloat16)
    qkv = _leaf(1, T, 3 * H * hd).bfloat16().detach().requires_grad_()
    wq, wk = torch.ones(H * hd, requires_grad=True), torch.ones(H * hd, requires_grad=True)  # fp32 gains (autocast)
    q, k, v = qk_norm_rope(qkv, wq, wk, cos.repeat(1, H), sin.repeat(1, H), H, H, EPS)
    assert q.dtype == k.dtype == v.dtype == torch.bfloat16
    ref = _qk_ref(qkv.float(), wq, wk, cos.float(), sin.float(), H, H)
    _close((q.float(), k.float()), ref[:2], 5e-2)
    gqkv, gwq, _ = _grads((q, k, v), (qkv, wq, wk))
    assert gqkv.dtype == torch.bfloat16 and gwq.dtype == torch.float32 and torch.isfinite(gqkv).all()


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_fused_backbone_equals_reference_path(kv_heads, tiny):
    """Forward and every parameter gradient of the fused attention/norm path vs the composite one."""
    torch.manual_seed(0)
    model = tiny("ar", n_heads=4, n_kv_heads=kv_heads, d_model=64, n_layers=2)
    tok = torch.randint(4, 512, (2, 32))

    def run():
        model.zero_grad()
        loss = model.loss(Batch(tok), 0).total
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    loss, grads = run()
    for blk in model.backbone.blocks:
        blk.attn.fuse_qk = False
        blk._update = lambda x, norm, y: x + F.rms_norm(y, (y.size(-1),), norm.weight, norm.eps)
        for nm in (blk.attn.q_norm, blk.attn.k_norm):
            nm.forward = lambda x, nm=nm: F.rms_norm(x, (x.size(-1),), nm.weight, nm.eps)
    fn = model.backbone.norm
    fn.forward = lambda x: F.rms_norm(x, (x.size(-1),), fn.weight, fn.eps)
    ref_loss, ref_grads = run()
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=0)
    for n, g in grads.items():
        torch.testing.assert_close(g, ref_grads[n], atol=1e-5, rtol=1e-4, msg=n)


def test_dropout_keeps_the_unfused_update(tiny):
    model = tiny("ar", dropout=0.5).train()
    out = model(torch.randint(4, 512, (1, 16))).logits
    assert torch.isfinite(out).all()


def test_ar_loss_full_length_ce_matches_shifted_slice():
    torch.manual_seed(0)
    logits = torch.randn(3, 10, 17, requires_grad=True)
    tokens = torch.randint(0, 17, (3, 10))
    loss, n = ar_loss(logits, tokens, None)
    ref = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
    assert n == 3 * 9
    _close(loss, ref, 1e-6)
    _close(_grads(loss, logits), _grads(ref, logits), 1e-6)
    valid = torch.ones(3, 10, dtype=torch.bool)
    valid[0, 6:] = False
    valid[2, :2] = False
    loss, n = ar_loss(logits, tokens, valid)
    keep = (valid[:, 1:] & valid[:, :-1]).flatten()
    ce = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
    ref = (ce * keep).sum() / keep.sum()
    assert n == int(keep.sum()) == 27 - 4 - 2
    _close(loss, ref, 1e-6)
    _close(_grads(loss, logits), _grads(ref, logits), 1e-6)
    with pytest.raises(ValueError):
        ar_loss(logits, tokens, torch.zeros_like(valid))


def test_clip_check_sees_both_signs():
    x = torch.zeros(2, 3)
    assert not _exceeds(x, 10.0)
    x[1, 2] = -10.5
    assert _exceeds(x, 10.0)
    x[1, 2] = 10.5
    assert _exceeds(x, 10.0) and not _exceeds(x, 11.0)
