"""The compute multiplier k(C) = C_variant(L*_base(C)) / C (scaling.multiplier, issue 36): synthetic
ground truth (planted constant and growing multipliers), the algebra of Eq. 26 envelopes against the
paper's published Table 6 exponents, the F test against statsmodels, pairing by slice, the CLI."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interpscale import paper
from interpscale.scaling.multiplier import (DEMO_SLICES, _log_k_isoflop, fit_multiplier, growth_test,
                                            planted_multiplier, simulate_pair)

MID = DEMO_SLICES[len(DEMO_SLICES) // 2]


@pytest.fixture(autouse=True)
def _quiet_fits(caplog):
    caplog.set_level(logging.ERROR, logger="interpscale.scaling")


def _isoflop(df, **kw):
    return fit_multiplier(df, "base", "variant", methods=("isoflop",), n_boot=kw.pop("n_boot", 400), **kw)


def test_noise_free_sweep_recovers_the_planted_multiplier():
    for growth in (0.0, 0.05):
        m = _isoflop(simulate_pair(growth=growth, noise=0.0, seed=1), n_boot=50)
        for C in DEMO_SLICES[:-1]:
            assert m.at(C)["k"] == pytest.approx(planted_multiplier(C, 1.3, growth), rel=0.01)
        # k ~ C^(g / (1 - g)) exactly when L* is a power law (SIM_LAW has L_inf = 0)
        assert m.test.slope == pytest.approx(growth / (1 - growth), abs=0.004)


def test_planted_multipliers_coverage_and_growth_verdicts():
    """A few seeds of the acceptance table (docs/multiplier.md has 50 per case): the 90% band covers
    the planted k at the middle budget, the growth test finds C^0.05 and rarely calls 1.3x growing."""
    seeds = range(12)
    cover, growing = {}, {}
    for g in (0.0, 0.05):
        fits = [_isoflop(simulate_pair(growth=g, seed=s)) for s in seeds]
        k = float(planted_multiplier(MID, 1.3, g))
        cover[g] = np.mean([f.at(MID)["lo"] <= k <= f.at(MID)["hi"] for f in fits])
        growing[g] = np.mean([f.verdict == "growing" for f in fits])
    assert cover[0.0] >= 10 / 12 and cover[0.05] >= 10 / 12
    assert growing[0.05] >= 10 / 12
    assert growing[0.0] <= 2 / 12


def test_the_joint_method_recovers_a_constant_multiplier_and_extrapolates_it():
    # Eq. 27 with an irreducible loss: the variant at (P, D) is the base at (P, D) / sqrt(1.3), so its
    # frontier is the base's at C / 1.3 at every compute, inside the sweep and at 7.6e22
    df = simulate_pair(noise=0.001, seed=2, law=dict(L_inf=1.5))
    m = fit_multiplier(df, "base", "variant", methods=("joint",), n_boot=100, target_compute=(1e20, 7.6e22))
    assert m.primary == "joint"
    mid, far = m.at(MID), m.at(7.6e22)
    assert mid["k"] == pytest.approx(1.3, rel=0.02) and mid["lo"] <= 1.3 <= mid["hi"] < 1.4
    # far out L* nears L_inf and k hangs on the two fits' L_inf: the band is honest, not tight
    assert far["lo"] <= 1.3 <= far["hi"] and far["hi"] / far["lo"] > 10
    assert far["extrapolated"] and not mid["extrapolated"]
    assert m.test.verdict in ("constant", "undetermined") and m.test.slope_lo <= 0 <= m.test.slope_hi


def test_table6_exponents_give_the_papers_implied_growth_slope():
    """Eq. 26 envelopes with the paper's Table 6 exponents (alpha_L: ar -0.060, ar+concept -0.070;
    cdlm -0.053, cdlm+concept -0.072): ln k is linear in ln C with slope alpha_b / alpha_v - 1."""
    lc = np.log([1e18, 1e20, 7.6e22])
    for base, variant, slope in (("ar", "ar+concept", -0.060 / -0.070 - 1), ("cdlm", "cdlm+concept", -0.053 / -0.072 - 1)):
        ab, av = paper.TABLE6[base]["alpha_L"], paper.TABLE6[variant]["alpha_L"]
        lk = _log_k_isoflop(np.array([[1.0, ab]]), np.array([[1.05, av]]), lc)[0]
        assert np.diff(lk) / np.diff(lc) == pytest.approx([slope, slope], rel=1e-9)
    assert -0.060 / -0.070 - 1 == pytest.approx(-0.142857, rel=1e-5)


@settings(max_examples=60, deadline=None)
@given(a_b=st.floats(-0.3, -0.01), a_v=st.floats(-0.3, -0.01), c_b=st.floats(-1, 1), c_v=st.floats(-1, 1),
       lc=st.floats(10, 60))
def test_swapping_base_and_variant_inverts_the_multiplier(a_b, a_v, c_b, c_v, lc):
    # if the variant needs k C to reach L*_base(C), the base needs C / (k C) of the variant's compute
    # k C to reach L*_variant(k C): k_swap(k C) = 1 / k(C)
    b, v = np.array([[c_b, a_b]]), np.array([[c_v, a_v]])
    lk = _log_k_isoflop(b, v, np.array([lc]))[0, 0]
    back = _log_k_isoflop(v, b, np.array([lc + lk]))[0, 0]
    assert back == pytest.approx(-lk, abs=1e-9 * max(1.0, abs(lk)))


def test_a_shock_shared_by_a_slice_cancels_in_the_paired_bootstrap():
    """Both families' losses at a slice share one large shock (e.g. that slice's evaluation batch):
    pairing by slice keeps it out of k's bootstrap; slices that differ between the families cannot be paired.
    The reported band also carries the model error against the law-free k, which the shock moves (the variant's
    minima are read between slices with different shocks): the bootstrap's part is each side's half-width with
    that taken out in quadrature (``multiplier_lawfree.widen``)."""
    df = simulate_pair(noise=0.0, seed=4)
    shock = dict(zip(DEMO_SLICES, np.random.default_rng(0).normal(0, 0.02, len(DEMO_SLICES))))
    df["loss"] *= np.exp(df["slice_flops"].map(shock))
    moved = df.copy()
    moved.loc[moved.family == "variant", "slice_flops"] *= 1.01  # same runs, slices no longer shared
    moved.loc[moved.family == "variant", "flops"] *= 1.01
    widths = {}
    for how, table in (("paired", df), ("unpaired", moved)):
        m = _isoflop(table)
        r, zt = m.at(MID), 1.6448536 * m.model_error["isoflop"]
        lk, lo, hi = (math.log(r[c]) for c in ("k", "lo", "hi"))
        widths[how] = math.log(r["hi"] / r["lo"])
        widths[how + " bootstrap"] = math.sqrt((lk - lo) ** 2 - zt**2) + math.sqrt((hi - lk) ** 2 - zt**2)
    assert widths["paired bootstrap"] < 0.25 * widths["unpaired bootstrap"]
    assert widths["paired"] < widths["unpaired"]


def test_shared_exponent_f_test_matches_statsmodels():
    sm = pytest.importorskip("statsmodels.api")
    df = simulate_pair(growth=0.05, seed=5, noise=0.003)
    m = _isoflop(df, n_boot=50)
    t = m.shared_exponent
    rows = []
    for fam in ("base", "variant"):
        s = df[df.family == fam]
        from interpscale.scaling import fit_isoflop

        sl = fit_isoflop(s, n_boot=0).slices
        rows += [dict(g=float(fam == "variant"), x=math.log(c), y=math.log(L)) for c, L in zip(sl.compute, sl.L_star)]
    d = pd.DataFrame(rows)
    X0 = np.column_stack([1 - d.g, d.g, d.x])
    X1 = np.column_stack([1 - d.g, d.g, d.x * (1 - d.g), d.x * d.g])
    full, restricted = sm.OLS(d.y, X1).fit(), sm.OLS(d.y, X0).fit()
    F, p, df_diff = full.compare_f_test(restricted)
    assert (t.statistic, t.p_value) == pytest.approx((F, p), rel=1e-8)
    assert t.df == (int(df_diff), int(full.df_resid))


def test_growth_test_verdicts_and_p_value():
    rng = np.random.default_rng(0)
    assert growth_test("x", 0.05, rng.normal(0.05, 0.01, 2000), 0.9, 0.1, "").verdict == "growing"
    assert growth_test("x", -0.05, rng.normal(-0.05, 0.01, 2000), 0.9, 0.1, "").verdict == "shrinking"
    const = growth_test("x", 0.0, rng.normal(0.0, 0.01, 2000), 0.9, 0.1, "")
    assert const.verdict == "constant" and const.p_value > 0.5
    assert growth_test("x", 0.0, rng.normal(0.0, 0.2, 2000), 0.9, 0.1, "").verdict == "undetermined"
    assert growth_test("x", 0.0, np.full(5, np.nan), 0.9, 0.1, "").verdict == "undetermined"
    t = growth_test("x", 0.02, rng.normal(0.02, 0.01, 4000), 0.9, 0.1, "")
    assert (t.p_value < 0.1) == (t.slope_lo > 0)  # the interval excludes 0 exactly when p < 1 - level


def test_fit_multiplier_refuses_bad_input():
    df = simulate_pair(seed=0)
    with pytest.raises(ValueError, match="family 'gpt' not in the table"):
        fit_multiplier(df, "base", "gpt")
    with pytest.raises(ValueError, match="same family"):
        fit_multiplier(df, "base", "base")
    with pytest.raises(ValueError, match="methods must be among"):
        fit_multiplier(df, "base", "variant", methods=("magic",))
    few = df[df.slice_flops <= DEMO_SLICES[1]]
    with pytest.raises(ValueError, match="no method could compare"):
        fit_multiplier(few, "base", "variant", methods=("isoflop",))


def test_cli_writes_multiplier_csv_and_json(tmp_path, capsys):
    from interpscale.cli import main

    path = tmp_path / "results.csv"
    simulate_pair(seed=7).to_csv(path, index=False)
    out = tmp_path / "mult"
    rc = main(["fit", "multiplier", str(path), "--base", "base", "--variant", "variant", "--target-compute", "1e20",
               "7.6e22", "--methods", "isoflop", "--n-boot", "200", "--out", str(out)])
    assert rc == 0
    table = pd.read_csv(out / "multiplier.csv")
    assert list(table.columns) == ["compute", "k", "lo", "hi", "method", "extrapolated"]
    assert set(table.compute) >= {1e20, 7.6e22} and table.extrapolated[table.compute == 7.6e22].all()
    assert ((table.lo <= table.k) & (table.k <= table.hi)).all()
    doc = json.loads((out / "multiplier.json").read_text())
    assert {"slope", "slope_lo", "slope_hi", "p_value", "verdict", "level", "method"} <= set(doc)
    assert doc["verdict"] in ("constant", "growing", "shrinking", "undetermined")
    assert "compute multiplier k(C) of variant against base" in capsys.readouterr().out
    rc = main(["fit", "multiplier", str(path), "--base", "base", "--variant", "nope", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "--variant 'nope' is not a family of the table" in err and "Traceback" not in err


def test_fit_families_writes_the_multiplier_of_each_concept_pair(tmp_path, capsys):
    from interpscale.cli import main
    from interpscale.scaling.multiplier import backbone_pairs

    assert backbone_pairs(["ar", "ar+concept", "cdlm+concept", "crate"]) == [("ar", "ar+concept")]
    path = tmp_path / "results.csv"
    simulate_pair(seed=3, names=("ar", "ar+concept")).to_csv(path, index=False)
    assert main(["fit", "families", str(path), "--out", str(tmp_path), "--n-boot", "20", "--grid", "coarse"]) == 0
    table = pd.read_csv(tmp_path / "multiplier.csv")
    assert set(zip(table.base, table.variant)) == {("ar", "ar+concept")}
    assert {"constant", "growing", "shrinking", "undetermined"} >= {
        json.loads((tmp_path / "multiplier.json").read_text())["ar+concept vs ar"]["verdict"]}


def test_report_section_and_figure_state_k_for_each_pair():
    from interpscale.analysis.figures.multiplier import multiplier_figure
    from interpscale.analysis.report import multiplier_section

    df = pd.concat([simulate_pair(seed=1, names=("ar", "ar+concept")),
                    simulate_pair(seed=2, growth=0.05, names=("cdlm", "cdlm+concept"))], ignore_index=True)
    md = "\n".join(multiplier_section(df))
    for pair in ("**ar+concept vs ar**", "**cdlm+concept vs cdlm**"):
        assert pair in md
    assert "| 7.6e+22 | yes |" in md and "Growth test (isoflop, the verdict)" in md
    assert "**growing**" in md.split("**cdlm+concept vs cdlm**")[1]  # the planted C^0.05
    fig = multiplier_figure(df)
    assert len(fig.axes) == 2
    assert multiplier_section(df[df.family.isin(["ar", "cdlm"])]) == []


def test_a_flagged_joint_fit_gives_no_verdict():
    # L_inf = 0: the joint fits' L_inf collapses (flagged), so the joint growth test says nothing
    m = fit_multiplier(simulate_pair(growth=0.05, seed=1), "base", "variant", methods=("joint",), n_boot=50)
    assert not m.statuses["joint"].identified and m.verdict == "undetermined"
    assert m.status.state == "flagged"
