"""Steering benchmark: Eq. 30 against the paper's tables, aggregation, held-out strength
selection, and the runner with a plain generate callable."""

import json

import pytest

from interpscale.judges import (JudgeRecord, LexicalJudge, SteeringSample, aggregate, harmonic,
                                run_steering_benchmark, select_strengths, table17)
from interpscale.judges.steering import score_steering_continuations

# (concept, quality, harmonic) as published: Table 9 (pretrained), Table 14, Table 17
PAPER_ROWS = [
    (0.033, 1.108, 0.065), (0.908, 1.588, 1.156), (1.072, 0.972, 1.020),  # Table 9
    (1.208, 0.989, 1.088), (1.244, 1.139, 1.189),  # Table 14
    (1.247, 1.064, 1.148),  # Table 17 (mid-trained)
]


@pytest.mark.parametrize("c,q,h", PAPER_ROWS)
def test_eq30_reproduces_the_published_harmonic_means(c, q, h):
    # The paper rounds its inputs to 3 decimals; the harmonic of the true means lies
    # within the harmonic of the rounding interval's corners, which must contain the
    # published value (Table 9's 0.065 comes from e.g. concept 0.0334, quality 1.108).
    lo, hi = harmonic(c - 5e-4, q - 5e-4), harmonic(c + 5e-4, q + 5e-4)
    assert lo - 5e-4 <= h <= hi + 5e-4
    assert harmonic(c, q) == pytest.approx(h, abs=1.2e-3)


def test_table9_unsteered_row_exactly():
    assert round(harmonic(0.0334, 1.108), 3) == 0.065
    assert round(harmonic(0.033, 1.108), 4) == 0.0641  # the rounded inputs alone give 0.064
    assert harmonic(0.0, 1.5) == 0.0 and harmonic(None, 1.0) is None
    assert harmonic(1.0, 2.0, 2.0) == pytest.approx(1.5)  # AxBench's three-judge version
    with pytest.raises(ValueError):
        harmonic(-1.0, 1.0)


def _rec(score, status=None):
    return JudgeRecord(score, "raw", status or ("ok" if score is not None else "parse_error"))


def _sample(c, q, condition="steered", concept="x", strength=1.0, split="eval", prompt_index=0):
    return SteeringSample(concept, 0, prompt_index, "p", condition, strength, split, "text", _rec(c), _rec(q))


def test_aggregate_excludes_parse_failures_and_counts_them():
    samples = [_sample(2, 2), _sample(0, 2), _sample(None, 1), _sample(1, None),
               _sample(2, 2, condition="unsteered"), _sample(2, 2, split="select")]
    s = aggregate(samples, "steered")
    assert s.n_samples == 4 and s.n_concept == 3 and s.n_quality == 3
    assert s.concept == pytest.approx(1.0)  # (2 + 0 + 1) / 3, the failure is not a zero
    assert s.quality == pytest.approx(5 / 3)
    assert s.harmonic == pytest.approx(2 / (1 / 1.0 + 3 / 5))
    assert s.sample_harmonic == pytest.approx((2.0 + 0.0) / 2)  # only samples with both scores
    assert (s.concept_parse_failures, s.quality_parse_failures) == (1, 1)


def test_sample_harmonic_is_below_harmonic_of_means_like_table17():
    # anti-correlated axes: the per-sample harmonic punishes them, as in Table 17 (0.843 < 1.020)
    samples = [_sample(2, 0), _sample(0, 2), _sample(1, 1), _sample(2, 1)]
    s = aggregate(samples, "steered")
    assert s.sample_harmonic < s.harmonic


def test_strength_selection_uses_only_held_out_prompts_and_breaks_ties_low():
    samples = [
        _sample(1, 2, strength=1.0, split="select"), _sample(2, 2, strength=2.0, split="select"),
        _sample(2, 0, strength=4.0, split="select"),
        _sample(2, 2, strength=4.0, split="eval"),  # eval prompts never influence the choice
        _sample(1, 1, concept="y", strength=1.0, split="select"), _sample(1, 1, concept="y", strength=2.0, split="select"),
        _sample(None, 1, concept="z", strength=2.0, split="select"),
    ]
    assert select_strengths(samples) == {"x": 2.0, "y": 1.0, "z": 2.0}


def _toy_generate(calls):
    """Steering strength adds concept words and, above 2, wrecks fluency."""
    def generate(prompt, *, card, strength, max_new_tokens, seed):
        calls.append((prompt, None if card is None else card.label, strength, seed))
        base = "we walked along the quiet river and talked about the week ahead"
        if card is None:
            if prompt.startswith("Write about"):
                return f"{base} and then about {card_words(prompt)}"
            return base
        words = list(card.words)
        if strength >= 4:
            return " ".join([words[0]] * 12)
        return base + " " + " ".join(words[: int(strength)])
    return generate


def card_words(prompt):
    return prompt.split(":", 1)[0].replace("Write about", "").strip()


def test_runner_generates_judges_selects_and_aggregates(cards, tmp_path):
    calls = []
    prompts = [f"Prompt number {i}." for i in range(4)]
    res = run_steering_benchmark(_toy_generate(calls), cards, prompts, judge=LexicalJudge(), n_concepts=2,
                                 strengths=(1.0, 2.0, 4.0), seed=3, generations_path=tmp_path / "gens.jsonl")
    sel, ev = res.config["selection_prompts"], res.config["eval_prompts"]
    assert len(sel) == 2 and len(ev) == 2 and not set(sel) & set(ev)
    assert res.config["n_concepts"] == 2
    # τ = 2 gives two concept words and fluent text; τ = 4 is repetitive garbage
    assert set(res.selected_strengths.values()) == {2.0}
    assert len(calls) == 2 * 2 * 3 + 2 * 2 * 3  # selection: 3 strengths; eval: 3 conditions
    t = res.conditions
    assert t["unsteered"].concept == 0.0 and t["steered"].concept == 2.0 and t["steered"].quality == 2.0
    assert t["prompting"].n_samples == 4
    md = res.table9()
    assert md.splitlines()[0] == "| Method | Concept ↑ | Quality ↑ | Harmonic ↑ |"
    assert "| Steered | 2.000 | 2.000 | 2.000 |" in md and "offline lexical backend" in md
    assert "Sample harmonic" in table17({"ckpt-A": res})
    # a restart re-uses every saved generation (the generator is not called again)
    again = run_steering_benchmark(lambda *a, **k: pytest.fail("regenerated"), cards, prompts, judge=LexicalJudge(),
                                   n_concepts=2, strengths=(1.0, 2.0, 4.0), seed=3,
                                   generations_path=tmp_path / "gens.jsonl")
    assert again.to_dict()["conditions"] == res.to_dict()["conditions"]


def test_runner_single_strength_uses_all_prompts_and_passes_the_card_only_when_steered(cards):
    calls = []
    res = run_steering_benchmark(_toy_generate(calls), cards, ["A.", "B."], judge=LexicalJudge(), n_concepts=None,
                                 strengths=(1.0,))
    assert res.selected_strengths == {} and res.config["eval_prompts"] == [0, 1]
    steered = [c for c in calls if c[1] is not None]
    assert len(steered) == 6 and all(c[2] == 1.0 for c in steered)
    prompting = [c for c in calls if c[0].startswith("Write about")]
    assert len(prompting) == 6 and all(c[1] is None for c in prompting)
    assert any("Racing bicycles on public roads." in c[0] for c in prompting)  # label and description prepended
    assert len({c[3] for c in calls}) == len(calls)  # a distinct seed per generation


def test_runner_rejects_bad_arguments(cards):
    gen = _toy_generate([])
    with pytest.raises(ValueError, match="conditions"):
        run_steering_benchmark(gen, cards, ["a"], judge=LexicalJudge(), conditions=("steered", "bogus"))
    with pytest.raises(ValueError, match="2 prompts"):
        run_steering_benchmark(gen, cards, ["a"], judge=LexicalJudge(), strengths=(1.0, 2.0))
    with pytest.raises(ValueError, match="str"):
        run_steering_benchmark(lambda *a, **k: 3, cards, ["a"], judge=LexicalJudge())


def test_score_given_continuations(cards):
    rows = [{"label": "volcanoes", "description": "Lava.", "words": ["lava", "magma"], "prompt": "Go.",
             "continuation": "Lava and magma poured out of the mountain all night long.", "condition": "steered"},
            {"label": "volcanoes", "description": "Lava.", "words": ["lava"], "prompt": "Go.",
             "continuation": "The bus was late again this morning, as it often is.", "condition": "unsteered"}]
    res = score_steering_continuations(rows, judge=LexicalJudge())
    assert res.conditions["steered"].concept == 2.0 and res.conditions["unsteered"].concept == 0.0
    assert list(res.conditions) == ["unsteered", "steered"]
    with pytest.raises(ValueError, match="condition"):
        score_steering_continuations([{**rows[0], "condition": "other"}], judge=LexicalJudge())
    json.dumps(res.to_dict())  # serialisable


def test_expected_scores_are_averaged_when_the_server_returns_logprobs(serve, cards):
    from interpscale.judges import JudgeClient
    from judge_server import ServerReply, digit_logprobs

    srv = serve(lambda b, n: ServerReply("Rating: [[1]]", logprobs=digit_logprobs("Rating: [[1]]", {1: 0.5, 2: 0.5})))
    rows = [{"label": c.label, "prompt": "p", "continuation": f"text {i}", "condition": "steered"}
            for i, c in enumerate(cards)]
    res = score_steering_continuations(rows, judge=JudgeClient(model="m", base_url=srv.url, top_logprobs=2))
    s = res.conditions["steered"]
    assert s.concept == 1.0 and s.concept_expected == pytest.approx(1.5) and s.quality_expected == pytest.approx(1.5)


def test_saved_generations_are_keyed_by_generator(cards, tmp_path):
    calls = []
    path = tmp_path / "g.jsonl"
    kw = dict(judge=LexicalJudge(), n_concepts=1, generations_path=path)
    run_steering_benchmark(_toy_generate(calls), cards, ["A."], generator_id="model-1", **kw)
    n = len(calls)
    run_steering_benchmark(_toy_generate(calls), cards, ["A."], generator_id="model-1", **kw)
    assert len(calls) == n  # same generator: nothing regenerated
    run_steering_benchmark(_toy_generate(calls), cards, ["A."], generator_id="model-2", **kw)
    assert len(calls) == 2 * n  # another model never re-uses the first one's text
    with open(path, "a") as f:
        f.write('{"key": "truncated by a ki')  # a line cut short by a kill is skipped
    run_steering_benchmark(_toy_generate(calls), cards, ["A."], generator_id="model-2", **kw)
    assert len(calls) == 2 * n
    run_steering_benchmark(_toy_generate(calls), cards, ["B."], generator_id="model-2", **kw)  # appends after it
    m = len(calls)
    run_steering_benchmark(_toy_generate(calls), cards, ["B."], generator_id="model-2", **kw)
    assert len(calls) == m  # the records written after the torn line are intact
