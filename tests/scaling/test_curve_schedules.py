"""`fit curve` on schedules as users write them (issue 42): a schedule at any granularity gives the
same prediction, a schedule whose branch point contradicts the log is refused in one line, one
annealed branch gets the default predictor with the prior interval, and on public logs with cooldown
branches the 0.9 intervals cover >= 80% of held-out branches (docs/anneal.md)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interpscale.cli import main
from interpscale.scaling.curve import (
    CURVE_METHODS,
    DEFAULT_METHOD,
    PRIOR_RMS,
    Curve,
    CurveModel,
    check_branch,
    curve_from_log,
    error_interval,
    fit_curve_model,
    fit_predictor,
    prior_half_width,
    schedule_curve,
    split_runs,
)

TRUTH = {"L0": 2.0, "A": 3.0, "alpha": 0.5, "C": 4e-4}  # Tissue et al. Eq. 1, S2 in steps
WARMUP, END, EVERY, PEAK = 300, 4000, 50, 2e-3  # the synthetic log: warm-up logged too, every 50 steps


def _lr(total: int, branch: int | None = None, shape: str = "linear", floor: float = 0.1) -> np.ndarray:
    """Per-step LR (steps 0..total): linear warm-up, the peak, from ``branch`` a decay to floor·peak."""
    t = np.arange(total + 1, dtype=float)
    lr = PEAK * np.minimum((t + 1) / WARMUP, 1.0)
    if branch is not None:
        x = np.clip((t - branch) / (total - branch), 0, 1)
        decay = {"linear": 1 - (1 - floor) * x, "exp": floor ** x, "drop": np.where(t >= branch, floor, 1.0),
                 "cosine": floor + (1 - floor) * (1 + np.cos(np.pi * x)) / 2}[shape]
        lr = np.where(t >= branch, PEAK * decay, lr)
    return lr


def _logged(name: str, lr: np.ndarray, every: int = EVERY) -> Curve:
    """A run as the log holds it: LR and the planted law's loss every ``every`` steps."""
    steps = np.arange(every, len(lr), every)
    per_step = Curve(name, lr, steps, np.full(len(steps), np.nan))
    law = CurveModel("lr-annealing", per_step, TRUTH, peak=PEAK)
    loss = [law.predict(Curve(name, lr[: s + 1], np.array([s]), np.array([np.nan]))) for s in steps]
    return curve_from_log(name, steps, lr[steps], loss)


@pytest.fixture(scope="module")
def synthetic():
    """The log's stable run, three logged cooldown branches, and every method fitted on them."""
    stable = _logged("stable", _lr(END))
    branches = [_logged(f"b{b}", _lr(int(1.25 * b), b)) for b in (800, 1600, 2400)]
    return stable, {m: fit_curve_model(m, stable, branches) for m in CURVE_METHODS}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(["linear", "drop", "exp", "cosine"]), branch=st.integers(600, 3000),
       every=st.integers(1, 400), prefix=st.sampled_from(["none", "every step", "every N", "warm-up only"]))
def test_a_schedule_at_any_granularity_gives_the_same_prediction(synthetic, shape, branch, every, prefix):
    """The held-out branch's schedule written at every step, or every N steps from its branch point
    (with no rows before it, with warm-up and stable rows at every step or every N, or warm-up only):
    every method's prediction moves < 0.01%. A curved decay is sampled finely enough to be the same
    schedule (N <= 1% of its length): coarser rows describe another schedule."""
    stable, models = synthetic
    end = int(1.25 * branch)
    lr = _lr(end, branch, shape)
    if shape in ("exp", "cosine"):
        every = max(1, min(every, (end - branch) // 100))
    after = np.unique(np.r_[np.arange(branch, end, every), end])
    before = {"none": [], "every step": np.arange(0, branch), "every N": np.r_[np.arange(0, branch, every), branch - 1],
              "warm-up only": np.r_[np.arange(0, WARMUP, every), WARMUP - 1, branch - 1]}[prefix]
    rows = np.unique(np.r_[before, after]).astype(int)
    full = schedule_curve("held", np.arange(end + 1), lr, stable)
    coarse = schedule_curve("held", rows, lr[rows], stable)
    for method, model in models.items():
        p, q = model.predict(full), model.predict(coarse)
        assert abs(q / p - 1) < 1e-4, (method, p, q)


def test_a_warm_up_the_log_does_not_hold_is_not_a_branch_point(synthetic):
    """The issue's failure: a schedule written from step 0 with its warm-up, against a log whose
    stable run starts after warm-up (or logs it coarsely): the branch point is still the cooldown's."""
    stable, models = synthetic
    late = _logged("late", _lr(END), every=400)  # first logged step 400, after the 300-step warm-up
    lr = _lr(2500, 2000)
    for st_ in (stable, late):
        assert check_branch(st_, schedule_curve("held", np.arange(2501), lr, st_)) == 2001
    base = models["offset-add"].predict(schedule_curve("held", [2000, 2500], [PEAK, 0.1 * PEAK], stable))
    assert models["offset-add"].predict(schedule_curve("held", np.arange(2501), lr, stable)) == pytest.approx(base)


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize("steps, lrs, says", [
    ([0, 150, 2000], [0.0, PEAK / 2, PEAK / 4], "lowers its learning rate at step 151"),  # decays during warm-up
    ([0, 2000], [PEAK / 2, PEAK / 2], "never"),  # never at the stable run's LR
    (np.arange(0, 1601, 100), np.arange(0, 1601, 100) / 1600 * PEAK, "only from step 1600"),  # a longer warm-up
    ([3500, 4500, 4800], [PEAK, PEAK, 0.0], "branches at step 4501, outside"),  # leaves after the log ends
    ([0, 3000], [PEAK, PEAK], "follows the stable run 'stable' to its last step 3000"),
])
def test_a_schedule_contradicting_the_log_is_refused_in_one_line(synthetic, tmp_path, capsys, steps, lrs, says):
    stable, _ = synthetic
    with pytest.raises(ValueError, match=says):
        schedule_curve("held", steps, lrs, stable)
    log = pd.DataFrame([{"run": c.name, "step": s, "lr": c.lr[s], "loss": x}
                        for c in (stable, _logged("b800", _lr(1000, 800))) for s, x in zip(c.steps, c.loss)])
    log.to_csv(tmp_path / "log.csv", index=False)
    pd.DataFrame({"run": "held", "step": steps, "lr": lrs}).to_csv(tmp_path / "s.csv", index=False)
    rc = main(["fit", "curve", str(tmp_path / "log.csv"), "--run", "run", "--step", "step", "--lr", "lr",
               "--loss", "loss", "--predict", str(tmp_path / "s.csv"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and f"{tmp_path / 's.csv'}: schedule 'held'" in err and says in err


# ---------------------------------------------------------------- one branch: the default and the prior

def test_one_branch_gets_the_default_predictor_and_the_prior_interval(synthetic, tmp_path, capsys):
    stable, _ = synthetic
    branch = _logged("b1600", _lr(2000, 1600))
    pred = fit_predictor(stable, [branch])
    assert (pred.method, pred.chosen_by, pred.loo) == (DEFAULT_METHOD, "default", [])
    assert pred.half_width == pytest.approx(prior_half_width(0.9)) == pytest.approx(1.645 * PRIOR_RMS, rel=1e-3)
    held = _logged("b2400", _lr(3000, 2400))
    p, lo, hi = pred.predict(schedule_curve("held", np.arange(3001), held.lr, stable))
    assert lo < held.final_loss < hi  # the planted law is lr-annealing (its log misses the first 50 steps)
    log = pd.DataFrame([{"run": c.name, "step": s, "lr": c.lr[s], "loss": x}
                        for c in (stable, branch) for s, x in zip(c.steps, c.loss)])
    log.to_csv(tmp_path / "log.csv", index=False)
    sched = pd.DataFrame({"run": "held", "step": [2400, 3000], "lr": [PEAK, 0.1 * PEAK]})
    sched.to_csv(tmp_path / "s.csv", index=False)
    rc = main(["fit", "curve", str(tmp_path / "log.csv"), "--run", "run", "--step", "step", "--lr", "lr",
               "--loss", "loss", "--predict", str(tmp_path / "s.csv"), "--out", str(tmp_path / "out")])
    assert rc == 0 and "lr-annealing chosen by default" in capsys.readouterr().out
    row = pd.read_csv(tmp_path / "out" / "predictions.csv").iloc[0]
    assert row["chosen_by"] == "default" and row["hi"] / row["predicted"] - 1 == pytest.approx(prior_half_width())


@pytest.mark.parametrize("errors", [[0.001], [0.001, -0.002], [0.0001] * 5, [0.02, 0.001]])
def test_a_few_leave_one_out_errors_never_give_an_interval_narrower_than_the_prior(errors):
    q, how = error_interval(errors, 0.9, floor=prior_half_width(0.9))
    assert q == max(prior_half_width(0.9), max(map(abs, errors)))
    assert ("prior" in how) == (q > max(map(abs, errors)))
    many = np.full(30, 1e-4)  # enough for the conformal quantile: its guarantee stands
    assert error_interval(many, 0.9, floor=prior_half_width(0.9))[0] == pytest.approx(1e-4)


# ---------------------------------------------------------------- public logs (Luo et al. 2025)

LUO_WARMUP, LUO_PEAK, LUO_BRANCHES = 2160, 3e-4, 5


def _luo_schedule(run: str, end: int) -> np.ndarray:
    """A branch's LR at every step 0..end, as the authors' src/lr_schedules.py writes it (warm-up included)."""
    t = np.arange(end + 1, dtype=float)
    lr = np.where(t < LUO_WARMUP, LUO_PEAK * t / (LUO_WARMUP - 1), LUO_PEAK)
    x = np.clip((t - 20000) / 4000, 0, 1)
    if run.startswith("wsd_"):
        return np.where(t >= 20000, LUO_PEAK ** (1 - x) * 3e-5 ** x, lr)
    if run.startswith("wsdld_"):
        return np.where(t >= 20000, LUO_PEAK * (1 - x) + 3e-5 * x, lr)
    return np.where(t >= 8000, int(run.split("_")[1]) * 1e-5, lr)  # wsdcon_K: a drop at 8000 to K·1e-5


@pytest.fixture(scope="module")
def luo(reference_data):
    df = pd.read_csv(reference_data("schedules_luo2025/loss_curves.csv"))
    out = {}
    for size, g in df.groupby("model", sort=False):
        stable, branches, _ = split_runs([curve_from_log(r, x["step"], x["lr"], x["loss"])
                                          for r, x in g.groupby("run", sort=False)])
        assert len(branches) == LUO_BRANCHES
        held = {b.name: schedule_curve(b.name, np.arange(b.final_step + 1), _luo_schedule(b.name, b.final_step),
                                       stable) for b in branches}
        out[size] = (stable, branches, held)
    return out


def test_prior_error_scale_is_the_one_measured_on_public_logs(luo, reference_data):
    """PRIOR_RMS is the RMS error of the default predictor fitted on one branch (every branch of the
    three models predicted from each other one: tests/data/schedules_luo2025/one_branch_errors.csv);
    its 0.9 interval, given each schedule at every step, covers >= 80% (issue 42's acceptance)."""
    saved = pd.read_csv(reference_data("schedules_luo2025/one_branch_errors.csv"))
    saved = saved[saved["method"] == DEFAULT_METHOD].set_index(["model", "fit_on", "held"])["rel_error"]
    got, covered = {}, []
    for size, (stable, branches, held) in luo.items():
        for one in branches:
            pred = fit_predictor(stable, [one])
            for b in branches:
                if b is not one:
                    got[size, one.name, b.name] = pred.model.predict(b) / b.final_loss - 1
                    p, lo, hi = pred.predict(held[b.name])
                    covered.append(lo <= b.final_loss <= hi)
    got = pd.Series(got)
    assert len(got) == 3 * LUO_BRANCHES * (LUO_BRANCHES - 1)
    np.testing.assert_allclose(got.sort_index(), saved.reindex(got.index).sort_index(), atol=2e-5)
    assert math.sqrt(float(np.mean(got**2))) == pytest.approx(PRIOR_RMS, abs=5e-5)
    assert np.mean(covered) >= 0.8


def test_public_logs_every_other_branch_covers_the_held_out_one(luo):
    """400M (the largest errors): each branch held out and predicted from its schedule at every step,
    the predictor chosen by leave-one-out on the four others: the 0.9 intervals cover >= 80%."""
    stable, branches, held = luo["400M"]
    errors, covered = [], []
    for b in branches:
        p, lo, hi = fit_predictor(stable, [o for o in branches if o is not b]).predict(held[b.name])
        errors.append(abs(p / b.final_loss - 1))
        covered.append(lo <= b.final_loss <= hi)
    assert np.mean(covered) >= 0.8 and np.mean(errors) < 0.004
