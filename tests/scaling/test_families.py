import json
import math

import numpy as np
import pandas as pd
import pytest

from interpscale.scaling import fit_families

FAMS = {"ar": (0.528, -0.060, "ar_ce"), "cdlm": (0.632, -0.053, "mdlm_elbo"),
        "ar+concept": (0.621, -0.070, "ar_ce"), "cdlm+concept": (0.503, -0.072, "mdlm_elbo")}


@pytest.fixture(scope="module")
def results(synth):
    """A results table in the results-table layout (docs/architecture.md): annealed rows from known laws plus
    pre-anneal rows (worse losses) and, for cdlm, a second estimator."""
    frames = []
    for k, (fam, (aP, aL, est)) in enumerate(FAMS.items()):
        df, _ = synth.isoflop_grid(aP, aL, seed=k, noise=0.002)
        rng = np.random.default_rng(k)
        df["flops"] = df["slice_flops"] * rng.uniform(0.9, 1.1, len(df))
        df = df.assign(family=fam, estimator=est, annealed=True, size="s", seq_len=64, step=100, loss_se=0.001,
                       run_id=[f"{fam}-{i}" for i in range(len(df))])
        if "concept" in fam:
            C = df["flops"].to_numpy()
            df["concept_loss"] = 0.001 + 3.0 * C**-0.2 + rng.normal(0, 2e-5, len(df))
            df["concept_independence"] = 1.0 + 1e5 * C**-0.25 + rng.normal(0, 0.02, len(df))
            df["concept_contribution"] = 0.93 - 2e3 * C**-0.2 + rng.normal(0, 0.005, len(df))
            df["known_concept_alignment"] = 4.2 - 1e4 * C**-0.2 + rng.normal(0, 0.03, len(df))
        pre = df.assign(annealed=False, loss=df["loss"] + 0.1)
        frames += [df, pre]
        if fam == "cdlm":
            frames.append(df.assign(estimator="per_block", loss=df["loss"] + 0.7))
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def fits(results):
    actual = {"cdlm+concept": {"concept_loss": 0.002, "concept_contribution": 0.876, "loss": 2.72}}
    return fit_families(results, annealed=True, n_boot=150, grid="coarse", target_compute=7.6e22, actual=actual)


def test_table6_layout_and_values(fits):
    t6 = fits.table6()
    assert list(t6.columns) == ["family"] + [f"{k}{s}" for k in ("alpha_P", "alpha_D", "alpha_L", "L_inf") for s in ("", "_lo", "_hi")]
    assert list(t6.family) == sorted(FAMS)
    for r in t6.itertuples():
        aP, aL, _ = FAMS[r.family]
        assert r.alpha_P == pytest.approx(aP, abs=0.03)
        assert r.alpha_L == pytest.approx(aL, abs=0.003)
        assert r.alpha_P_lo < r.alpha_P < r.alpha_P_hi
        assert math.isfinite(r.L_inf) and r.L_inf_lo <= r.L_inf <= r.L_inf_hi
        assert 0 < r.alpha_D < 1


def test_table7_layout_and_prediction(fits):
    t7 = fits.table7()
    assert list(t7.columns) == ["metric", "family", "beta", "e", "e_lo", "e_hi", "e_at_bound", "r2", "prediction",
                                "pred_lo", "pred_hi", "actual", "delta"]
    assert set(t7.family) == {"ar+concept", "cdlm+concept"} and len(t7) == 8
    row = t7[(t7.metric == "concept_contribution") & (t7.family == "cdlm+concept")].iloc[0]
    b = fits["cdlm+concept"].bounded["concept_contribution"]
    assert row.e == b.e <= 1.0 and row.beta == b.beta
    C = np.geomspace(1e19, 1e20, 5)  # inside the data the fitted curve matches the law
    np.testing.assert_allclose(b.predict(C), 0.93 - 2e3 * C**-0.2, atol=0.01)
    assert row.prediction == pytest.approx(float(b.predict(7.6e22)))
    assert row.pred_lo < row.prediction < row.pred_hi <= 1.0  # a prediction interval, inside the bound
    assert row.actual == 0.876 and row.delta == pytest.approx(0.876 - row.prediction)
    assert (t7.r2 > 0.5).all()


def test_markdown_json_and_extrapolation(fits):
    md = fits.to_markdown()
    assert "| Family | α_P | α_D | α_L | L_∞ |" in md and "| cdlm+concept |" in md
    assert "Concept Contribution" in md and "_[" in md
    d = json.loads(fits.to_json())
    assert d["table6"][0]["family"] == "ar" and len(d["table7"]) == 8
    assert set(d["families"]) == set(FAMS)
    ext = fits["cdlm+concept"].extrapolation
    assert ext.observed == 2.72 and ext.joint_error == pytest.approx(2.72 - ext.joint)
    assert ext.joint_ci[0] <= ext.joint <= ext.joint_ci[1]
    assert "extrapolation" in fits.summary()


def test_mixed_rows_fall_back_with_warning(results):
    fits = fit_families(results[results.family.isin(["cdlm"])], n_boot=0, grid="coarse")
    assert fits["cdlm"].estimator == "mdlm_elbo"
    assert any("annealed" in w for w in fits.warnings) and any("estimator" in w for w in fits.warnings)
    explicit = fit_families(results, families=["cdlm"], estimator="per_block", annealed=True, n_boot=0, grid="coarse")
    assert explicit["cdlm"].isoflop.alpha_L != pytest.approx(fits["cdlm"].isoflop.alpha_L, abs=1e-3)


def test_bad_tables(results):
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['tokens'\]"):
        fit_families(results.drop(columns="tokens"))
    with pytest.raises(ValueError, match="--estimator nope: no rows with estimator = nope"):
        fit_families(results, estimator="nope")
    with pytest.raises(ValueError, match="not in the table"):
        fit_families(results, families=["gpt"])


def test_pair_comparison(fits):
    cmp = fits.compare("ar", "ar+concept")
    assert list(cmp.param) == ["alpha_P", "alpha_D", "alpha_L", "L_inf"]
    r = cmp.set_index("param").loc["alpha_L"]
    assert r["shift"] == pytest.approx(-0.070 - -0.060, abs=0.004)
    assert r.shift_lo < r["shift"] < r.shift_hi and r.shift_hi < 0  # steeper with the concept module
    with pytest.raises(ValueError, match="unknown family"):
        fits.compare("ar", "gpt")


def test_paper_cell_format():
    from interpscale.scaling._base import fmt_sub

    assert fmt_sub(0.528, (0.503, 0.551)) == "0.528_[-0.025,+0.023]"  # Table 6, AR alpha_P
    assert fmt_sub(0.0, (0.0, 0.002)) == "0.000_[-0.000,+0.002]"  # Table 7, e on its bound


def test_slice_tolerance_and_partial_failures(synth):
    df, _ = synth.isoflop_grid(0.55, -0.06, seed=2, noise=0.002)
    df = df.assign(family="ar", annealed=True, estimator="ar_ce")
    # an intermediate checkpoint at 60% of its slice target must not enter the parabolas
    stray = df.iloc[[10]].assign(flops=df.iloc[10].slice_flops * 0.6, tokens=df.iloc[10].tokens * 0.6, loss=9.0)
    one_slice, _ = synth.isoflop_grid(0.6, -0.05, seed=3, slices=(1e19,))
    one_slice = one_slice.assign(family="tiny", annealed=True, estimator="ar_ce")
    fits = fit_families(pd.concat([df, stray, one_slice], ignore_index=True), n_boot=0, grid="coarse")
    clean = fit_families(df, n_boot=0, grid="coarse")
    assert fits["ar"].isoflop.alpha_P == pytest.approx(clean["ar"].isoflop.alpha_P)
    assert fits["ar"].chinchilla.n == len(df) + 1  # the joint fit uses every checkpoint
    assert fits["tiny"].isoflop is None and any("single slice" in w for w in fits["tiny"].warnings)
    t6 = fits.table6().set_index("family")
    assert math.isnan(t6.loc["tiny", "alpha_P"]) and "| tiny | — |" in fits.to_markdown()


def test_approaches_dropped_and_options(fits, results, synth):
    cmp = fits.approaches()
    assert set(cmp) == set(FAMS)
    # the rows carry flops = k P D with k = 6 x uniform(0.9, 1.1): k is read off the data
    assert all(5.0 < c.flops_per_token_per_param < 7.0 for c in cmp.values())
    md = fits.to_markdown()
    assert "Approach 2 (IsoFLOP) vs Approach 3 (joint)" in md and fits.to_dict()["approaches"]
    assert fits.dropped == {} and "could not be made" not in md
    # cluster bootstrap by run and joint-fit options reach the fitters
    sub = results[(results.family == "ar") & results.annealed]
    f = fit_families(sub, n_boot=50, grid="coarse", groups=sub["run_id"], joint_options={"bound_L_inf": True})
    assert f["ar"].isoflop.bootstrap == "cluster" and f["ar"].chinchilla.bootstrap == "cluster"
    assert f["ar"].chinchilla.L_inf_bounded and f["ar"].chinchilla.L_inf <= sub["loss"].min() + 1e-9
    with pytest.raises(ValueError, match="labels for"):
        fit_families(sub, n_boot=0, groups=sub["run_id"].iloc[:-1])


def test_flagged_isoflop_intervals_are_marked(synth):
    df, _ = synth.isoflop_grid(0.528, -0.060, seed=5, noise=0.02)
    df = df.assign(family="noisy", run_id=np.arange(len(df)) // 2)
    f = fit_families(df, n_boot=100, grid="coarse", groups=df["run_id"])
    iso = f["noisy"].isoflop
    assert iso.flagged and iso.degenerate_fraction > 0.1
    assert "†" in f.to_markdown() and "more than 10%" in f.to_markdown()


def test_equal_metric_values_of_different_checkpoints_are_two_points(results):
    """A coarse metric can repeat its value at one compute in two runs (a reservoir's branches of one size
    in slices a factor 2 apart end at the same compute): two points, not a duplicate row; one checkpoint
    twice (same run_id and step) is one measurement: merged, its values averaged, said (issue 42)."""
    df = results[results["family"] == "ar+concept"]
    row = df[df["annealed"]].iloc[[0]]
    moved = {c: row[c] * 1.01 for c in ("loss", "concept_loss", "concept_independence", "concept_contribution")}
    fits = fit_families(pd.concat([df, row.assign(run_id="twin", **moved)], ignore_index=True),
                        annealed=True, n_boot=0, grid="coarse")
    assert "known_concept_alignment" in fits["ar+concept"].bounded
    again = fit_families(pd.concat([df, row.assign(**moved)], ignore_index=True), annealed=True, n_boot=0,
                         grid="coarse")
    assert "known_concept_alignment" in again["ar+concept"].bounded
    assert any("1 row(s) repeat another row's run and step" in w and "1 with differing values averaged" in w
               for w in again.warnings)
