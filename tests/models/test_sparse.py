"""Top-k selection, CSR composition and the factorised/membership loss paths against their
straightforward dense definitions (values and gradients)."""

import pytest
import torch
import torch.nn.functional as F

from interpscale.models import concept as concept_mod
from interpscale.models import sparse
from interpscale.models.concept import concept_loss, independence_loss
from interpscale.models.sparse import Pattern, compose_rows, selected_logits, topk_indices
from interpscale.models.types import Batch, PhaseSchedule


@pytest.mark.parametrize("shape,k", [((64, 3072), 128), ((2, 32, 1024), 32), ((50, 1000), 7), ((8, 101), 3),
                                     ((16, 64), 64), ((4, 500), 1)])
def test_topk_indices_is_exact(shape, k):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(k))
    idx = topk_indices(x, k)
    assert idx.shape == (*shape[:-1], k)
    want = x.topk(k, dim=-1).indices.sort(-1).values
    assert torch.equal(idx.sort(-1).values, want)


def test_topk_indices_with_ties_returns_k_distinct_largest():
    x = torch.randint(0, 5, (256, 400), generator=torch.Generator().manual_seed(1)).float()  # heavy ties
    idx = topk_indices(x, 40)
    assert all(len(set(r.tolist())) == 40 for r in idx)
    got = x.gather(-1, idx).sort(-1).values
    assert torch.equal(got, x.topk(40, dim=-1).values.sort(-1).values)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_topk_indices_tie_at_kth_value_falls_back_exactly(dtype):
    # distinct values except that ranks k and k+1 are equal in every row: the value-threshold
    # fast path sees k+1 entries >= the k-th value and must hand over to exact selection
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 3072, generator=g, dtype=dtype)
    order = x.argsort(-1, descending=True)
    x.scatter_(-1, order[:, 128:129], x.gather(-1, order[:, 127:128]))
    idx = topk_indices(x, 128)
    assert all(len(set(r.tolist())) == 128 for r in idx)
    torch.testing.assert_close(x.gather(-1, idx).sort(-1).values, x.topk(128, -1).values.sort(-1).values)


def test_topk_indices_with_nan_treats_nan_as_largest():
    x = torch.randn(32, 1024, generator=torch.Generator().manual_seed(4))
    x[:, 5] = float("nan")
    idx = topk_indices(x, 32)
    assert bool((idx == 5).any(-1).all())
    assert torch.equal(idx.sort(-1).values, x.topk(32, -1).indices.sort(-1).values)


def _pool_in_child(q):
    q.put(sparse._POOL is None)


def test_topk_indices_row_parallel_matches_and_survives_fork():
    import multiprocessing as mp
    x = torch.randn(2048, 3072, generator=torch.Generator().manual_seed(5))
    want = x.topk(128, -1).indices.sort(-1).values
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(3)  # rows split over 3 workers (uneven chunks)
        assert torch.equal(topk_indices(x, 128).sort(-1).values, want)
        assert sparse._POOL is not None
        # a forked child must not submit to the parent's pool, whose threads it lacks (its
        # OpenMP would hang anyway after the parent's parallel regions, so only the reset is checked)
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        child = ctx.Process(target=_pool_in_child, args=(q,))
        child.start()
        child.join(60)
        assert child.exitcode == 0 and q.get(timeout=5)
    finally:
        torch.set_num_threads(threads)


def _sel(N, n, k, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(N, n, generator=g, dtype=dtype)
    return torch.sigmoid(logits.topk(k, -1).values), topk_indices(logits, k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compose_rows_matches_dense_composition(dtype):
    vals, idx = _sel(96, 300, 20, dtype)
    vals = vals.view(4, 24, 20).requires_grad_()
    idx = idx.view(4, 24, 20)
    emb = torch.randn(300, 16, dtype=dtype, requires_grad=True)
    out = compose_rows(vals, idx, emb)
    dense = torch.zeros(4, 24, 300, dtype=dtype).scatter(-1, idx, vals)
    ref = dense @ emb
    g = torch.randn_like(ref)
    got_grads = torch.autograd.grad(out, (vals, emb), g)
    ref_grads = torch.autograd.grad(ref, (vals, emb), g)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert out.shape == (4, 24, 16) and torch.allclose(out, ref, atol=tol)
    for a, b in zip(got_grads, ref_grads):
        assert torch.allclose(a, b, atol=tol)


def test_selected_logits_gradient_is_the_gathered_linear_gradient():
    x = torch.randn(2, 40, 12, dtype=torch.float64, requires_grad=True)
    w = torch.randn(90, 12, dtype=torch.float64, requires_grad=True)
    with torch.no_grad():
        logits = F.linear(x, w)
    idx = topk_indices(logits, 9)
    got = selected_logits(x, w, idx, logits)
    ref = F.linear(x, w).gather(-1, idx)
    g = torch.randn_like(ref)
    assert torch.allclose(got, ref)
    for a, b in zip(torch.autograd.grad(got, (x, w), g), torch.autograd.grad(ref, (x, w), g)):
        assert torch.allclose(a, b, atol=1e-12)


def test_pattern_transpose_is_the_dense_transpose():
    vals, idx = _sel(50, 70, 6, torch.float64)
    p = Pattern(idx, 70)
    dense = torch.zeros(50, 70, dtype=torch.float64).scatter(-1, idx, vals)
    assert torch.equal(p.csr(vals).to_dense(), dense)
    assert torch.equal(p.csr_t(vals).to_dense(), dense.T)
    assert torch.equal(p.csr_t(2 * vals).to_dense(), 2 * dense.T)  # cached order, new values


def test_gather_fallback_agrees_with_csr_path():
    """bf16 takes the gather path (MKL has no bf16 SpMM); it computes the same composition."""
    vals, idx = _sel(64, 200, 10, torch.float32)
    emb = torch.randn(200, 8)
    got = compose_rows(vals.bfloat16(), idx, emb.bfloat16()).float()
    assert torch.allclose(got, compose_rows(vals, idx, emb), atol=0.05, rtol=0.02)


@pytest.mark.parametrize("n,k,r", [(300, 5, 16), (40, 8, 16)])  # gathered rows / dense product
def test_non_csr_fallbacks_match_the_csr_path(n, k, r, monkeypatch):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(3, 10, r, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(n, r, generator=g, dtype=torch.float64, requires_grad=True)
    with torch.no_grad():
        logits = x @ w.t()
    idx = topk_indices(logits, k)

    def run():
        vals = torch.sigmoid(selected_logits(x, w, idx, logits))
        out = compose_rows(vals, idx, w)
        return (out, *torch.autograd.grad(out.square().sum(), (x, w)))

    want = run()
    monkeypatch.setattr(sparse, "_csr_ok", lambda *ts: False)
    assert sparse._gather_is_smaller(k, w) == (k * r < n)
    for a, b in zip(run(), want):
        assert torch.allclose(a, b, atol=1e-10)


@pytest.mark.parametrize("all_positions", [True, False])
def test_independence_loss_through_coordinates_equals_dense(all_positions):
    g = torch.Generator().manual_seed(3)
    z = torch.randn(3, 20, 6, generator=g, dtype=torch.float64, requires_grad=True)
    basis = torch.randn(6, 10, generator=g, dtype=torch.float64, requires_grad=True)
    k_hat = torch.randn(3, 20, 10, generator=g, dtype=torch.float64)
    pos = torch.ones(3, 20, dtype=torch.bool) if all_positions else torch.rand(3, 20, generator=g) < 0.5
    got = independence_loss(z, k_hat, pos, basis=basis)
    ref = independence_loss(z @ basis, k_hat, pos)
    assert torch.allclose(got, ref, rtol=1e-10)
    for a, b in zip(torch.autograd.grad(got, (z, basis)), torch.autograd.grad(ref, (z, basis))):
        assert torch.allclose(a, b, rtol=1e-8, atol=1e-12)


def test_membership_and_scatter_concept_loss_agree(monkeypatch):
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(2, 30, 12, generator=g, dtype=torch.float64, requires_grad=True)
    cid = torch.randint(-1, 5, (2, 30), generator=g)
    labels = (torch.rand(2, 5, 12, generator=g) < 0.3).double()
    valid = torch.rand(2, 30, generator=g) < 0.8
    a, n_a = concept_loss(logits, cid, labels, valid)
    (ga,) = torch.autograd.grad(a, logits)
    monkeypatch.setattr(concept_mod, "_MEMBERSHIP_MAX_CHUNKS", 0)  # force scatter_add
    b, n_b = concept_loss(logits, cid, labels, valid)
    (gb,) = torch.autograd.grad(b, logits)
    assert n_a == n_b and torch.allclose(a, b, rtol=1e-6) and torch.allclose(ga, gb, atol=1e-7)


@pytest.mark.parametrize("family", ["ar+concept", "cdlm+concept"])
@pytest.mark.parametrize("phase", ["stable", "anneal"])
def test_model_loss_and_gradients_equal_on_csr_and_gather_paths(family, phase, tiny, chunked, monkeypatch):
    """The whole training loss through the CPU sparse kernels equals the plain gather path."""
    model = tiny(family, n_concepts=16, concept_rank=8, anneal_topk_known=4, anneal_topk_unknown=6,
                 topk_known=3, p_eps=0.0, p_cfg=0.0).double()
    model.set_phase(PhaseSchedule(phase, 100, 50))
    tokens = torch.randint(4, model.config.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    cid, labels = chunked(2, 32, 16)

    def loss_and_grads():
        torch.manual_seed(1)  # same masks / teacher forcing draws on both paths
        loss = model.loss(Batch(tokens, cid, labels.double()), 10).total
        return loss, torch.autograd.grad(loss, [p for p in model.parameters()], allow_unused=True)

    loss_csr, g_csr = loss_and_grads()
    monkeypatch.setattr(sparse, "_csr_ok", lambda *ts: False)
    loss_ref, g_ref = loss_and_grads()
    assert torch.allclose(loss_csr, loss_ref, rtol=1e-10)
    for a, b in zip(g_csr, g_ref):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b, atol=1e-10)


def test_residual_dropout_rate_and_scale(tiny):
    x = torch.ones(200_000, dtype=torch.float64)
    torch.manual_seed(0)
    y = concept_mod._dropout(x, 0.3, True)
    assert abs(float((y == 0).double().mean()) - 0.3) < 0.005
    assert abs(float(y.mean()) - 1.0) < 0.01  # inverted dropout keeps the expectation
    assert torch.equal(concept_mod._dropout(x, 0.3, False), x)
