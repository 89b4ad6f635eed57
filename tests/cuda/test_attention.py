"""FlexAttention (the block-causal CDLM path on GPU) against SDPA with the same boolean mask,
forward and backward, eager and compiled, with and without grouped-query attention."""

import pytest
import torch
import torch.nn.functional as F

from interpscale.models.backbone import allowed_mask, attend


@pytest.mark.cuda
@pytest.mark.parametrize("kv_heads", [4, 2])
@pytest.mark.parametrize("compiled", [False, True])
def test_flex_block_causal_matches_sdpa_with_the_mask(kv_heads, compiled, device):
    torch.manual_seed(0)
    B, H, T, hd, block = 2, 4, 256, 64, 64
    q = torch.randn(B, H, T, hd, device=device, requires_grad=True)
    k = torch.randn(B, kv_heads, T, hd, device=device, requires_grad=True)
    v = torch.randn(B, kv_heads, T, hd, device=device, requires_grad=True)
    fn = torch.compile(attend) if compiled else attend
    out = fn(q, k, v, "block", block)  # FlexAttention on CUDA (backbone.attend)
    pos = torch.arange(T, device=device)
    mask = allowed_mask("block", pos, pos, block)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=kv_heads != H)
    torch.testing.assert_close(out, ref, atol=2e-3, rtol=2e-3)
    g = torch.randn_like(ref)
    grads = torch.autograd.grad(out, (q, k, v), g)
    refs = torch.autograd.grad(ref, (q, k, v), g)
    for a, b in zip(grads, refs):
        torch.testing.assert_close(a, b, atol=5e-3, rtol=5e-3)


@pytest.mark.cuda
def test_block_causal_mask_is_not_causal_and_flex_sees_the_difference(device):
    """The comparison above can fail: within a block, later keys are visible (not causal)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 128, 32, device=device) for _ in range(3))
    block = attend(q, k, v, "block", 64)
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (block - causal).abs().max() > 1e-2
