"""Over-training law and chained downstream error (Gadre et al. 2024) against the authors'
printed relative errors (tests/data/scaling_public/overtraining_gadre2024/PROVENANCE.md)."""

import json

import numpy as np
import pandas as pd
import pytest

from interpscale.scaling import fit_downstream_error, fit_overtraining

SMALL = ["d=96_l=8_h=4", "d=512_l=8_h=4", "d=576_l=24_h=8", "d=1024_l=24_h=8"]
# scaling_explorer.ipynb cell 2 (RedPajama, C4-eval loss, 17-task error), in percent
PUBLISHED = {("open_lm_1b", 640.0): (0.7103, 3.6365), ("open_lm_7b", 20.0): (0.7320, 0.0464)}


@pytest.fixture(scope="module")
def rpj(reference_data):
    d = pd.read_csv(reference_data("scaling_public/overtraining_gadre2024/gadre_runs.csv"))
    return d[d.dataset == "rpj"]


@pytest.fixture(scope="module")
def fits(rpj):
    fit_rows = rpj[(rpj.model.isin(SMALL) & (rpj.cc_mult == 1.0)) | ((rpj.model == SMALL[0]) & (rpj.cc_mult == 16.0))]
    one = rpj[(rpj.model == "open_lm_1b") & (rpj.cc_mult == 1.0)]
    loss_fit = fit_overtraining(fit_rows.N, fit_rows.D, fit_rows.loss_c4_val, n_boot=200)
    err_fit = fit_downstream_error(np.r_[fit_rows.loss_c4_val, one.loss_c4_val],
                                   np.r_[fit_rows.err_avg_subset, one.err_avg_subset], n_boot=200)
    return loss_fit, err_fit


@pytest.mark.parametrize("target", list(PUBLISHED))
def test_published_relative_errors(rpj, fits, target):
    loss_fit, err_fit = fits
    r = rpj[(rpj.model == target[0]) & (rpj.M == target[1])].iloc[0]
    loss_pct = 100 * abs(float(loss_fit.predict(r.N, r.D)) - r.loss_c4_val) / r.loss_c4_val
    err_pct = 100 * abs(float(loss_fit.predict_error(r.N, r.D, err_fit)) - r.err_avg_subset) / r.err_avg_subset
    assert loss_pct == pytest.approx(PUBLISHED[target][0], abs=5e-5)
    assert err_pct == pytest.approx(PUBLISHED[target][1], abs=5e-5)


def test_one_exponent_and_intervals(rpj, fits):
    loss_fit, err_fit = fits
    assert loss_fit.params["eta"] == pytest.approx(0.27285, abs=1e-5)
    assert loss_fit.params["E"] == pytest.approx(1.83665, abs=1e-5)
    r = rpj[(rpj.model == "open_lm_7b")].iloc[0]
    lo, hi = loss_fit.predict_interval(r.N, r.D)
    assert lo < loss_fit.predict(r.N, r.D) < hi
    elo, ehi = loss_fit.predict_error_interval(r.N, r.D, err_fit)
    assert elo < loss_fit.predict_error(r.N, r.D, err_fit) < ehi
    assert set(loss_fit.ci) >= {"E", "eta", "a", "B"}
    json.dumps(loss_fit.to_dict()), json.dumps(err_fit.to_dict())
    assert "overtraining" in loss_fit.summary()


@pytest.mark.parametrize("recipe", ["authors", "robust"])
def test_synthetic_law_recovered(recipe):
    N, M = np.meshgrid(np.geomspace(1e7, 4e8, 4), [20.0, 80.0])
    N, D = N.ravel(), (N * M).ravel()
    a, c, b, E = 150.0, 300.0, -0.28, 1.8
    L = E + a * N**b + c * 6 ** (b / 2) * D**b
    fit = fit_overtraining(N, D, L, recipe=recipe, n_boot=0)
    assert fit.params["b"] == pytest.approx(b, rel=1e-4)
    assert fit.params["E"] == pytest.approx(E, rel=1e-4)


def test_synthetic_error_law_recovered():
    L = np.linspace(2.3, 4.5, 8)
    err = fit_downstream_error(L, 0.85 - 2.0 * np.exp(-0.7 * L), n_boot=0)
    assert (err.params["k"], err.params["gamma"], err.params["eps"]) == pytest.approx((2.0, 0.7, 0.85), rel=1e-5)


def test_too_few_runs():
    with pytest.raises(ValueError, match="at least 5"):
        fit_overtraining([1e7, 2e7, 4e7, 8e7], [1e9, 2e9, 4e9, 8e9], [4.0, 3.8, 3.6, 3.5], n_boot=0)
