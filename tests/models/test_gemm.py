"""The oneDNN linear path (models/gemm.py) against F.linear: values, all three weight-gradient
orientations, the small-product / dtype / autocast / flag fallbacks, and a whole model."""

import platform
import sys

import pytest
import torch
import torch.nn.functional as F

from interpscale._malloc import retain_freed_memory
from interpscale.models import build_model, gemm
from interpscale.models.gemm import Linear, linear
from interpscale.models.types import Batch

needs_onednn = pytest.mark.skipif(not gemm._AVAILABLE, reason="torch built without oneDNN")
# torch.backends.mkldnn.flags() also resets allow_tf32 and warns that no Intel GPU is present
pytestmark = pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")


def _both(x, w, g):
    out = []
    for fn in (linear, F.linear):
        xl, wl = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        y = fn(xl, wl)
        y.backward(g)
        out.append((y.detach(), xl.grad, wl.grad))
    return out


@needs_onednn
@pytest.mark.parametrize("n_in,n_out", [(256, 768), (64, 3072), (3072, 64), (1024, 256)])
def test_linear_matches_f_linear_values_and_gradients(n_in, n_out):
    g = torch.Generator().manual_seed(n_in + n_out)
    x = torch.randn(4, 256, n_in, generator=g)
    w = torch.randn(n_out, n_in, generator=g) / n_in ** 0.5
    assert gemm._use_onednn(x, w)  # these shapes take the oneDNN route (fwd, dX, each dW orientation)
    ours, ref = _both(x, w, torch.randn(4, 256, n_out, generator=g))
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-4)
    assert ours[2].shape == w.shape


@needs_onednn
def test_strided_inputs_and_transposed_weights():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, 512, generator=g).transpose(0, 1)  # non-contiguous activations
    a = torch.randn(3072, 512, generator=g) / 20
    ours, ref = _both(x, a.t().t(), torch.randn(8, 256, 3072, generator=g))
    for u, v in zip(ours, ref):
        torch.testing.assert_close(u, v, atol=2e-4, rtol=1e-4)
    w_t = torch.randn(512, 3072, generator=g)  # a transposed view as the weight: U = A·B's A
    torch.testing.assert_close(linear(x, w_t.t()), x @ w_t, atol=2e-4, rtol=1e-4)


def test_fallbacks_take_f_linear():
    w = torch.randn(64, 32)
    assert not gemm._use_onednn(torch.randn(8, 32), w)  # single-token-sized product
    assert not gemm._use_onednn(torch.randn(4096, 32).double(), w.double())
    big = torch.randn(4096, 256), torch.randn(1024, 256)
    with torch.backends.mkldnn.flags(enabled=False):
        assert not gemm._use_onednn(*big)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not gemm._use_onednn(*big)
        assert linear(*big).dtype == F.linear(*big).dtype == torch.bfloat16


def test_linear_module_keeps_nn_linear_state_dict():
    m = Linear(16, 8)
    assert list(m.state_dict()) == ["weight"] and m.bias is None
    ref = torch.nn.Linear(16, 8, bias=False)
    m.load_state_dict(ref.state_dict())
    x = torch.randn(3, 16)
    torch.testing.assert_close(m(x), ref(x))


@needs_onednn
@pytest.mark.parametrize("family", ["ar", "cdlm+concept"])
def test_training_loss_and_gradients_match_with_and_without_onednn(family):
    kw = dict(n_layers=2, d_model=256, n_heads=4, n_kv_heads=4, vocab_size=512, max_seq_len=128, block_size=64)
    if family.endswith("concept"):
        kw |= dict(n_concepts=512, concept_rank=64)
    torch.manual_seed(0)
    model = build_model(family, "nano", **kw).eval()  # eval: no dropout draws, so both runs see one graph
    tokens = torch.randint(4, 512, (4, 128), generator=torch.Generator().manual_seed(1))
    grads = []
    for enabled in (True, False):
        model.zero_grad(set_to_none=True)
        with torch.backends.mkldnn.flags(enabled=enabled):
            torch.manual_seed(2)  # the same diffusion mask both times
            loss = model.loss(Batch(tokens), 10).total
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    torch.testing.assert_close(grads[0][0], grads[1][0], atol=1e-5, rtol=1e-5)
    assert len(grads[0][1]) == len(grads[1][1]) > 0
    for a, b in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)


def test_retain_freed_memory_is_accepted_by_glibc():
    expected = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert retain_freed_memory() is expected
