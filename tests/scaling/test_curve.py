"""The annealed-loss predictors (scaling.curve, scaling.anneal_rows; docs/anneal.md): planted laws
recovered, the multi-power law against the published fit of Luo et al. 2025 on their released loss
curves, leave-one-out intervals, predicted results-table rows, the anneal subset of a sweep, and
`interpscale fit curve` from the command line."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interpscale.cli import main
from interpscale.orchestration.spec import RunSpec, segments
from interpscale.scaling.anneal_rows import loo_errors, predict_anneals, with_predicted_anneals
from interpscale.scaling.curve import (
    Curve,
    CurveModel,
    branch_point,
    curve_from_log,
    error_interval,
    fit_curve_model,
    fit_predictor,
    leave_one_out,
    schedule_from_points,
    split_runs,
)

# Luo et al. 2025 (github.com/thu-yao-01-luo/MultiPowerLaw, README "Evaluation Metrics"): worst relative
# prediction error (WorstE) of their multi-power fit per model size
LUO_WORST_ERROR = {"25M": 0.00409, "100M": 0.00583, "400M": 0.00995}
LUO_WARMUP, LUO_PEAK = 2160, 3e-4
BRANCHES = ("wsd_20000_24000", "wsdld_20000_24000", "wsdcon_3", "wsdcon_9", "wsdcon_18")


@pytest.fixture(scope="module")
def luo_log(reference_data) -> pd.DataFrame:
    return pd.read_csv(reference_data("schedules_luo2025/loss_curves.csv"))


def _wsd(total: int, start: int, end_lr: float = 0.0, every: int = 10) -> Curve:
    """A constant-LR run of ``total`` steps (start = total: no decay) or a branch decaying linearly
    from ``start`` to ``end_lr`` at ``total``; losses filled in by the caller."""
    lr = np.ones(total)
    if start < total:
        lr[start:] = 1.0 + (end_lr - 1.0) * (np.arange(start, total) - start + 1) / (total - start)
    steps = np.arange(every, total + 1, every) if start >= total else np.array([total])
    return Curve(f"anneal@{start}" if start < total else "stable", lr, steps, np.full(len(steps), np.nan))


def _with_law(c: Curve, method: str, params: dict) -> Curve:
    """``c`` with the losses a law with ``params`` gives at its evaluated steps."""
    model = CurveModel(method, c, params, peak=1.0)
    loss = [model.predict(Curve(c.name, c.lr[:s], np.array([s]), np.array([np.nan]))) for s in c.steps]
    return Curve(c.name, c.lr, c.steps, np.array(loss))


# ---------------------------------------------------------------- synthetic ground truth

def test_planted_lr_annealing_law_is_recovered_and_wins_leave_one_out():
    truth = {"L0": 2.0, "A": 3.0, "alpha": 0.5, "C": 4e-4}  # Tissue et al. Eq. 1, S2 in steps
    stable = _with_law(_wsd(2000, 2000), "lr-annealing", truth)
    branches = [_with_law(_wsd(int(1.25 * r), r), "lr-annealing", truth) for r in (400, 800, 1200, 1600)]
    model = fit_curve_model("lr-annealing", stable, branches)
    assert model.params["alpha"] == pytest.approx(0.5, rel=0.02)
    assert model.params["C"] == pytest.approx(4e-4, rel=0.05)
    pred = fit_predictor(stable, branches, methods=("offset-add", "lr-annealing"))
    assert pred.method == "lr-annealing"
    assert max(abs(r["rel_error"]) for r in pred.loo if r["method"] == "lr-annealing") < 1e-4


def test_planted_multi_power_law_is_recovered():
    truth = {"L0": 2.5, "A": 4.0, "alpha": 0.45, "B": 300.0, "C": 0.002, "beta": 0.6, "gamma": 0.6}
    stable = _with_law(_wsd(3000, 3000), "multi-power", truth)
    branches = [_with_law(_wsd(int(1.25 * r), r, end_lr=e), "multi-power", truth)
                for r, e in ((600, 0.0), (1200, 0.1), (1800, 0.0), (2400, 0.3))]
    held = _with_law(_wsd(2500, 2000, end_lr=0.05), "multi-power", truth)
    model = fit_curve_model("multi-power", stable, branches)
    assert model.predict(held) == pytest.approx(held.final_loss, rel=2e-3)


def test_planted_constant_offset_is_exact_for_offset_add():
    stable = Curve("stable", np.ones(1001), np.arange(100, 1001, 100), 3.0 + 50.0 / np.arange(100, 1001, 100) ** 0.5)
    branches = []
    for r in (200, 400, 600, 800):
        c = _wsd(int(1.25 * r), r)
        branches.append(Curve(c.name, c.lr, c.steps, np.array([float(np.interp(r, stable.steps, stable.loss)) - 0.07])))
    rows = leave_one_out(stable, branches, ("offset-add", "offset-mul"))
    add = [r["rel_error"] for r in rows if r["method"] == "offset-add"]
    assert np.max(np.abs(add)) < 1e-12
    assert np.max(np.abs([r["rel_error"] for r in rows if r["method"] == "offset-mul"])) > 1e-4


def test_branch_point_and_schedule_from_points():
    stable = _wsd(1000, 1000)
    assert branch_point(stable, _wsd(500, 400)) == 400
    lr = schedule_from_points([10, 20], [1.0, 0.0])
    assert lr[0] == 1.0 and lr[15] == pytest.approx(0.5) and len(lr) == 21


# ---------------------------------------------------------------- external reference: Luo et al. 2025

def _luo_curve(g: pd.DataFrame, name: str) -> Curve:
    """A released curve with the authors' linear warmup (0 -> 3e-4 over 2160 steps, src/lr_schedules.py)
    before the first logged step."""
    steps, lrs = g["step"].to_numpy(float), g["lr"].to_numpy(float)
    lr = schedule_from_points(np.r_[0.0, LUO_WARMUP, steps], np.r_[0.0, LUO_PEAK, lrs])
    return Curve(name, lr, steps.astype(int), g["loss"].to_numpy(float))


@pytest.mark.parametrize("size", ["25M", "400M"])
def test_multi_power_law_predicts_held_out_schedules_as_well_as_published(luo_log, size):
    """Luo et al.'s own split (src/config.py: fit on cosine_24000, constant_24000, wsdcon_9; predict
    the others): our Eq. 5 fit predicts the held-out schedules' final losses within the worst
    relative error their README reports for the same model size (WorstE)."""
    g = luo_log[luo_log["model"] == size]
    c = {name: _luo_curve(g[g["run"] == name], name) for name in g["run"].unique()}
    model = fit_curve_model("multi-power", c["constant_24000"], [c["cosine_24000"], c["wsdcon_9"]])
    held = ("wsd_20000_24000", "wsdld_20000_24000", "wsdcon_3", "wsdcon_18")
    worst = max(abs(model.predict(c[h]) / c[h].final_loss - 1) for h in held)
    assert worst < LUO_WORST_ERROR[size]


def test_public_logs_leave_one_branch_out(luo_log):
    """On the released curves the schedule-aware laws beat a constant offset (docs/anneal.md's table)."""
    g = luo_log[luo_log["model"] == "400M"]
    curves = [curve_from_log(r, x["step"], x["lr"], x["loss"]) for r, x in g.groupby("run", sort=False)]
    stable, branches, skipped = split_runs(curves)
    assert stable.name == "constant_24000" and skipped == ["cosine_24000"]
    assert sorted(b.name for b in branches) == sorted(BRANCHES)
    pred = fit_predictor(stable, branches)
    assert pred.method in ("lr-annealing", "multi-power")
    assert pred.scores[pred.method] < 0.005 < pred.scores["offset-add"]


# ---------------------------------------------------------------- intervals

@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-0.1, 0.1, allow_nan=False), min_size=1, max_size=40), st.sampled_from([0.5, 0.8, 0.9]))
def test_error_interval_covers_the_conformal_share(errors, level):
    q, how = error_interval(errors, level)
    covered = sum(abs(e) <= q for e in errors)
    need = math.ceil((len(errors) + 1) * level)
    assert covered >= min(need, len(errors))
    assert q in [abs(e) for e in errors]
    assert ("conformal" in how) == (need <= len(errors))


# ---------------------------------------------------------------- results-table rows

def _results(offset=-0.08, noise=0.002, seed=0, keep_every=1) -> pd.DataFrame:
    """Two runs per family: stable rows at reservoir steps, annealed rows 0.25·r later, ``offset``
    below the stable loss (with noise); only every ``keep_every``-th branch from the end kept."""
    rng = np.random.default_rng(seed)
    rows = []
    for fam in ("ar", "ar+concept"):
        for run, scale in (("a", 1.0), ("b", 1.3)):
            points = [40, 80, 120, 160, 200]
            for i, r in enumerate(points):
                stable = 2.0 + scale * 5.0 / r ** 0.5
                base = {"run_id": f"{fam}-{run}", "family": fam, "estimator": "ar_ce", "params": 1e4 * scale,
                        "tokens": r * 512.0, "flops": r * 512.0 * 6e4 * scale, "slice_flops": 1e9, "bpb": stable / 2}
                rows.append({**base, "step": r, "annealed": False, "loss": stable, "anneal_from": None})
                if (len(points) - 1 - i) % keep_every == 0:
                    end = r + int(0.25 * r + 0.5)
                    rows.append({**base, "step": end, "tokens": end * 512.0, "annealed": True, "anneal_from": r,
                                 "loss": stable + offset + rng.normal(0, noise)})
    return pd.DataFrame(rows)


def test_predicted_anneals_fill_the_skipped_checkpoints_with_intervals():
    full, half = _results(), _results(keep_every=2)
    new = predict_anneals(half, methods=("offset-add", "offset-mul"))
    assert len(new) == 2 * 2 * 2  # two skipped checkpoints per run, four runs
    assert new["predicted"].all() and new["annealed"].all()
    assert (new["loss_lo"] < new["loss"]).all() and (new["loss"] < new["loss_hi"]).all()
    truth = full[full["annealed"]].set_index(["run_id", "anneal_from"])["loss"]
    got = new.set_index(["run_id", "anneal_from"])
    err = (got["loss"] / truth.reindex(got.index) - 1).abs()
    assert err.max() < 0.01
    assert set(got["step"]) == {100, 200} and (got["tokens"] == got["step"] * 512.0).all()
    both = with_predicted_anneals(half, methods=("offset-add",))
    assert both["predicted"].sum() == len(new) and (~both["predicted"]).sum() == len(half)


def test_loo_errors_per_family_and_method():
    errs = loo_errors(_results(), methods=("offset-add", "offset-mul"))
    assert set(errs["family"]) == {"ar", "ar+concept"}
    assert len(errs) == 2 * 2 * 2 * 5  # family x run x method x branch
    assert errs["rel_error"].abs().max() < 0.01


# ---------------------------------------------------------------- the sweep's anneal subset

@pytest.mark.parametrize("rule, starts", [("all", [16, 32, 48, 64, 80]), ("every:2", [16, 48, 80]), ("ends", [16, 80])])
def test_anneal_rule_picks_the_branches_a_run_trains(rule, starts):
    spec = RunSpec(family="ar", size="nano", slice_flops=1e9, flops=1e9, params=1000, tokens=512 * 100,
                   seq_len=32, batch_tokens=512, reservoir=4, anneal=rule)
    segs = [s for s in segments(spec) if s.phase == "anneal"]
    assert sorted(s.start for s in segs) == starts
    if rule == "all":  # run ids of sweeps that anneal everything are unchanged
        assert "anneal" not in spec.to_dict()


def test_bad_anneal_rule_names_the_value():
    with pytest.raises(ValueError, match="every:0"):
        RunSpec(family="ar", size="nano", slice_flops=1e9, flops=1e9, params=1000, tokens=512 * 100,
                seq_len=32, batch_tokens=512, anneal="every:0")


# ---------------------------------------------------------------- fit curve from the command line

def test_fit_curve_cli_with_a_column_mapping(luo_log, tmp_path, capsys):
    log = luo_log[luo_log["model"] == "25M"].rename(columns={"run": "name", "step": "Step", "lr": "learning_rate",
                                                              "loss": "train/loss"})
    log.to_csv(tmp_path / "log.csv", index=False)
    s = np.arange(0, 16001, 128)
    sched = pd.DataFrame({"run": "wsdld_12000_16000", "step": s,
                          "lr": np.where(s < 12000, 3e-4, 3e-4 - 2.7e-4 * (s - 12000) / 4000)})
    sched.to_csv(tmp_path / "sched.csv", index=False)
    rc = main(["fit", "curve", str(tmp_path / "log.csv"), "--run", "name", "--step", "Step", "--lr", "learning_rate",
               "--loss", "train/loss", "--predict", str(tmp_path / "sched.csv"), "--out", str(tmp_path / "out")])
    assert rc == 0
    pred = pd.read_csv(tmp_path / "out" / "predictions.csv")
    assert list(pred.columns) == ["run", "step", "predicted", "lo", "hi", "method", "chosen_by"]
    row = pred.iloc[0]
    assert row["step"] == 16000 and row["lo"] < row["predicted"] < row["hi"]
    stable = log[(log["name"] == "constant_24000") & (log["Step"] <= 16000)]["train/loss"]
    assert row["predicted"] < stable.iloc[-1]  # a cooldown ends below the constant-LR run
    assert "chosen" in capsys.readouterr().out


def test_fit_curve_cli_missing_column_is_one_line(tmp_path, capsys):
    pd.DataFrame({"run": ["a"], "step": [1], "loss": [2.0]}).to_csv(tmp_path / "log.csv", index=False)
    rc = main(["fit", "curve", str(tmp_path / "log.csv"), "--run", "run", "--step", "step", "--lr", "eta",
               "--loss", "loss", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "--lr column 'eta' not found" in err and "Traceback" not in err


def test_report_section_counts_saved_anneal_steps():
    from interpscale.analysis.report import anneal_section, anneal_summary

    s = anneal_summary(_results(keep_every=2))
    assert list(s["family"]) == ["ar", "ar+concept"]
    # per run: trained branches from 40, 120, 200 (10 + 30 + 50 steps), predicted from 80, 160 (20 + 40)
    assert (s["anneal steps trained"] == 2 * 90).all() and (s["anneal steps saved"] == 2 * 60).all()
    lines = anneal_section(_results(keep_every=2))
    assert lines[0].startswith("## Annealed losses") and any("offset" in line for line in lines)
    assert anneal_section(_results()) == []  # every checkpoint annealed: nothing predicted, no section


def test_predicted_rows_read_back_as_booleans_and_stay_out_of_fits_unless_asked(tmp_path):
    from interpscale.results_table import read_results
    from interpscale.scaling.tables import fit_rows

    both = with_predicted_anneals(_results(keep_every=2), methods=("offset-add",))
    both.to_csv(tmp_path / "r.csv", index=False)
    back = read_results(tmp_path / "r.csv")
    assert back["predicted"].dtype == bool and int(back["predicted"].sum()) == 8
    assert not fit_rows(back, annealed=True)["predicted"].any()
    assert fit_rows(back, annealed=True, predicted=True)["predicted"].sum() == 8
