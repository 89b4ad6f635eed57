"""Assumption-light checks, Phase 1 agreement (ICC on wine), coherence dependence, simulator, power."""

import numpy as np
import pandas as pd
import pytest

from interpscale.analysis.human_study import (
    coherence_dependence, icc1, paired_comparison, phase1_agreement, power_analysis, simulate_study,
    type_summary,
)


def test_icc1_wine_matches_reference(wine):
    assert icc1(wine, target="bottle", value="response") == pytest.approx(0.442, abs=5e-4)


def test_icc1_analytic_cases():
    same = pd.DataFrame({"t": list("aabbcc"), "y": [1, 1, 3, 3, 5, 5]})
    assert icc1(same, target="t", value="y") == pytest.approx(1.0)
    none = pd.DataFrame({"t": list("aabb"), "y": [1, 3, 1, 3]})  # no between-target variance
    assert icc1(none, target="t", value="y") < 0


def test_paired_comparison_hand_computed_and_bootstrap():
    df = pd.DataFrame({
        "context": ["x"] * 3 + ["y"] * 3, "concept": ["c1"] * 3 + ["c2"] * 3,
        "candidate_type": ["llm", "human", "human"] * 2, "rating": [4, 3, 4, 2, 5, 1],
    })
    # context x: 4>3 (1), 4=4 (.5); context y: 2<5 (0), 2>1 (1) -> 2.5 / 4
    res = paired_comparison(df, "llm", "human", n_boot=200, seed=0)
    assert res.prob == pytest.approx(0.625) and res.n_pairs == 4 and res.n_clusters == 2
    assert res.ci[0] <= 0.625 <= res.ci[1]
    with pytest.raises(ValueError, match="'filler' not in ratings"):
        paired_comparison(df, "filler", "human")


def test_simulator_reproduces_paper_design_and_table4():
    s = simulate_study(seed=0)
    r = s.ratings
    assert len(r) == 1025 and r["context"].nunique() == 205 and r["concept"].nunique() == 34
    assert r["rater"].nunique() == 8 and (r.groupby("context").size() == 5).all()
    full = r.groupby("concept")["rater"].nunique()
    assert (full == 8).sum() >= 20
    assert len(s.phase1) == 303 and s.phase1["annotator"].nunique() == 9
    assert s.phase1.groupby("concept").size().median() == 3
    assert s.phase1["stratum"].nunique() == 10
    # no rater scores a human label they wrote in Phase 1
    own = r[r["candidate_type"] == "human"].apply(lambda x: x["label"].endswith(f":{x['rater']}"), axis=1)
    assert not own.any()
    pooled = pd.concat([simulate_study(seed=k).ratings for k in range(8)])
    means = pooled.groupby("candidate_type")["rating"].mean()
    for t, v in {"llm": 3.98, "human": 3.50, "embedding": 2.72, "taxonomy": 2.08}.items():  # Table 4
        assert means[t] == pytest.approx(v, abs=0.3)
    assert simulate_study(seed=3).ratings.equals(simulate_study(seed=3).ratings)


def test_type_summary_table4_columns_and_cis(small_study):
    t = type_summary(small_study.ratings)
    assert list(t.index[:2]) == ["llm", "human"]
    many = t[t["n"] > 1]
    assert ((many["ci_lo"] <= many["mean"]) & (many["mean"] <= many["ci_hi"])).all()
    assert (many.loc[["llm", "human"], "ci_hi"] - many.loc[["llm", "human"], "ci_lo"] > 0.05).all()
    assert t["n"].sum() == len(small_study.ratings)
    c = type_summary(small_study.ratings, ci="cluster", n_boot=300)
    assert np.allclose(c["mean"], t["mean"]) and (c["top_two_lo"] <= c["top_two"]).all()
    top = small_study.ratings.groupby("candidate_type")["rating"].apply(lambda x: (x >= 4).mean())
    assert np.allclose(t["top_two"], top[t.index])


def test_phase1_agreement_close_to_appendix_d2():
    stats = phase1_agreement(simulate_study(seed=0).phase1)
    assert stats["n_responses"] == 303
    assert stats["mean_coherence"] == pytest.approx(3.52, abs=0.15)
    assert stats["share_coherent"] + stats["share_borderline"] + stats["share_incoherent"] == pytest.approx(1)
    assert stats["icc1"] == pytest.approx(0.43, abs=0.12)
    assert stats["within_concept_sd"] < stats["total_sd"]
    assert 0 < stats["unanimity"] < 1


def test_coherence_dependence_positive_link():
    s = simulate_study(seed=1, coherence_link=1.0, sd={"concept": 1.5}, gap_slope=0.4)
    out = coherence_dependence(s.ratings, s.phase1)
    assert out["correlation"]["human"] > 0.1 and out["correlation"]["llm"] > 0.1
    bins = {b["bin"]: b for b in out["bins"]}
    assert bins["high"]["mean_human"] > bins["low"]["mean_human"]
    assert out["n_unmatched"] == 0
    assert sum(b["n_concepts"] for b in out["bins"]) == 34


def test_power_increases_with_concepts():
    res = power_analysis(n_concepts=(2, 20), n_sims=12, seed=0)
    p = res.table.set_index("n_concepts")["power"]
    assert p[20] >= 0.9 and p[2] < p[20]  # App. D.6: > 0.99 at ~20 fully rated concepts
    assert res.table.set_index("n_concepts")["n_ratings"][20] == 20 * 8 * 5
    gm = power_analysis(n_concepts=(6,), n_sims=2, method="gaussian_mixed", seed=2)
    assert gm.table["n_sims"].iloc[0] == 2 and np.isfinite(gm.table["mean_estimate"].iloc[0])
    with pytest.raises(ValueError, match="method must be"):
        power_analysis(method="magic")
