"""The compute multiplier on a public multi-corpus sweep (issue 42): Gadre et al. 2024's over-training grid
(tests/data/scaling_public/overtraining_gadre2024), three pretraining corpora trained on the same shapes and
token counts, C4 validation loss. The grid has shapes x tokens-per-parameter rather than IsoFLOP slices; the
slices are read off it without a law: each of the three shapes that span 5.2e18-2.3e19 FLOPs has its loss
interpolated linearly in (ln C, ln L) along its own token axis at six budgets (3 sizes per slice).

Reference k(C) for each ordered pair: the authors' per-corpus fits (their recipe, PROVENANCE.md) inverted at
each budget. Measured with 1,000 replicates (docs/multiplier.md, `public_table()`): the verdict agrees with the
class of the slope those fits imply in 3 of the 6 pairs, is undetermined in 2 and wrong in 1 (rpj -> rw: the
slice minima read off the grid shrink, the fits are flat); the 90% bands cover the law-free k in 16 of 20 cells.
The issue's acceptance (every pair, >= 85% of cells) is not met on this grid; the test below holds the two pairs
whose slices are decided (c4 <-> rpj) at 200 replicates."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import brentq, curve_fit, minimize_scalar

from interpscale.scaling.multiplier import fit_multiplier

DATA = Path(__file__).resolve().parents[1] / "data" / "scaling_public" / "overtraining_gadre2024" / "gadre_runs.csv"
SMALL = ["d=96_l=8_h=4", "d=512_l=8_h=4", "d=576_l=24_h=8", "d=1024_l=24_h=8"]
BUDGETS = np.geomspace(5.2e18, 2.3e19, 6)  # where three of the four small shapes overlap in compute
FLAT = 0.025  # |slope of ln k on ln C| at most this: the reference calls k constant


@pytest.fixture(autouse=True)
def _quiet_fits(caplog):
    caplog.set_level(logging.ERROR, logger="interpscale.scaling")


def runs() -> pd.DataFrame:
    return pd.read_csv(DATA)


def slices_table(d: pd.DataFrame, budgets=BUDGETS) -> pd.DataFrame:
    """IsoFLOP slices read off the grid: each small shape's ln L interpolated in ln C at each budget its
    token range spans (no law: straight lines between its measured token counts)."""
    rows = []
    for (ds, model), g in d[d["model"].isin(SMALL)].groupby(["dataset", "model"]):
        g = g.sort_values("flops")
        lc, ll, N = np.log(g["flops"].to_numpy(float)), np.log(g["loss_c4_val"].to_numpy(float)), float(g["N"].iloc[0])
        for C in budgets:
            if lc[0] - 1e-9 <= np.log(C) <= lc[-1] + 1e-9:
                rows.append(dict(run_id=f"{ds}-{model}-{C:.3g}", family=ds, slice_flops=C, flops=C, params=N,
                                 tokens=C / (6 * N), loss=float(np.exp(np.interp(np.log(C), lc, ll)))))
    return pd.DataFrame(rows)


def _law(x, a, c, b, E):
    N, M = x
    return a * np.power(N, b) + c * np.power(6, b / 2) * np.power(M * N, b) + E


def authors_fit(sub: pd.DataFrame) -> np.ndarray:
    """(a, c, b, E) of L(N, M) = E + a N^b + c 6^(b/2) (M N)^b by the authors' recipe (PROVENANCE.md):
    the four small shapes at M = 20 and the smallest at M = 320, their start grid, the lowest residual scale."""
    pts = sub[(sub["model"].isin(SMALL) & (sub["M"] == 20)) | ((sub["model"] == SMALL[0]) & (sub["M"] == 320))]
    x, y = np.array([pts["N"].to_numpy(float), pts["M"].to_numpy(float)]), pts["loss_c4_val"].to_numpy(float)
    best, out = np.inf, None
    for p0 in itertools.product([1e2, 3e2, 1e3, 3e3], [1e2, 3e2, 1e3, 3e3], [-0.1, -0.3], [0.0, 1.0, 2.0, 10.0]):
        try:
            p, _ = curve_fit(_law, x, y, p0=list(p0), maxfev=10000)
        except RuntimeError:
            continue
        s = float(np.sqrt(np.sum((y - _law(x, *p)) ** 2) / (y.size - 2)))
        if s < best:
            best, out = s, p
    return out


def _optimal_loss(p, C: float) -> float:
    a, c, b, E = p  # D = C / (6 N); c 6^(b/2) D^b
    f = lambda ln_n: E + a * np.exp(b * ln_n) + c * 6 ** (b / 2) * (C / (6 * np.exp(ln_n))) ** b  # noqa: E731
    return float(minimize_scalar(f, bounds=(np.log(1e5), np.log(C) / 2 + 5), method="bounded").fun)


def reference_k(pb, pv, C: float) -> float:
    """k(C) of the authors' fits: the variant's compute-optimal loss equal to the base's at C."""
    target = _optimal_loss(pb, C)
    return float(np.exp(brentq(lambda lc: _optimal_loss(pv, np.exp(lc)) - target, np.log(C) - 20, np.log(C) + 20)) / C)


def reference_class(slope: float) -> str:
    return "constant" if abs(slope) <= FLAT else "growing" if slope > 0 else "shrinking"


def public_table(n_boot: int = 1000, pairs=None) -> pd.DataFrame:
    """One row per ordered pair: the reference slope and class, the verdict, which method answered, and the
    in-sweep cells (base slices with a law-free reading) covered by the primary's band."""
    d = runs()
    fits = {ds: authors_fit(s) for ds, s in d.groupby("dataset")}
    table = slices_table(d)
    out = []
    for base, variant in pairs or itertools.permutations(sorted(fits), 2):
        ref = np.array([reference_k(fits[base], fits[variant], C) for C in BUDGETS])
        slope = float(np.polyfit(np.log(BUDGETS), np.log(ref), 1)[0])
        m = fit_multiplier(table, base, variant, n_boot=n_boot, target_compute=None)
        lf = m.table[m.table["method"] == "lawfree"].set_index("compute")["k"]
        prim = m.table[m.table["method"] == m.primary].set_index("compute")
        cells = prim.loc[lf.index]
        covered = int(((cells["lo"] <= lf) & (lf <= cells["hi"])).sum())
        err_lf = np.interp(np.log(lf.index), np.log(BUDGETS), np.log(ref)) - np.log(lf.to_numpy())
        out.append(dict(base=base, variant=variant, ref_slope=slope, ref_class=reference_class(slope),
                        verdict=m.verdict, primary=m.primary, slope=m.test.slope, slope_lo=m.test.slope_lo,
                        slope_hi=m.test.slope_hi, k_mid=float(prim["k"].iloc[len(prim) // 2]),
                        ref_k_mid=float(ref[len(ref) // 2]), lawfree_vs_ref=float(np.median(np.abs(np.expm1(err_lf)))),
                        cells=len(lf), covered=covered, reason=m.reason))
    return pd.DataFrame(out)


def test_authors_fits_reproduce_their_published_prediction_errors():
    # PROVENANCE.md: RedPajama, C4-eval loss, 1.4B at M = 640 and 6.9B at M = 20: 0.7103% and 0.7320%
    d = runs()
    rpj = d[d["dataset"] == "rpj"]
    p = authors_fit(rpj)
    for model, M, err in (("open_lm_1b", 640, 0.7103), ("open_lm_7b", 20, 0.7320)):
        r = rpj[(rpj["model"] == model) & (rpj["M"] == M)].iloc[0]
        pred = _law(np.array([r["N"], r["M"]]), *p)
        assert 100 * abs(pred - r["loss_c4_val"]) / r["loss_c4_val"] == pytest.approx(err, abs=0.01)


def test_slices_read_off_the_grid_have_three_sizes_each():
    t = slices_table(runs())
    assert set(t.groupby(["family", "slice_flops"]).size()) == {3}
    assert t["slice_flops"].nunique() == len(BUDGETS)


def test_verdicts_agree_with_the_authors_fits_where_the_slices_decide():
    t = public_table(n_boot=200, pairs=[("c4_original", "rpj"), ("rpj", "c4_original")])
    assert list(t["ref_class"]) == ["growing", "shrinking"]
    assert (t["verdict"] == t["ref_class"]).all(), t[["base", "variant", "ref_slope", "verdict", "reason"]]
    assert (t["primary"] == "isoflop").all() and t["covered"].sum() >= 2
