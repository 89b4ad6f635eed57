"""Issue 46.2: one options type (``FitOptions`` with replicate counts by purpose from ``N_BOOT``) and
a ``status`` on every composite result (ladder, law table, trend, family forecast)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from interpscale.scaling import N_BOOT, FitOptions, FitStatus, backtest, fit_trend
from interpscale.scaling._base import combined_status

SCALING = Path(__file__).resolve().parents[2] / "src" / "interpscale" / "scaling"


def test_combined_status_is_the_worst_part_with_its_reason():
    ok = SimpleNamespace(status=FitStatus())
    flagged = SimpleNamespace(status=FitStatus("flagged", "L_inf at its bound"))
    failed = SimpleNamespace(status=FitStatus("failed", "did not converge"))
    assert combined_status({"a": ok, "b": None}).identified
    st = combined_status({"step 1": ok, "step 2": flagged})
    assert st.state == "flagged" and st.reason == "step 2: L_inf at its bound"
    assert combined_status({"x": flagged, "y": failed}).state == "failed"


def test_ladder_and_law_table_results_have_a_status():
    from interpscale.scaling.laws import LadderFit, LawTableFit

    def part(status, **ci):
        return SimpleNamespace(status=status, converged=status.state != "failed", ci=ci, level=0.8,
                               warnings=(status.reason,) if status.reason else ())

    step1, step2 = part(FitStatus("flagged", "E at its bound"), E=(1.0, 2.0)), part(FitStatus(), k=(3.0, 4.0))
    ladder = LadderFit.of(step1, step2)  # the status is decided where the result is made
    assert ladder.status.state == "flagged" and ladder.status.reason == "step 1: E at its bound"
    assert ladder.ci == {"E": (1.0, 2.0), "step2_k": (3.0, 4.0)} and ladder.level == 0.8 and ladder.converged
    assert ladder.warnings == ("E at its bound",)
    table = LawTableFit.of("chinchilla", part(FitStatus()), runs=pd.DataFrame(), source=("t.csv",), last=1)
    assert table.status.identified and table.converged
    failed = LawTableFit.of("overtraining", part(FitStatus()), part(FitStatus("failed", "no")), runs=pd.DataFrame(),
                            source=("t.csv",), last=1)
    assert failed.status.state == "failed" and not failed.converged and failed.status.reason == "error law: no"


def test_trend_status_summary_and_options():
    t = fit_trend([1e18, 1e19, 1e20, 1e21], [0.50, 0.55, 0.61, 0.64], name="m")
    assert t.status.identified and t.to_dict()["status"]["state"] == "identified"
    assert t.summary() == t.sentence()
    narrow = fit_trend([1e18, 1e19, 1e20, 1e21], [0.50, 0.55, 0.61, 0.64], options=FitOptions(level=0.5))
    assert narrow.level == 0.5 and narrow.ci[1] - narrow.ci[0] < t.ci[1] - t.ci[0]


def test_fit_options_by_purpose_and_backtest_takes_them_whole():
    assert FitOptions.for_purpose("backtest").n_boot == N_BOOT["backtest"]
    assert FitOptions.for_purpose("multiplier", level=0.8).n_boot == N_BOOT["multiplier"]
    from interpscale.scaling import forecast_from_results

    with pytest.raises(ValueError, match="give n_boot through options="):
        backtest(pd.DataFrame({"slice_flops": [1.0]}), n_boot=5, options=FitOptions())
    with pytest.raises(ValueError, match="forecast_from_results: give level, seed through options="):
        forecast_from_results(pd.DataFrame({"params": [1.0]}), target_compute=1e20, level=0.5, seed=1,
                              options=FitOptions())


def test_replicate_counts_are_written_once():
    """The analysis, the backtest and the report take replicate counts from N_BOOT, never a literal."""
    for name in ("analysis.py", "backtest.py", "trend.py", "forecast.py"):
        text = (SCALING / name).read_text()
        assert not re.search(r"n_boot\s*[:=]\s*(?:int\s*=\s*)?\d{2,}", text), name


def test_law_status_reads_warning_codes_not_text():
    """A law fit is flagged by its warnings' codes (``FitWarning.code``), never by their words; the
    text the user reads is unchanged."""
    from interpscale.scaling._base import FitWarning, emit, quiet, warning_code
    from interpscale.scaling.engine import law_status

    assert law_status(True, ["a plain note that says not identified and at its bound"]).identified
    st = law_status(True, [FitWarning("R* ran high", "not_identified"), FitWarning("3 minima")])
    assert st.state == "flagged" and st.reason == "R* ran high"
    assert law_status(False, [FitWarning("b at 0", "at_bound")], "max iterations").state == "failed"
    msgs: list[str] = []
    with quiet():
        emit(msgs, "fit_x: slope on its bound", code="at_bound")
    assert msgs == ["fit_x: slope on its bound"] and warning_code(msgs[0]) == "at_bound"
    assert warning_code("plain") == "note"
    with pytest.raises(ValueError, match="FitWarning code"):
        FitWarning("x", "flagged-ish")


def test_overtraining_flag_keeps_its_words():
    import numpy as np

    from interpscale.scaling.laws import fit_overtraining

    N = np.array([1e7, 2e7, 4e7, 8e7, 1e7, 2e7, 4e7, 8e7])
    D = 20 * N * np.array([1, 1, 1, 1, 4, 4, 4, 4])
    L = 3.0 + 1e-9 * np.log(N * D) + np.linspace(0, 1e-3, 8)  # rises with scale: b >= 0
    fit = fit_overtraining(N, D, L, n_boot=0)
    words = [w for w in fit.warnings if "does not fall with scale" in w]
    assert words and words[0].code == "not_identified"
    assert fit.status.state == "flagged" and "the loss does not fall with scale" in fit.status.reason
    again = fit_overtraining(N, D, L, options=FitOptions(n_boot=0, level=0.5))
    assert again.level == 0.5 and again.params == fit.params


def test_fit_families_and_fit_law_table_take_options_whole(tmp_path):
    from interpscale.scaling import fit_families
    from interpscale.scaling.laws import fit_law_table

    df = pd.DataFrame({"family": "ar", "params": [1e7, 2e7, 4e7] * 3,
                       "tokens": [2e8, 1e8, 5e7, 4e8, 2e8, 1e8, 8e8, 4e8, 2e8],
                       "slice_flops": [1.2e16] * 3 + [2.4e16] * 3 + [4.8e16] * 3})
    df["flops"] = 6 * df["params"] * df["tokens"]
    df["loss"] = 1.8 + 400 * df["params"] ** -0.34 + 2000 * df["tokens"] ** -0.37
    opts = FitOptions(n_boot=0, level=0.8, grid="coarse")
    a = fit_families(df, options=opts)
    b = fit_families(df, n_boot=0, level=0.8, grid="coarse")
    ca, cb = a.families["ar"].chinchilla, b.families["ar"].chinchilla
    assert a.level == 0.8 and (ca.alpha, ca.beta, ca.L_inf) == (cb.alpha, cb.beta, cb.L_inf)
    with pytest.raises(ValueError, match="fit_families: give n_boot through options="):
        fit_families(df, n_boot=5, options=opts)
    path = tmp_path / "runs.csv"
    df.to_csv(path, index=False)
    fit = fit_law_table("chinchilla", [path], params="params", tokens="tokens", loss="loss",
                        options=FitOptions(n_boot=10, level=0.5, seed=3))
    assert fit.fit.level == 0.5 and fit.fit.n_boot_ok <= 10
    with pytest.raises(ValueError, match="fit_law_table: give seed through options="):
        fit_law_table("chinchilla", [path], params="params", tokens="tokens", loss="loss", seed=1,
                      options=FitOptions())


# public functions of scaling/*.py that take n_boot, level or seed loose, beside options= (one release)
SHIMS = {"backtest", "fit_families", "fit_law_table", "forecast_from_results", "fit_trend", "fit_data_constrained",
         "fit_overtraining", "fit_downstream_error", "fit_ladder", "predict_anneals", "fit_predictor",
         "fit_bounded", "fit_power_law", "fit_isoflop", "fit_chinchilla", "fit_multiplier", "family_forecasts",
         "family_multipliers"}
# a band's or an interval's level as a quantity (bootstrap primitives, a fit's own band), not a fit's options
PRIMITIVES = {"check_level", "dropped", "pairs_weights", "cluster_weights", "percentile_ci", "band_from_draws",
              "prior_half_width", "error_interval", "chained_interval", "extrapolate", "compare_approaches",
              "calibrate", "conformal_quantile", "growth_test", "simulate_pair",
              "model_error", "widen"}  # band arithmetic at a level, as band_from_draws
# still loose, without options= (none left: add a name here only with the issue that will give it options=)
NOT_YET: set[str] = set()


def _public_functions():
    import ast

    for path in sorted(SCALING.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                a = node.args
                yield path.name, node.name, {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}


def test_no_public_fit_takes_loose_bootstrap_options_except_the_listed_shims():
    seen = set()
    for module, name, params in _public_functions():
        if not params & {"n_boot", "level", "seed"}:
            continue
        seen.add(name)
        if "options" in params:
            assert name in SHIMS, f"{module}:{name} takes options= and loose keywords: list it as a shim"
        else:
            assert name in PRIMITIVES | NOT_YET, f"{module}:{name} takes n_boot/level/seed loose: take options="
    assert SHIMS <= seen and not (NOT_YET - seen), "a listed function no longer takes them: update the lists"


def test_each_default_is_defined_once():
    """N_BOOT's counts, DEFAULT_LEVEL and the default start grid are each assigned in one module;
    elsewhere a default names them."""
    import ast

    where: dict[str, list[str]] = {"N_BOOT": [], "DEFAULT_LEVEL": [], "DEFAULT_GRID": []}
    literal_grids, literal_counts = [], []
    for path in sorted(SCALING.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            for t in getattr(node, "targets", [getattr(node, "target", None)]):
                if isinstance(t, ast.Name) and t.id in where:
                    where[t.id].append(path.name)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                pairs = []
                if isinstance(node, ast.FunctionDef):
                    a = node.args
                    pos = a.posonlyargs + a.args
                    pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults))
                    pairs += [(x, d) for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
                    pairs = [(x.arg, d) for x, d in pairs]
                else:
                    pairs = [(s.target.id, s.value) for s in node.body
                             if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value]
                literal_grids += [f"{path.name}:{node.name}" for k, d in pairs
                                  if k == "grid" and isinstance(d, ast.Constant) and isinstance(d.value, str)]
                literal_counts += [f"{path.name}:{node.name}:{k}" for k, d in pairs
                                   if k in ("level", "n_boot", "backtest_boot") and isinstance(d, ast.Constant)
                                   and isinstance(d.value, (int, float)) and d.value != 0]
    assert where == {"N_BOOT": ["bootstrap.py"], "DEFAULT_LEVEL": ["bootstrap.py"], "DEFAULT_GRID": ["_base.py"]}
    assert not literal_counts, f"a level or replicate default written as a number: {literal_counts}"
    # fit_chinchilla keeps the paper's own recipe ("epoch") unless options= says otherwise
    assert set(literal_grids) <= {"joint.py:fit_chinchilla"}, literal_grids


def test_the_core_fits_take_options_whole():
    """fit_isoflop, fit_chinchilla, fit_bounded, fit_power_law and fit_multiplier read n_boot, level,
    seed (and grid) off options=, and refuse them given beside it."""
    from interpscale.scaling import FitOptions, fit_chinchilla, fit_isoflop
    from interpscale.scaling.multiplier import simulate_pair

    df = simulate_pair(seed=2, sizes_per_slice=5)
    rows = df[df.family == "base"]
    o = FitOptions(n_boot=30, level=0.8, seed=3)
    a, b = fit_isoflop(rows, options=o), fit_isoflop(rows, n_boot=30, level=0.8, seed=3)
    assert a.ci == b.ci and a.level == 0.8
    c = fit_chinchilla(rows.params, rows.tokens, rows.loss, options=FitOptions(n_boot=0, grid="coarse"))
    d = fit_chinchilla(rows.params, rows.tokens, rows.loss, n_boot=0, grid="coarse")
    assert c.alpha == d.alpha and c.n_starts == d.n_starts
    with pytest.raises(ValueError, match="through options="):
        fit_isoflop(rows, n_boot=30, options=o)
