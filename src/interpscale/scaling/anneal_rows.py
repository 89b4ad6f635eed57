"""Annealed rows of a results table that were not trained: predicted from each run's stable
checkpoints and the branches it did anneal (``[train] anneal = "every:K" | "ends"``, issue 36,
App. I; docs/anneal.md).

A run's stable rows (``annealed`` false) are its stable curve at constant LR; each annealed row
with ``anneal_from = r`` is a branch that decays linearly to zero from step r (App. I's WSD
branch, ``orchestration.spec.lr_at``). How the predictor (``scaling.curve``) is chosen per family and
estimator, and the rows it adds: docs/anneal.md.
"""

from __future__ import annotations

import logging
import math
from typing import Sequence

import numpy as np
import pandas as pd

from interpscale.paper import INTERP_METRICS
from interpscale.scaling.curve import (
    CURVE_METHODS,
    Curve,
    choose_method,
    error_interval,
    fit_curve_model,
    leave_one_out,
    prior_half_width,
)

from ._base import DEFAULT_LEVEL, from_options

log = logging.getLogger(__name__)

GROUP = ("family", "estimator")


def _branch_lr(start: int, end: int) -> np.ndarray:
    """App. I branch: peak LR (1) to ``start``, then linear decay to zero over ``end - start`` steps."""
    length = max(end - start, 1)
    decay = (end - np.arange(start, end, dtype=float)) / length
    return np.concatenate([np.ones(start), decay])


def _run_curves(rows: pd.DataFrame, loss: str) -> tuple[Curve, list[Curve]] | None:
    """A run's stable curve and its branches (None when it has no stable rows or no ``anneal_from``)."""
    if "anneal_from" not in rows.columns:
        return None
    ann = rows["annealed"].astype(bool)
    stable = rows[~ann].dropna(subset=[loss]).sort_values("step")
    stable = stable[stable["step"] > 0]
    branches = rows[ann & rows["anneal_from"].notna()].dropna(subset=[loss])
    if len(stable) < 2:
        return None
    end = int(max(stable["step"].max(), branches["step"].max() if len(branches) else 0))
    st = Curve("stable", np.ones(end + 1), stable["step"].to_numpy(int), stable[loss].to_numpy(float))
    curves = [Curve(f"anneal@{int(b.anneal_from)}", _branch_lr(int(b.anneal_from), int(b.step)),
                    np.array([int(b.step)]), np.array([float(getattr(b, loss))]))
              for b in branches.sort_values("anneal_from").itertuples(index=False)]
    return st, curves


def _groups(results: pd.DataFrame):
    """(family, estimator) key tuples and their rows (a list of keys groups by tuples)."""
    return results.groupby([c for c in GROUP if c in results.columns], sort=True, dropna=False)


def _runs(df: pd.DataFrame, loss: str):
    for run_id, rows in df.groupby("run_id", sort=True):
        got = _run_curves(rows, loss)
        if got is not None:
            yield run_id, rows, got


def loo_errors(results: pd.DataFrame, *, loss: str = "loss", methods: Sequence[str] | None = None) -> pd.DataFrame:
    """Leave-one-branch-out errors of every method for every run with >= 2 annealed branches:
    columns family, estimator, run_id, method, branch, step, predicted, actual, rel_error."""
    out = []
    for key, df in _groups(results):
        for run_id, _, (stable, branches) in _runs(df, loss):
            for r in leave_one_out(stable, branches, methods or CURVE_METHODS):
                out.append({**dict(zip(GROUP, key)), "run_id": run_id, **r})
    return pd.DataFrame(out, columns=[*GROUP, "run_id", "method", "branch", "step", "predicted", "actual",
                                      "rel_error"])


def loo_table(errors: pd.DataFrame) -> pd.DataFrame:
    """Per family and method: branches left out, mean and max |relative error| (%), mean signed (%)."""
    e = errors.assign(abs_pct=errors["rel_error"].abs() * 100, pct=errors["rel_error"] * 100)
    return (e.groupby(["family", "method"]).agg(n=("abs_pct", "size"), mean_abs_pct=("abs_pct", "mean"),
                                                max_abs_pct=("abs_pct", "max"), mean_pct=("pct", "mean"))
            .reset_index())


def _predicted_row(row: pd.Series, step: int, pred: tuple[float, float, float], method: str, loss: str) -> dict:
    """A stable row moved to the end of its (untrained) branch, with the predicted loss."""
    out = row.to_dict()
    scale = step / float(row["step"])
    for col in ("tokens", "flops"):
        if col in out and pd.notna(out[col]):
            out[col] = float(out[col]) * scale
    if "bpb" in out and pd.notna(out.get("bpb")):
        out["bpb"] = float(out["bpb"]) * pred[0] / float(row[loss])  # same bytes per token
    for col in ("loss_se", "checkpoint_sig", *INTERP_METRICS):  # measured on a checkpoint that was never trained
        if col in out:
            out[col] = math.nan
    out.update({"step": step, "annealed": True, "anneal_from": int(row["step"]), loss: pred[0],
                "loss_lo": pred[1], "loss_hi": pred[2], "predicted": True, "anneal_method": method,
                "checkpoint": f"predicted:anneal{int(row['step']):07d}_step{step:07d}"})
    return out


def predict_anneals(results: pd.DataFrame, *, loss: str = "loss", level: float = DEFAULT_LEVEL,
                    methods: Sequence[str] | None = None, options=None) -> pd.DataFrame:
    """Predicted annealed rows for every stable checkpoint without an anneal branch, in runs that
    annealed >= 2 others. The method per (family, estimator) is the one with the smallest pooled
    leave-one-branch-out error; the interval is ``pred·(1 ± q)`` with q from those errors, never
    narrower than the prior's when they are too few for ``level`` (:func:`scaling.curve.error_interval`).
    Returns only the new rows (may be empty). ``options`` (a ``FitOptions``): its ``level`` (the loose
    ``level`` kept for one release)."""
    level = from_options(options, {"level": level}, predict_anneals)["level"]
    rows = []
    for key, df in _groups(results):
        sel = loo_errors(df, loss=loss, methods=methods)  # this (family, estimator)'s pooled errors
        if not len(sel):
            continue
        method, _ = choose_method(sel.to_dict("records"))
        q, how = error_interval(sel.loc[sel["method"] == method, "rel_error"], level, floor=prior_half_width(level))
        log.info("%s: anneal predictor %s, interval ±%.2f%% (%s)", "/".join(map(str, key)), method, 100 * q, how)
        for _, run_rows, (stable, branches) in _runs(df, loss):
            if len(branches) < 2:
                continue
            model = fit_curve_model(method, stable, branches)
            done = [int(b.name.split("@")[1]) for b in branches]  # their branch points
            # branch length over branch point of the trained branches (0.25 for App. I's 80/20 branches)
            ratio = float(np.median([(b.final_step - r) / r for b, r in zip(branches, done)]))
            todo = run_rows[~run_rows["annealed"].astype(bool) & ~run_rows["step"].isin(done)
                            & (run_rows["step"] > 0)].dropna(subset=[loss])
            for _, row in todo.iterrows():
                r = int(row["step"])
                end = r + max(1, int(ratio * r + 0.5))
                p = model.predict(Curve("todo", _branch_lr(r, end), np.array([end]), np.array([math.nan])))
                rows.append(_predicted_row(row, end, (p, p * (1 - q), p * (1 + q)), method, loss))
    return pd.DataFrame(rows)


def with_predicted_anneals(results: pd.DataFrame, **kw) -> pd.DataFrame:
    """``results`` (``predicted = False``) plus its predicted annealed rows (:func:`predict_anneals`)."""
    base = results.assign(predicted=False) if "predicted" not in results.columns else results
    new = predict_anneals(base, **kw)
    return pd.concat([base, new], ignore_index=True) if len(new) else base
