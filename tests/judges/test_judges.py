"""Judges end to end over HTTP and offline: templates, parsing, relevance JSON, the
steering judges' inputs, auto-interp, and the lexical backend's labelling."""

import json
import re

import numpy as np
import pytest

from interpscale.judges import (LEXICAL_LABEL, ConceptCard, JudgeClient, LexicalJudge, TemplateSet, load_templates,
                                pearson, build_judge, score_alignment, score_autointerp, score_relevance)
from judge_server import ServerReply
from interpscale.judges.parsing import expected_score, parse_activations, parse_alignment, parse_json_scores, parse_rating
from interpscale.judges.steering import judge_continuations


def test_parsers_accept_the_formats_and_reject_everything_else():
    assert parse_alignment("ALIGNMENT: 3").value == 3
    assert parse_alignment("**ALIGNMENT:** 5\n").value == 5
    assert parse_alignment("alignment = 2").value == 2
    for bad in ("", "ALIGNMENT: 0", "ALIGNMENT: 6", "ALIGNMENT: 3.5", "Score 3", "ALIGNMENT: 2 ... ALIGNMENT: 4"):
        assert parse_alignment(bad) is None, bad
    assert parse_rating("Rating: [[2]]").value == 2 and parse_rating("rating:[[ 0 ]]").value == 0
    assert parse_rating("Rating: [[3]]") is None and parse_rating("[[1]]") is None
    assert parse_rating("Rating: [[1]]\nRating: [[1]]").value == 1  # repeated but consistent
    assert parse_json_scores('```json\n{"A": 4, "b": "2"}\n```', keys=["A", "B"]).value == {"A": 4, "B": 2}
    assert parse_json_scores('{"A": 4}', keys=["A", "B"]) is None  # a candidate missing
    assert parse_json_scores('{"A": 9, "B": 1}', keys=["A", "B"]) is None
    assert parse_json_scores("{'A': 4}", keys=["A"]) is None
    assert parse_activations("[0, 1, 10]", n=3).value == [0.0, 1.0, 10.0]
    assert parse_activations("[0, 1]", n=3) is None and parse_activations("[0, 11, 2]", n=3) is None


def test_expected_score_reads_the_digit_token_only():
    lp = [{"token": "Rating", "top_logprobs": []}, {"token": ": [[", "top_logprobs": []},
          {"token": "2", "top_logprobs": [{"token": "2", "logprob": np.log(0.5)}, {"token": "1", "logprob": np.log(0.25)},
                                          {"token": "x", "logprob": np.log(0.25)}]},
          {"token": "]]", "top_logprobs": []}]
    p = parse_rating("Rating: [[2]]")
    assert expected_score(lp, p.span, 0, 2) == pytest.approx((0.5 * 2 + 0.25 * 1) / 0.75)
    merged = [{"token": "Rating: [[2]]", "top_logprobs": [{"token": "Rating", "logprob": 0.0}]}]
    assert expected_score(merged, p.span, 0, 2) is None  # digit not its own token: no guess


def test_template_overrides_are_versioned_and_validated(tmp_path):
    ts = TemplateSet()
    new = ts.override({"steer_concept": {"user": "Concept {label} ({description}). Text: {continuation}. "
                                                 "Reply Rating: [[n]]."}})
    assert new["steer_concept"].version.startswith("steer_concept-custom-")
    assert new["steer_concept"].version != ts["steer_concept"].version
    with pytest.raises(ValueError, match="drops placeholders"):
        ts.override({"steer_concept": {"user": "Text: {continuation}"}})
    with pytest.raises(ValueError, match="unknown placeholders"):
        ts.override({"steer_quality": {"user": "{continuation} {secret}"}})
    with pytest.raises(ValueError, match="unknown judge template"):
        ts.override({"nope": {"user": "x"}})
    f = tmp_path / "t.toml"
    f.write_text('[alignment]\nversion = "ours-2"\nuser = """Label {label}. Desc {description}. Tokens {tokens}."""\n')
    loaded = load_templates(f)
    assert loaded["alignment"].version == "ours-2" and loaded["alignment"].system == ts["alignment"].system


def test_prompts_keep_the_papers_scales_and_formats():
    ts = TemplateSet()
    assert (ts["alignment"].lo, ts["alignment"].hi) == (1, 5) and "ALIGNMENT: <integer" in ts["alignment"].system
    for name in ("steer_concept", "steer_quality", "steer_instruction"):
        assert (ts[name].lo, ts[name].hi) == (0, 2) and "Rating: [[2]]" in ts[name].user
        assert ts[name].system is None  # App. M: a single user message
    assert (ts["relevance"].lo, ts["relevance"].hi) == (1, 5) and "JSON" in ts["relevance"].system
    assert ts["steer_quality"].fields == {"continuation"}  # the quality judge sees only the continuation
    assert ts["steer_quality_prefix"].fields == {"prompt", "continuation"}


def test_quality_judge_sees_only_the_continuation(serve, cards):
    srv = serve()
    judge = JudgeClient(model="m", base_url=srv.url)
    item = dict(card=cards[0], prompt="PREFIX-SENTINEL opening words", continuation="the riders climbed", condition="steered")
    samples = judge_continuations([item], judge=judge, instruction=True)
    bodies = [b["messages"][0]["content"] for b in srv.requests]
    concept = next(b for b in bodies if "TARGET CONCEPT" in b)
    quality = next(b for b in bodies if "how well the TEXT below is written" in b)
    instruction = next(b for b in bodies if "[INSTRUCTION]" in b)
    assert "road cycling" in concept and "the riders climbed" in concept and "PREFIX-SENTINEL" not in concept
    assert "the riders climbed" in quality and "PREFIX-SENTINEL" not in quality and "road cycling" not in quality
    assert "PREFIX-SENTINEL" in instruction
    assert samples[0].instruction_score.score == 1 and samples[0].sample_harmonic3 == pytest.approx(1.0)
    judge_continuations([item], judge=judge, with_prefix=True)
    assert any("PREFIX-SENTINEL" in b["messages"][0]["content"] and "CONTINUATION" in b["messages"][0]["content"]
               for b in srv.requests)


def test_relevance_json_per_candidate_with_failures_excluded(serve, cards):
    def resp(body, n):
        user = body["messages"][-1]["content"]
        if "Hot lava flows" in body["messages"][1]["content"]:
            return ServerReply('{"A": 5}')  # candidate B missing -> re-ask -> still missing
        return ServerReply('```json\n{"A": 1, "B": 4, "C": 2}\n```' if "PASSAGE" in user else '{"A": 1}')

    srv = serve(resp)
    res = score_relevance(["Fresh bread from the oven.", "Hot lava flows."], [cards, cards[2:] + cards[:1]],
                          judge=JudgeClient(model="m", base_url=srv.url))
    assert [r.score for r in res.records[0]] == [1.0, 4.0, 2.0]
    assert [r.meta["concept"] for r in res.records[0]] == ["road cycling", "bread baking", "volcanoes"]
    assert [r.score for r in res.records[1]] == [None, None]
    assert res.summary.n == 3 and res.summary.n_parse_failures == 2
    assert res.summary.mean == pytest.approx(7 / 3) and res.success_rate == pytest.approx(2 / 3)
    # the two passages go out concurrently, so find the first passage's request by its text
    bread = next(r for r in srv.requests if "Fresh bread" in r["messages"][1]["content"])
    assert "C. volcanoes: Volcanic eruptions" in bread["messages"][1]["content"]


def _autointerp_data(seed=0):
    rng = np.random.default_rng(seed)
    vocab = ["the", "cat", "dog", "sat", "on", "mat", "a", "ran"]
    ex = [[str(rng.choice(vocab)) for _ in range(8)] for _ in range(30)]
    cat = np.array([[1.0 if t == "cat" else 0.0 for t in e] for e in ex])
    noise = rng.random((30, 8))
    return ex, np.stack([cat * 3.0, noise])  # unit 0: fires on "cat"; unit 1: noise


def _simulator(body, n):
    """A competent explainer/simulator: names the most active token, predicts 10 on it."""
    text = body["messages"][-1]["content"]
    if "EXPLANATION" in body["messages"][0]["content"]:
        acts = {}
        for line in text.splitlines():
            if "\t" in line:
                tok, a = line.rsplit("\t", 1)
                acts[tok] = acts.get(tok, 0) + int(a)
        return ServerReply(f"EXPLANATION: the word {max(acts, key=acts.get)}")
    word = re.search(r"responds to: the word (\S+)", text).group(1)
    toks = [line.split("\t", 1)[1] for line in text.splitlines() if re.match(r"^\d+\t", line)]
    return ServerReply(json.dumps([10 if t == word else 0 for t in toks]))


def test_autointerp_explain_simulate_pearson(serve):
    ex, acts = _autointerp_data()
    srv = serve(_simulator)
    res = score_autointerp(ex, acts, judge=JudgeClient(model="m", base_url=srv.url, concurrency=8))
    assert res.explanations[0] == "the word cat"
    top = res.records["top_and_random"]
    assert top[0].score == pytest.approx(1.0)  # the explanation predicts unit 0 exactly
    assert abs(top[1].score) < 0.5  # noise is not explained
    ro = res.records["random_only"][0]
    if ro.score is None:  # random excerpts without a "cat": undefined, excluded, counted
        assert ro.status == "undefined" and res.n_undefined["random_only"] >= 1
    else:
        assert ro.score == pytest.approx(1.0)
    n_calls = srv.n_requests
    assert n_calls == 2 + 2 * 10  # 2 explanations; 5 top + 5 random simulations per unit (random shared)
    score_autointerp(ex, acts, judge=JudgeClient(model="m", base_url=srv.url))  # no cache path: new calls
    assert "top_and_random" in res.to_markdown()


def test_autointerp_sampling_keeps_explanation_and_scoring_sets_apart():
    from interpscale.judges.scorers import plan_feature
    import random

    acts = np.arange(40 * 4, dtype=float).reshape(40, 4)
    plan = plan_feature(acts, rng=random.Random(0))
    assert len(plan.explain) == len(plan.top) == len(plan.random) == 5
    assert not (set(plan.explain) & set(plan.top)) and not (set(plan.random) & (set(plan.explain) | set(plan.top)))
    assert set(plan.explain) | set(plan.top) == set(range(30, 40))  # the 10 most active excerpts
    with pytest.raises(ValueError, match="excerpts"):
        plan_feature(acts[:10], rng=random.Random(0))


def test_pearson_reference_and_undefined():
    x, y = [1.0, 2.0, 3.0, 4.0], [2.0, 1.0, 4.0, 3.0]
    assert pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1]) == pytest.approx(0.6)
    assert pearson([0, 0, 0], [1, 2, 3]) is None


def test_lexical_backend_is_default_and_labelled_everywhere(monkeypatch, cards):
    monkeypatch.delenv("INTERPSCALE_JUDGE_BASE_URL", raising=False)
    monkeypatch.delenv("INTERPSCALE_JUDGE_MODEL", raising=False)
    assert isinstance(build_judge(), LexicalJudge)
    res = score_alignment(cards, [["Ġpeloton", "Ġcyclist", "Ġbicycle", "Ġthe"], ["Ġcar", "Ġsky", "Ġmagma", "Ġrun"],
                                  ["Ġlava", "Ġvolcano", "Ġerupt", "Ġash"]])
    assert [r.score for r in res.records] == [5.0, 1.0, 5.0]
    assert all(r.status == "lexical" and r.backend == "lexical" for r in res.records)
    assert LEXICAL_LABEL in res.to_markdown() and res.to_dict()["backend"] == "lexical"
    rel = score_relevance(["Knead the dough, let the yeast work, then bake the bread in the oven."], [cards])
    assert [r.score for r in rel.records[0]] == [1.0, 4.0, 1.0] and LEXICAL_LABEL in rel.to_markdown()
    ex, acts = _autointerp_data()
    ai = score_autointerp(ex, acts)
    assert ai.records["top_and_random"][0].score == pytest.approx(1.0) and LEXICAL_LABEL in ai.to_markdown()
    with pytest.raises(ValueError, match="both base_url and model"):
        build_judge(base_url="http://127.0.0.1:1/v1")


def test_bad_inputs_name_the_problem(cards):
    with pytest.raises(ValueError, match="3 cards but 2"):
        score_alignment(cards, [["a"], ["b"]], judge=LexicalJudge())
    with pytest.raises(ValueError, match="no tokens"):
        score_alignment(cards[:1], [[]], judge=LexicalJudge())
    with pytest.raises(ValueError, match="label"):
        ConceptCard("", "d")
    with pytest.raises(ValueError, match="shape"):
        score_autointerp([["a"]] * 3, np.zeros((1, 2, 1)), judge=LexicalJudge())
    with pytest.raises(ValueError, match="needs a model"):
        JudgeClient(base_url="http://x/v1", model="")


def test_a_judge_kind_is_one_registry_entry_and_a_new_one_needs_nothing_else(tmp_path, monkeypatch):
    """Issue 34.4: template, reply parser, offline scorer and result type in one entry; a kind
    registered as a user would is served by the lexical backend and the template set."""
    from interpscale.judges import JUDGE_KINDS, JudgeKind, JudgeTask, PromptTemplate, register_judge_kind
    from interpscale.judges.parsing import parse_rating

    kind = JUDGE_KINDS.lookup("steer_concept")
    assert kind.template.name == "steer_concept" and kind.parser is parse_rating
    assert kind.result_type.__name__ == "SteeringResult"
    assert sorted(JUDGE_KINDS) == sorted(TemplateSet().templates)
    (tmp_path / "shout_plugin.py").write_text("def shout_task(data):\n    return 2 if data['text'].isupper() else 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the user's own module with the offline scorer
    tpl = PromptTemplate(name="shout", user="Is {text} shouting?", version="shout-v1", output="rating", lo=0, hi=2)
    register_judge_kind(JudgeKind(tpl, "shout_plugin:shout_task", "interpscale.judges.scorers:ScoreSummary"))
    try:
        rec = LexicalJudge(TemplateSet({**TemplateSet().templates, "shout": tpl})).run(
            [JudgeTask(tpl, {"text": "HEY"}, data={"text": "HEY"})])[0]
    finally:
        JUDGE_KINDS.pop("shout")
    assert rec.value == 2 and rec.status == "lexical"
    with pytest.raises(Exception, match="unknown judge kind 'shoutt'"):
        JUDGE_KINDS.lookup("shoutt")
