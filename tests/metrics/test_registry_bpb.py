"""The estimator registry (a new estimator by name) and bits per byte on a known text."""

import math

import pytest
import torch
from torch import nn

from interpscale.metrics import ESTIMATOR_REGISTRY, estimate_loss, estimate_losses, get_estimator, register_estimator
from interpscale.metrics.bpb import bits_per_byte, scored_bytes
from interpscale.metrics.loss import passes_per_batch, scored_positions
from interpscale.models.types import EOS_ID, Batch, ModelOutput

TEXT = "The cat sat on the mat. Naïve café, 東京 — ok!"


def test_builtins_are_registered_with_their_equations():
    assert {n: s.equation for n, s in ESTIMATOR_REGISTRY.items() if n in
            ("ar_ce", "mdlm_elbo", "fixed_rate", "fixed_grid", "per_block")} == {
        "ar_ce": "Eq. 1", "mdlm_elbo": "Eq. 39", "fixed_rate": "Eq. 36", "fixed_grid": "Eq. 37", "per_block": "Eq. 40"}
    assert passes_per_batch("fixed_grid", rates=(0.2, 0.4, 0.6)) == 3 and passes_per_batch("mdlm_elbo") == 1
    assert get_estimator("ar_ce").exact and not get_estimator("ar_ce").diffusion
    with pytest.raises(ValueError, match="already registered"):
        register_estimator("ar_ce", lambda *a: 0.0)


def test_a_registered_estimator_runs_by_name(unigram, make_batches):
    """A quarter-rate mask loss registered from outside: for a context-free model every mask
    rate has the same expectation, the exact per-token NLL."""
    from interpscale.metrics.loss import masked_loss

    def quarter(ctx, batch, i, group, weight):
        return masked_loss(ctx, batch, 0.25, ctx.gens["quarter_rate"])

    register_estimator("quarter_rate", quarter, rate=lambda ctx: 0.25, overwrite=True)
    try:
        model = unigram(20)
        data = make_batches(12, 4, 32, 20)
        est = estimate_loss(model, data, "quarter_rate", n_passes=4, seed=1)
        both = estimate_losses(model, data, ("quarter_rate", "fixed_rate"), n_passes=4, seed=1)
        assert est == both["quarter_rate"] and est.rate == 0.25 and est.n_forward == 4 * len(data)
        assert abs(est.value - model.exact_nll(data)) < 4 * est.se
    finally:
        ESTIMATOR_REGISTRY.pop("quarter_rate")
    with pytest.raises(ValueError, match="unknown estimator 'quarter_rate'"):
        estimate_loss(model, data, "quarter_rate")


def _tokenizer():
    from interpscale.data.tokenizer import train_tokenizer

    return train_tokenizer([TEXT] * 4, vocab_size=64)


class Uniform(nn.Module):
    """Zero logits: every next-token loss is ln V exactly."""

    is_diffusion = False

    def __init__(self, vocab):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.vocab = vocab

    def forward(self, tokens, **_):
        return ModelOutput(logits=torch.zeros(*tokens.shape, self.vocab) * self.w)


def test_bpb_on_a_known_text():
    tok = _tokenizer()
    ids = tok.encode(TEXT).ids
    assert tok.decode(ids) == TEXT  # the tokenizer round-trips the text
    n_bytes = len(TEXT.encode("utf-8"))
    assert n_bytes > len(TEXT)  # multi-byte characters are in the text
    # AR scores positions 1..T-1: put [EOS] first, so the scored tokens are exactly the text
    batch = Batch(tokens=torch.tensor([[EOS_ID] + ids]))
    assert scored_positions(batch, "ar_ce").sum() == len(ids)
    assert scored_bytes([batch], tok, "ar_ce") == n_bytes
    # a diffusion ELBO averages every valid position, so the same text without [EOS]
    assert scored_bytes([Batch(tokens=torch.tensor([ids]))], tok, "mdlm_elbo") == n_bytes
    V = tok.get_vocab_size()
    le = estimate_loss(Uniform(V), [batch], "ar_ce")
    assert le.value == pytest.approx(math.log(V), rel=1e-6) and le.n_tokens == len(ids)
    bpb = bits_per_byte(le.value, le.n_tokens, scored_bytes([batch], tok, "ar_ce"))
    assert bpb == le.value * len(ids) / (n_bytes * math.log(2))  # the definition, exactly
    assert bpb == pytest.approx(math.log2(V) * len(ids) / n_bytes, rel=1e-6)  # uniform model: log2 V bits/token
    assert math.isnan(bits_per_byte(1.0, 3, 0))


def test_evaluate_writes_bpb_next_to_loss(tmp_path):
    from interpscale.models import flops_per_token, params_nonembedding
    from interpscale.orchestration import RunSpec, evaluate_run, train_run
    from interpscale.data import open_data

    torch.set_num_threads(1)
    seq, bt, steps, over = 32, 4 * 32, 4, {"vocab_size": 128}
    M = flops_per_token("ar", "nano", seq, **over)
    spec = RunSpec(family="ar", size="nano", slice_flops=M * steps * bt, flops=M * steps * bt,
                   params=params_nonembedding("ar", "nano", **over), tokens=steps * bt, seq_len=seq, batch_tokens=bt,
                   flops_per_token=M, vocab_size=128, lr=3e-3, log_every=2, eval_batches=2,
                   data={"kind": "synthetic", "n_concepts": 6, "n_docs": 60, "entities_per_concept": 6})
    d = tmp_path / spec.run_id
    train_run(spec, d, progress=False)
    table = evaluate_run(d)
    assert {"loss", "bpb"} <= set(table.columns) and len(table) >= 1
    data = open_data(d)
    batches = data.val.eval_batches(spec.batch_size, spec.eval_batches, concepts=False)
    n_tok = int(sum(int(scored_positions(b, "ar_ce").sum()) for b in batches))
    n_bytes = scored_bytes(batches, data.tokenizer, "ar_ce")
    assert n_bytes > n_tok > 0
    for _, row in table.iterrows():
        assert row["bpb"] == row["loss"] * n_tok / (n_bytes * math.log(2))
