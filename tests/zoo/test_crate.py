"""CRATE: ISTA = explicit proximal-gradient steps, MSSA shares Q=K=V, Table 1 counts."""

import pytest
import torch

from interpscale.models import build_model, flops_per_token, params_nonembedding
from interpscale.models.zoo.crate import CRATE_TABLE1, GPT2_VOCAB, ISTA, MSSA, crate_params, gpt_params


def _prox_grad_step(A, D, z, eta, lam):
    # one step of non-negative ISTA on ½‖z − DA‖² + λ‖A‖₁: A ← max(0, A − η(Dᵀ(DA − z)) − ηλ)
    return torch.clamp(A - eta * (D.T @ (D @ A - z)) - eta * lam, min=0.0)


def test_ista_equals_two_explicit_proximal_gradient_steps():
    torch.manual_seed(0)
    ista = ISTA(16, 4, eta=0.1, lam=0.1)
    z = torch.randn(5, 16)
    D = ista.weight.detach().T  # d × h
    A = torch.zeros(64, 5)
    for _ in range(2):
        A = _prox_grad_step(A, D, z.T, 0.1, 0.1)
    assert torch.allclose(ista.codes(z), A.T, atol=1e-5)
    assert torch.allclose(ista(z), (D @ A).T, atol=1e-5)


def test_mssa_uses_one_shared_projection_and_is_causal():
    torch.manual_seed(0)
    m = MSSA(16, 4)
    assert sum(p.numel() for p in m.parameters()) == 2 * 16 * 16 + 16
    x = torch.randn(1, 6, 16)
    y1 = m(x)
    x2 = x.clone()
    x2[:, 4:] += 1.0  # the future must not change the past
    assert torch.allclose(m(x2)[:, :4], y1[:, :4], atol=1e-6)
    q = m.U(x).view(1, 6, 4, 4).transpose(1, 2)
    att = (q @ q.transpose(-1, -2) / 2.0).masked_fill(torch.ones(6, 6).triu(1).bool(), float("-inf")).softmax(-1)
    ref = m.proj((att @ q).transpose(1, 2).reshape(1, 6, 16))
    assert torch.allclose(y1, ref, atol=1e-5)


@pytest.mark.parametrize("name", ["1L", "2L", "3L", "B"])
def test_table1_parameter_counts(name):
    d, K, L, h, crate_p, gpt_p = CRATE_TABLE1[name]
    assert crate_params(GPT2_VOCAB, d, L) == pytest.approx(crate_p, rel=2e-3)
    assert gpt_params(GPT2_VOCAB, d, L) == pytest.approx(gpt_p, rel=2e-3)


def test_table1_small_row_is_a_typo_in_the_paper():
    # CRATE-S: V·d + 6(6d² + 5d) = 59.85M, not the printed 55.9M (its GPT twin, 81.1M, matches)
    d, K, L, h, crate_p, gpt_p = CRATE_TABLE1["S"]
    assert crate_params(GPT2_VOCAB, d, L) == pytest.approx(59.85e6, rel=1e-3)
    assert gpt_params(GPT2_VOCAB, d, L) == pytest.approx(gpt_p, rel=1e-3)


@pytest.mark.parametrize("family", ["crate", "crate-gpt"])
def test_built_model_matches_formula_at_table1_dims(family):
    m = build_model(family, "nano", d_model=128, n_heads=4, n_layers=1, vocab_size=GPT2_VOCAB, max_seq_len=16)
    emb = m.wte.weight.numel()
    blocks = sum(p.numel() for p in m.blocks.parameters())
    formula = crate_params if family == "crate" else gpt_params
    assert emb + blocks == formula(GPT2_VOCAB, 128, 1)
    assert m.params_nonembedding() == blocks + 2 * 128 == params_nonembedding(family, "nano", d_model=128, n_heads=4, n_layers=1)


def test_crate_flops_count_the_extra_ista_matmuls():
    kw = dict(d_model=64, n_heads=4, n_layers=2)
    d, L = 64, 2
    base = flops_per_token("crate", "nano", 32, **kw)
    one_step = flops_per_token("crate", "nano", 32, n_steps=1, **kw)
    assert base - one_step == pytest.approx(6 * L * 2 * (4 * d) * d)  # DᵀD·A₁: two h×d matmuls per layer


def test_crate_trains_and_is_sparse():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    m = build_model("crate", "nano", vocab_size=64, max_seq_len=32)
    from interpscale.models.types import Batch
    from interpscale.models.zoo.crate import activation_sparsity

    tokens = torch.randint(4, 64, (8, 32))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    first = None
    for step in range(30):
        out = m.loss(Batch(tokens), step)
        first = first if first is not None else out.parts["lm"]
        opt.zero_grad()
        out.total.backward()
        opt.step()
    assert out.parts["lm"] < first - 0.5
    acts = m.neuron_activations(tokens)
    assert len(acts) == 2 and acts[0].shape == (8, 32, 4 * 32)
    sp = activation_sparsity(acts)
    assert all(0.3 < s < 1.0 for s in sp)  # ReLU codes with the ηλ threshold are sparse
    gpt = build_model("crate-gpt", "nano", vocab_size=64, max_seq_len=32)
    assert all(s < 0.05 for s in activation_sparsity(gpt.neuron_activations(tokens)))  # GELU is dense


def test_autointerp_on_ista_codes_with_offline_judge(make_batches, trainer):
    from interpscale.judges import LexicalJudge
    from interpscale.metrics.autointerp import crate_autointerp
    from interpscale.models.zoo.crate import unit_activations

    torch.manual_seed(0)
    m = build_model("crate", "nano", vocab_size=128, max_seq_len=32)
    trainer(m, make_batches(20, vocab=128), 100)
    toks = torch.cat([b.tokens for b in make_batches(3, vocab=128, seed=5)])[:, :16]  # 24 excerpts
    acts, units = unit_activations(m, toks, 1, n_units=16)
    assert acts.shape == (16, 24, 16) and len(set(units)) == 16
    ista = m.neuron_activations(toks)[1]
    assert torch.allclose(torch.from_numpy(acts[0]).float(), ista[..., units[0]])
    out = crate_autointerp(m, toks, lambda i: f"w{i}", layer=1, n_units=16, judge=LexicalJudge())
    res = out["result"]
    assert len(res.records["top_and_random"]) == 16 and res.backend == "lexical"
    assert res.score("top_and_random") > 0.2  # measured 0.54: sparse codes are token-selective
    assert 0.3 < out["sparsity"] < 1.0
    with pytest.raises(ValueError, match="out of range"):
        unit_activations(m, toks, 1, units=[10_000])
