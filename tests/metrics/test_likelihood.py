"""Continuation log-likelihoods (AR exact, diffusion MC ELBO) and the MMLU soft score (App. J)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from interpscale.metrics import loglikelihood, mmlu_soft_score, soft_score
from interpscale.metrics.likelihood import LETTERS, encode_pair, load_mc_jsonl, mc_prompt
from interpscale.models.types import EOS_ID

MMLU_MINI = Path(__file__).resolve().parents[2] / "src/interpscale/metrics/tasks/data/mmlu_mini.jsonl"


def test_ar_loglikelihood_is_exact(bigram):
    model = bigram(30)
    lp = torch.log_softmax(model.table.detach().double(), -1)
    res = loglikelihood(model, [([5, 6], [7, 8]), ([], [9]), ([4] * 40, [11, 12, 13])], batch_size=2)
    assert res[0][0] == pytest.approx(float(lp[6, 7] + lp[7, 8]), rel=1e-6)
    assert res[1][0] == pytest.approx(float(lp[EOS_ID, 9]), rel=1e-6)  # empty context -> [EOS] prefix
    assert res[2][0] == pytest.approx(float(lp[4, 11] + lp[11, 12] + lp[12, 13]), rel=1e-6)
    greedy = bool(lp[6].argmax() == 7 and lp[7].argmax() == 8)
    assert res[0][1] == greedy


def test_diffusion_loglikelihood_single_token_is_exact_and_longer_is_unbiased(unigram):
    model = unigram(30)
    lp = torch.log_softmax(model.table.detach().double(), -1)
    one = loglikelihood(model, [([5, 6, 7], [9])], n_samples=4)[0][0]
    assert one == pytest.approx(float(lp[9]), rel=1e-6)
    cont = [5, 9, 12, 20, 21, 22]
    exact = float(lp[cont].sum())
    est = [loglikelihood(model, [([4], cont)], n_samples=16, seed=s)[0][0] for s in range(12)]
    mean = sum(est) / len(est)
    sd = math.sqrt(sum((e - mean) ** 2 for e in est) / (len(est) - 1))
    assert sd > 0
    assert abs(mean - exact) < 3 * sd / math.sqrt(len(est))


def test_shared_masks_cut_the_variance_of_choice_differences(unigram):
    model = unigram(30, seed=3)
    a, b = [5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 9, 11]  # choices that differ in one token
    def diffs(share):
        out = []
        for s in range(16):
            (la, _), (lb, _) = loglikelihood(model, [([4], a), ([4], b)], n_samples=4, seed=s, share_masks=share)
            out.append(la - lb)
        m = sum(out) / len(out)
        return sum((x - m) ** 2 for x in out) / (len(out) - 1)
    assert diffs(True) < 0.25 * diffs(False)


def test_loglikelihood_rejects_empty_continuation(unigram):
    with pytest.raises(ValueError, match="empty continuation"):
        loglikelihood(unigram(10), [([4], [])])


def test_soft_score_closed_form():
    ll = [math.log(0.5), math.log(0.25), math.log(0.125), math.log(0.125)]
    assert soft_score(ll, 0) == pytest.approx(math.log(0.5))
    # unnormalised choice probabilities are renormalised over the choices
    assert soft_score([x - 3.0 for x in ll], 1) == pytest.approx(math.log(0.25))
    assert all(soft_score(ll, i) <= 0 for i in range(4))
    with pytest.raises(ValueError):
        soft_score(ll, 4)


def test_mmlu_soft_score_matches_hand_computation_for_context_free_ar(unigram, sounds_tok):
    model = unigram(sounds_tok.get_vocab_size(), diffusion=False, seed=2)
    lp = torch.log_softmax(model.table.detach().double(), -1)
    rows = load_mc_jsonl(MMLU_MINI)
    res = mmlu_soft_score(model, sounds_tok, MMLU_MINI)
    assert res.n == len(rows) == 16
    for r, got in zip(rows, res.per_item):
        lls = []
        for j in range(4):
            _, cont = encode_pair(sounds_tok, mc_prompt(r["question"], r["choices"]), f" {LETTERS[j]}")
            lls.append(float(lp[cont].sum()))
        hand = lls[r["answer"]] - math.log(sum(math.exp(x) for x in lls))
        assert got == pytest.approx(hand, rel=1e-6)
    assert res.soft_score <= 0 and 0 <= res.accuracy <= 1 and res.se > 0


def test_mmlu_soft_score_for_diffusion_and_bad_rows(trained_cdlm, sounds_tok, tmp_path):
    res = mmlu_soft_score(trained_cdlm, sounds_tok, MMLU_MINI, n_samples=4)
    assert res.n == 16 and res.soft_score < 0 and math.isfinite(res.se)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "choices": ["a", "b"], "answer": "C"}\n')
    with pytest.raises(ValueError, match="answer"):
        mmlu_soft_score(trained_cdlm, sounds_tok, bad)


def test_special_ids_come_from_the_model_config():
    """A corpus prepared with a pretrained tokenizer puts EOS/PAD/MASK anywhere in the
    vocabulary: the metrics read them from the model's config, not the built-in 0-3."""
    from interpscale.metrics._common import special_id, special_ids
    from interpscale.metrics.checkpoint_judging import concept_top_tokens
    from interpscale.models import build_model

    ids = dict(pad_id=60, eos_id=61, eoc_id=62, mask_id=63)
    torch.manual_seed(0)
    model = build_model("ar+concept", "nano", vocab_size=64, max_seq_len=32, n_concepts=4, **ids).eval()
    assert special_ids(model) == frozenset(ids.values())
    assert special_id(model, "mask_id") == 63 and special_id(model, "eos_id") == 61
    # An empty context is the model's EOS, so it equals an explicit [61] context.
    (empty,) = loglikelihood(model, [([], [5, 6])])
    (explicit,) = loglikelihood(model, [([61], [5, 6])])
    assert empty[0] == pytest.approx(explicit[0], abs=1e-5)
    (old,) = loglikelihood(model, [([EOS_ID], [5, 6])])
    assert old[0] != pytest.approx(empty[0], abs=1e-5)
    # Concept top tokens never list a special id, even when the head favours them.
    from interpscale.metrics.interp import concept_top_tokens as top_ids, known_concept_embeddings, lm_head_weight

    with torch.no_grad():
        lm_head_weight(model)[60:] = 100.0 * known_concept_embeddings(model)  # special id 60+c tops concept c
    assert all(60 + c in row for c, row in enumerate(top_ids(model, k=5).tolist()))

    class Tok:
        def decode(self, ids, skip_special_tokens=False):
            return " ".join(f"t{i}" for i in ids)

        def id_to_token(self, i):
            return f"t{i}"

    rows = concept_top_tokens(model, Tok(), k=5)
    assert all(len(r) == 5 and not {"t60", "t61", "t62", "t63"} & set(r) for r in rows)
