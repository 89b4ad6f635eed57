"""The compute multiplier on a public IsoFLOP sweep (issue 42): Porian et al. 2024
(tests/data/scaling_public/isoflop_porian2024), four training settings (the paper's Figure 1 steps: `last-layer`,
`warmup`, `cosine`, `tuned`) on each of two corpora (RefinedWeb, OpenWebText2), the same 16 shapes and twelve
budgets 1.25e16-2.56e19 FLOPs, 5-16 sizes per slice, validation loss. Pairs: the 12 ordered pairs of settings
within each corpus (one evaluation set per pair).

Reference k(C): the authors' per-family laws L*(C) = E + A C^-alpha (their `fit_loss_with_saturation`, which
`authors_recipe` reproduces) inverted at each base budget; its slope class `constant` when |slope of ln k on ln C|
<= 0.025. Two readings (docs/multiplier.md, "A public IsoFLOP sweep"):

- `window`: the sweep cut to the authors' fit range (1e16 < C < 5e17, 6 budgets) and their printed laws;
- `full`: all twelve budgets and their recipe refitted to all twelve slice minima.

The tests hold the numbers measured on RefinedWeb at 200 replicates (the table in the docs: both corpora at
1,000 replicates)."""

from __future__ import annotations

import itertools
import logging
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import curve_fit

from interpscale.scaling.multiplier import fit_multiplier

DATA = Path(__file__).resolve().parents[1] / "data" / "scaling_public" / "isoflop_porian2024"
WINDOW = (1e16, 5e17)  # the authors' fit range (analysis.fit_loss_with_saturation's fit_min_flop, fit_max_flop)
FULL = (1e16, 3e19)
FLAT = 0.025  # |slope of ln k on ln C| at most this: the reference calls k constant (as in issue 42)


@pytest.fixture(autouse=True)
def _quiet_fits(caplog):
    caplog.set_level(logging.ERROR, logger="interpscale.scaling")


def slices() -> pd.DataFrame:
    t = pd.read_csv(DATA / "porian_isoflop_slices.csv")
    t["flops"] = t["slice_flops"]
    t["run_id"] = [f"{f}-{c:.3g}-{p:.0f}" for f, c, p in zip(t["family"], t["slice_flops"], t["params"])]
    return t


def _log_law(F, a, e, alpha):
    return np.logaddexp(a - alpha * np.log(F), e)  # ln(E + A C^-alpha), a = ln A, e = ln E


def authors_recipe(F: np.ndarray, L: np.ndarray) -> dict:
    """(A, E, alpha) by the authors' recipe (PROVENANCE.md): ln L* fitted from 120 starts, the fit with the
    lowest Huber loss (delta 1e-3) of the log residuals kept."""
    best, out = np.inf, None
    for alpha, e, a in itertools.product(np.arange(0, 0.4, 0.1), np.arange(-1, 1.5, 0.5), np.arange(0, 30, 5)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                p, _ = curve_fit(_log_law, F, np.log(L), p0=[a, e, alpha], method="trf", ftol=1e-6, xtol=1e-6,
                                 max_nfev=100)
        except RuntimeError:
            continue
        d = np.abs(np.log(L) - _log_law(F, *p))
        huber = float(np.sum(np.where(d <= 1e-3, 0.5 * d**2, 1e-3 * (d - 0.5e-3))))
        if huber < best:
            best, out = huber, p
    return dict(A=float(np.exp(out[0])), E=float(np.exp(out[1])), alpha=float(out[2]))


def reference_laws(reading: str) -> pd.DataFrame:
    if reading == "window":
        return pd.read_csv(DATA / "porian_authors_fits.csv").set_index("family")[["A", "E", "alpha"]]
    m = pd.read_csv(DATA / "porian_slice_minima.csv").dropna()
    return pd.DataFrame({f: authors_recipe(g["slice_flops"].to_numpy(), g["loss_star"].to_numpy())
                         for f, g in m.groupby("family")}).T


def reference_k(laws: pd.DataFrame, base: str, variant: str, C: np.ndarray) -> np.ndarray:
    b, v = laws.loc[base], laws.loc[variant]
    return ((b["E"] + b["A"] * C ** -b["alpha"] - v["E"]) / v["A"]) ** (-1.0 / v["alpha"]) / C


def reference_class(slope: float) -> str:
    return "constant" if abs(slope) <= FLAT else "growing" if slope > 0 else "shrinking"


def porian_table(reading: str, n_boot: int = 1000, corpora=("rw", "owt2")) -> pd.DataFrame:
    """One row per ordered pair of settings within a corpus: the reference slope and class, the verdict, the
    method that answered, the median |k / k_ref - 1| over the base's slices inside the sweep, the law-free
    cells covered by the answering method's band (and by the law-free band, the reference there), and the
    reference's cells inside the sweep covered by the answering method's band, the median width ln(hi / lo) of
    the answering band inside the sweep and of the law-free band, and the answering method's model error."""
    laws = reference_laws(reading)
    lo, hi = WINDOW if reading == "window" else FULL
    t = slices()
    t = t[(t["slice_flops"] >= lo) & (t["slice_flops"] <= hi)]
    out = []
    for corpus in corpora:
        for base, variant in itertools.permutations(sorted(f for f in laws.index if f.startswith(corpus + ":")), 2):
            C = np.sort(t.loc[t["family"] == base, "slice_flops"].unique())
            ref = pd.Series(reference_k(laws, base, variant, C), index=C)
            slope = float(np.polyfit(np.log(C), np.log(ref.to_numpy()), 1)[0])
            m = fit_multiplier(t, base, variant, n_boot=n_boot, target_compute=None)
            lf = m.table[m.table["method"] == "lawfree"].set_index("compute")
            prim = m.table[m.table["method"] == m.primary].set_index("compute")
            inside, cells = prim[~prim["extrapolated"]], prim.loc[lf.index]
            r_in = ref.reindex(inside.index)
            out.append(dict(base=base, variant=variant, ref_slope=slope, ref_class=reference_class(slope),
                            verdict=m.verdict, primary=m.primary, slope=m.test.slope, slope_lo=m.test.slope_lo,
                            slope_hi=m.test.slope_hi, k_err=float(np.median(np.abs(inside["k"] / r_in - 1))),
                            lawfree_vs_ref=float(np.median(np.abs(lf["k"] / ref.reindex(lf.index) - 1))),
                            cells=len(lf), covered=int(((cells["lo"] <= lf["k"]) & (lf["k"] <= cells["hi"])).sum()),
                            lawfree_covers_ref=int(((lf["lo"] <= ref.reindex(lf.index)) & (ref.reindex(lf.index) <= lf["hi"])).sum()),
                            ref_cells=len(inside),
                            ref_covered=int(((inside["lo"] <= r_in) & (r_in <= inside["hi"])).sum()),
                            width=float(np.median(np.log(inside["hi"] / inside["lo"]))),
                            lawfree_width=float(np.median(np.log(lf["hi"] / lf["lo"]))),
                            model_error=m.model_error[m.primary], reason=m.reason))
    return pd.DataFrame(out)


def test_the_slices_are_isoflop_and_shared_by_the_settings_of_a_corpus():
    t = slices()
    assert np.allclose(6 * t["params"] * t["tokens"], t["slice_flops"], rtol=1e-8)
    budgets = t.groupby("family")["slice_flops"].apply(lambda s: tuple(np.unique(s)))
    assert budgets.nunique() == 1 and len(budgets.iloc[0]) == 12
    assert t.groupby(["family", "slice_flops"]).size().min() >= 5


@pytest.mark.slow  # 8 x 120 small curve fits
def test_authors_recipe_reproduces_their_eight_laws():
    fits = pd.read_csv(DATA / "porian_authors_fits.csv").set_index("family")
    m = pd.read_csv(DATA / "porian_slice_minima.csv").dropna()
    m = m[(m["slice_flops"] > WINDOW[0]) & (m["slice_flops"] < WINDOW[1])]
    for fam, g in m.groupby("family"):
        got = authors_recipe(g["slice_flops"].to_numpy(), g["loss_star"].to_numpy())
        for key in ("A", "E", "alpha"):
            assert got[key] == pytest.approx(fits.loc[fam, key], rel=1e-4), (fam, key)
    assert fits.loc["rw:tuned", ["A", "E", "alpha"]].round(3).tolist() == [128.932, 2.006, 0.106]  # printed


@pytest.mark.slow  # 12 fits at 200 replicates, ~25 s
def test_window_reading_is_never_wrong_and_its_bands_cover_the_lawfree_k():
    # measured: 7 right, 5 undetermined, 0 wrong; 43 of 43 law-free cells and 54 of 54 reference cells covered;
    # no pair's law disagrees with the law-free k beyond its bootstrap (model error 0, the bands as before)
    t = porian_table("window", n_boot=200, corpora=("rw",))
    right, undetermined = (t["verdict"] == t["ref_class"]), t["verdict"] == "undetermined"
    assert (right | undetermined).all(), t.loc[~(right | undetermined), ["base", "variant", "ref_slope", "verdict"]]
    assert right.sum() >= 7
    assert t["covered"].sum() >= 0.95 * t["cells"].sum() and t["ref_covered"].sum() >= 0.95 * t["ref_cells"].sum()
    assert t["k_err"].median() < 0.04  # measured 0.028
    assert (t["model_error"] < 0.02).all()


@pytest.mark.slow  # 12 fits at 200 replicates, ~55 s
def test_full_reading_verdicts_agree_with_the_authors_recipe_and_the_bands_cover_their_k():
    # measured: 11 right, 1 undetermined (reference slope +0.027, at the class edge), 0 wrong; k within a median
    # 2.2% of the authors'; the band covers their k in 123 of 123 cells and the law-free k in 110 of 114 (87 of 114
    # before the band carried the model error against the law-free k, docs/multiplier.md "Model error"); the
    # law-free band covers their k in 113 of 114
    t = porian_table("full", n_boot=200, corpora=("rw",))
    right, undetermined = (t["verdict"] == t["ref_class"]), t["verdict"] == "undetermined"
    assert (right | undetermined).all(), t.loc[~(right | undetermined), ["base", "variant", "ref_slope", "verdict"]]
    assert right.sum() >= 11 and t["k_err"].median() < 0.03
    assert t["ref_covered"].sum() >= 0.95 * t["ref_cells"].sum()
    assert t["lawfree_covers_ref"].sum() >= 0.95 * t["cells"].sum()
    assert t["covered"].sum() >= 0.85 * t["cells"].sum()  # issue 42's acceptance
    # the widening is not the law-free band: the answering band stays narrower (median ln(hi/lo) 0.263 against
    # its 0.659; 0.215 over both corpora before the model error at 1,000 replicates); 8 of the 12 pairs widened
    assert (t["model_error"] > 0).sum() >= 6
    assert t["width"].median() < 0.35 and (t["width"] < t["lawfree_width"]).all()
