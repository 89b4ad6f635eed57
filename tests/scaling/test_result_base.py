"""Issue 46.2: every fit result is on the one base (``_base.FitFields`` / ``FitResult``): a ``status``
decided where the fit is made, ``to_dict()`` that ``json.dumps`` takes as it is, and ``summary()``."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from interpscale.scaling import FitOptions, FitStatus, ForecastOptions, fit_trend
from interpscale.scaling._base import FitFields
from interpscale.scaling.forecast import Calibrated, FamilyForecast, calibrated, forecast_family, get_method
from interpscale.scaling.laws import LadderFit, LawTableFit, RepetitionInputs, fit_ladder, fit_law_table
from interpscale.scaling.multiplier import MultiplierFit, fit_multiplier, simulate_pair
from interpscale.scaling.trend import TrendFit


def _ladder() -> LadderFit:
    rng = np.random.default_rng(0)
    N = np.repeat([2e8, 4e8, 8e8, 1.3e9], 4)
    D = N * np.tile([20.0, 40.0, 100.0, 200.0], 4)
    x = rng.uniform(0.6, 1.6, 60)
    return fit_ladder(N, D, np.exp(3.0) / N**0.2 + np.exp(5.0) / D**0.25 + 0.5, checkpoint_loss=x,
                      checkpoint_accuracy=-0.7 / (1 + np.exp(-4.0 * (x - 1.1))) + 0.95, recipe="robust",
                      options=FitOptions(n_boot=0))


def _law_table(tmp_path) -> LawTableFit:
    P, D = np.repeat([1e7, 2e7, 4e7, 8e7], 3), np.tile([1e8, 4e8, 1.6e9], 4)
    path = tmp_path / "runs.csv"
    pd.DataFrame({"params": P, "tokens": D, "loss": 1.8 + 400 * P**-0.34 + 2000 * D**-0.37}).to_csv(path, index=False)
    return fit_law_table("chinchilla", [path], params="params", tokens="tokens", loss="loss",
                         options=FitOptions(n_boot=0))


@pytest.fixture(scope="module")
def pair():
    return simulate_pair(seed=2, sizes_per_slice=5)


@pytest.fixture(scope="module")
def results(pair, tmp_path_factory):
    base = pair[pair.family == "base"]
    return {
        "trend": fit_trend([1e18, 1e19, 1e20, 1e21], [0.50, 0.55, 0.61, 0.64], name="m"),
        "ladder": _ladder(),
        "law table": _law_table(tmp_path_factory.mktemp("law")),
        "forecast": forecast_family(base, 1e12, options=ForecastOptions(n_boot=0, k=6.0, backtest_boot=0)),
        "multiplier": fit_multiplier(pair, "base", "variant", methods=("isoflop",), target_compute=None,
                                     options=FitOptions(n_boot=20)),
    }


@pytest.mark.parametrize("name, cls", [("trend", TrendFit), ("ladder", LadderFit), ("law table", LawTableFit),
                                       ("forecast", FamilyForecast), ("multiplier", MultiplierFit)])
def test_each_result_has_status_to_dict_and_summary(results, name, cls):
    r = results[name]
    assert isinstance(r, cls) and isinstance(r, FitFields)
    assert isinstance(r.status, FitStatus) and r.status.state != "failed", (name, r.status)
    d = r.to_dict()
    again = json.loads(json.dumps(d, allow_nan=False))  # plain JSON: no NaN, no numpy, no objects
    assert again["status"] == r.status.to_dict()
    assert isinstance(r.summary(), str) and r.summary()
    assert isinstance(r.converged, bool) and isinstance(r.warnings, tuple) and 0 < r.level < 1
    assert isinstance(r.ci, (dict, tuple))
    with pytest.raises(AttributeError):  # frozen: a status is decided once, where the fit is made
        r.status = FitStatus("failed")


def test_the_status_is_a_field_decided_by_the_fit(results):
    fc = results["forecast"]
    assert fc.status == fc.best.status and fc.ci[fc.chosen] == (fc.best.lo, fc.best.hi)
    ladder = results["ladder"]
    assert set(ladder.ci) == set(ladder.step1.ci) | {f"step2_{k}" for k in ladder.step2.ci}
    m = results["multiplier"]
    assert m.ci["isoflop"] == (m.test.slope_lo, m.test.slope_hi) and m.to_dict()["status"] == m.status.to_dict()
    t = results["trend"]
    assert t.to_dict()["direction"] == t.direction == "rises" and len(t.resid) == t.n


def test_named_tuples_replace_positional_returns(results):
    fc = results["forecast"]
    m = get_method(fc.chosen)
    c = calibrated(m, fc.best.fit, 1e12, fc.options, fc.errors, fc.ratio)
    assert isinstance(c, Calibrated) and c.predicted == pytest.approx(fc.best.predicted)
    assert (c.lo, c.hi) == pytest.approx((fc.best.lo, fc.best.hi))
    from interpscale.scaling.laws import repetition_inputs

    r = repetition_inputs(np.array([1e8]), np.array([4e9]), np.array([1e9]))
    assert isinstance(r, RepetitionInputs) and r.R_D[0] == pytest.approx(3.0) and len(r) == 4


def test_a_note_read_again_inside_log_once_is_logged_once_and_recorded_each_time(caplog):
    """One report reads the same rows for each table and figure: its notes ("annealed mixes ...")
    are logged once (each warning once), while every result keeps its own copy."""
    from interpscale.scaling import log_once
    from interpscale.scaling.tables import fit_rows

    table = pd.DataFrame({"family": ["ar"] * 4, "params": [1e6, 2e6, 1e6, 2e6], "tokens": [1e8] * 4,
                          "loss": [3.0, 2.9, 3.1, 3.0], "slice_flops": [6e14] * 4,
                          "annealed": [True, True, False, False]})
    per_call = [[], [], []]
    with caplog.at_level("WARNING", logger="interpscale.scaling"), log_once():
        for w in per_call:
            fit_rows(table, warnings=w)
    assert all(len(w) == 1 and "annealed mixes" in w[0] for w in per_call)
    assert sum("annealed mixes" in r.getMessage() for r in caplog.records) == 1
    caplog.clear()
    with caplog.at_level("WARNING", logger="interpscale.scaling"):  # outside: each call logs, as before
        fit_rows(table, warnings=[])
        fit_rows(table, warnings=[])
    assert sum("annealed mixes" in r.getMessage() for r in caplog.records) == 2
