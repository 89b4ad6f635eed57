import numpy as np
import pandas as pd
import pytest

from interpscale.scaling import backtest
from interpscale.scaling.backtest import nearest_budget

SLICES5 = (3e18, 6e18, 1e19, 3e19, 1e20)


def test_isoflop_prediction_intervals_cover_held_out_budgets(synth):
    """Issue 17 acceptance: on a known law, 90% prediction intervals of held-out budgets cover
    80-98% of the observed slice optima (rollout and leave-one-out, several seeds)."""
    frames = []
    for seed in range(8):
        df, _ = synth.isoflop_grid(0.528, -0.060, seed=300 + seed, noise=0.004, slices=SLICES5)
        frames.append(backtest(df, methods=("isoflop-powerlaw",), n_boot=200, seed=seed).to_frame())
    t = pd.concat(frames)
    t = t[t.status == "ok"]
    assert len(t) >= 100  # 8 seeds x (2 rollout + 5 loo folds) x (L*, P*), few slices unscored
    cov = t["covered"].mean()
    assert 0.80 <= cov <= 0.98, cov
    # and the errors are small on a law the method is right for
    assert t.loc[t.quantity == "L_star", "rel_error"].abs().max() < 0.01


def test_joint_prediction_intervals_cover_held_out_runs(synth):
    frames = []
    for seed in range(8):  # 128 forecasts: the coverage of 64 moves by 1/64 with the noise draws
        df, _ = synth.chinchilla_grid(seed=400 + seed, noise=0.01)
        frames.append(backtest(df, methods=("joint",), schemes=("rollout",), n_boot=100, seed=seed).to_frame())
    t = pd.concat(frames)
    t = t[(t.status == "ok") & (t.quantity == "loss")]
    assert len(t) == 8 * 2 * 8  # 8 seeds x 2 rollout folds x 8 runs per held-out budget
    assert 0.80 <= t["covered"].mean() <= 0.98, t["covered"].mean()


def test_backtest_table_errors_and_shift(synth):
    df, _ = synth.chinchilla_grid(seed=1, noise=0.01)
    bt = backtest(df, n_boot=30, target_compute=1e22)
    t = bt.to_frame()
    assert set(t["scheme"]) == {"rollout", "loo"} and set(t["method"]) == {"isoflop-powerlaw", "joint", "isoflop-saturating"}  # every registered method
    ok = t[t.status == "ok"]
    np.testing.assert_allclose(ok["error"], ok["predicted"] - ok["observed"])
    assert ((ok["lo"] <= ok["predicted"]) & (ok["predicted"] <= ok["hi"])).all()
    roll = t[t.scheme == "rollout"]
    assert sorted(roll["held_out"].unique()) == [1e20, 6e20]  # after the smallest 3 and 4 budgets
    e = bt.errors()
    assert {"mape", "coverage", "pi_width", "bias"} <= set(e.columns)
    assert (e["mape"] >= 0).all() and e["coverage"].between(0, 1).all()
    sh = bt.forecast_shift()
    assert {"isoflop-powerlaw", "joint"} <= set(sh["method"]) and (sh["max_shift"] >= 0).all()
    # the joint law is the right model here: dropping a budget moves its forecast less
    assert sh.set_index("method").loc["joint", "max_shift"] < sh.set_index("method").loc["isoflop-powerlaw", "max_shift"]
    s = bt.summary()
    assert "MAPE" in s and "coverage" in s and "leaving one budget out" in s
    md = bt.to_markdown()
    assert "| all | joint | loss | rollout |" in md
    d = bt.to_dict()
    assert d["errors"] and d["forecasts"] and d["forecast_shift"]


def test_failed_fits_are_recorded_not_dropped(synth):
    df, _ = synth.isoflop_grid(0.528, -0.060, seed=0, noise=0.003, slices=SLICES5)
    bad = df.copy()
    m = bad.slice_flops == 6e18
    bad.loc[m, "loss"] = 6.0 - bad.loc[m, "loss"]  # a concave slice: cannot be a held-out truth
    t = backtest(bad, methods=("isoflop-powerlaw",), n_boot=20).to_frame()
    held = t[t.held_out == 6e18]
    assert len(held) and held["status"].str.contains("non-convex").all() and not held["covered"].any()
    with pytest.raises(ValueError, match="unknown method"):
        backtest(df, methods=("nope",))
    with pytest.raises(ValueError, match="lacks column"):
        backtest(df.drop(columns="params"))
    with pytest.raises(ValueError, match="min_train"):
        backtest(df, min_train=1)


def test_per_family_and_metric_column(synth):
    frames = []
    for fam, aP in (("ar", 0.528), ("cdlm", 0.632)):
        d, _ = synth.isoflop_grid(aP, -0.06, seed=3, noise=0.002, slices=SLICES5)
        frames.append(d.assign(family=fam, bpb=d["loss"] / np.log(2) / 4.0))
    df = pd.concat(frames, ignore_index=True)
    bt = backtest(df, methods=("isoflop-powerlaw",), loss="bpb", n_boot=20, schemes=("loo",))
    t = bt.to_frame()
    assert set(t["family"]) == {"ar", "cdlm"}
    ok = t[(t.status == "ok") & (t.quantity == "L_star")]
    assert ok["observed"].max() < 1.5  # bits per byte, not nats per token
    only = backtest(df, family="cdlm", methods=("isoflop-powerlaw",), n_boot=0, schemes=("loo",))
    assert set(only.to_frame()["family"]) == {"cdlm"}


def test_nearest_budget():
    out = nearest_budget([5.5e18, 1.2e19, 2.2e21])
    np.testing.assert_array_equal(out, [6e18, 1e19, 3e21])


def test_bounded_metrics_and_cluster_bootstrap(synth):
    df, _ = synth.chinchilla_grid(seed=2, noise=0.01, sizes=6)
    rng = np.random.default_rng(0)
    df["concept_contribution"] = 0.93 - 2e3 * df["flops"] ** -0.2 + rng.normal(0, 0.005, len(df))
    df["run_id"] = np.arange(len(df)) // 2  # two checkpoints per run
    bt = backtest(df, methods=("joint", "bounded"), schemes=("loo",), n_boot=30, groups=df["run_id"])
    t = bt.to_frame()
    m = t[(t.method == "bounded") & (t.status == "ok")]
    assert set(m["quantity"]) == {"concept_contribution"} and len(m) == len(df)
    assert (m["hi"] <= 1.0).all()  # prediction intervals respect the natural bound
    assert m["rel_error"].abs().median() < 0.05
    j = t[(t.method == "joint") & (t.quantity == "loss")]
    assert (j.status == "ok").all() and len(j) == len(df)
