"""An IsoFLOP sweep that brackets its optima (issue 29.1; docs/data.md, "Sweeping a new
corpus"): train, fit each slice's parabola, add the next size beyond an edge minimum, repeat
up to a stated limit; below the smallest size it goes on with generated shapes (fewer layers,
narrower widths) down to the smallest that trains.  Each slice's first grid centres on the prior
optimal size

    N*(C) = N_0 · (C / C_0)^α_P                                                    (1)

(:func:`prior_params`); ``slice_minimum`` (the IsoFLOP fit's Eq. 25 parabola, injected by
the caller since scaling sits above this layer) judges each slice after a round.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from interpscale import paper
from interpscale._atomic import atomic_write_text
from interpscale.errors import FailedWork, UserError
from interpscale.models import SIZES
from interpscale.orchestration.launch import Sweep
from interpscale.orchestration.outcome import SweepIncomplete
from interpscale.orchestration.config import Preset
from interpscale.orchestration.planner import Plan, PlanOptions, plan, slice_targets, window_centre

log = logging.getLogger(__name__)

DEFAULT_ALPHA_P = 0.5  # Chinchilla's N* ∝ C^0.5, for families outside Table 6
# (name, n_layers, d_model, n_heads): parameters grow ~2.25x per step (from L1d4 up); its first,
# L1d2, is the smallest shape that trains: one layer, one head of width 2 (RoPE needs an even width)
LADDER: tuple[tuple[str, int, int, int], ...] = tuple(
    (f"L{nl}d{d}", nl, d, h) for nl, d, h in (
        (1, 2, 1), (1, 4, 1), (1, 6, 1), (1, 8, 1), (1, 12, 1), (1, 16, 2), (1, 24, 2), (1, 32, 2), (2, 48, 3),
        (2, 64, 4), (3, 96, 6), (4, 128, 8), (6, 192, 12), (8, 256, 16), (10, 384, 24), (12, 512, 32),
        (16, 768, 48), (20, 1024, 64)))


def alpha_p(family: str) -> float:
    """α_P of Table 6 for ``family`` (paper values), else :data:`DEFAULT_ALPHA_P`."""
    return float(paper.TABLE6.get(family, {}).get("alpha_P", DEFAULT_ALPHA_P))


def prior_params(table: pd.DataFrame, c: float, c0: float, family: str, tokens_per_param: float) -> float:
    """Eq. (1): N*(C) from the candidate table at the reference slice ``c0`` (columns P and
    tokens_per_param of the planner's rows, one per ladder size)."""
    t = table.sort_values("P")
    logp, logr = t["P"].map(math.log).to_numpy(), t["tokens_per_param"].map(math.log).to_numpy()
    target = math.log(tokens_per_param)
    # D/N falls as N grows: interpolate log N at log(D/N) = target (clamped to the ladder)
    n0 = logp[0] if target >= logr[0] else logp[-1]
    for i in range(len(t) - 1):
        if logr[i] >= target >= logr[i + 1]:
            w = (logr[i] - target) / (logr[i] - logr[i + 1]) if logr[i] != logr[i + 1] else 0.0
            n0 = logp[i] + w * (logp[i + 1] - logp[i])
            break
    return math.exp(n0) * (c / c0) ** alpha_p(family)


@dataclass
class SliceState:
    """One (family, slice) of the adaptive sweep."""

    family: str
    slice_flops: float
    ladder: list[str]  # feasible-or-not ladder names, smallest first
    sizes: list[str]  # trained / planned, a contiguous stretch of the ladder
    prior_params: float
    added: int = 0
    seeds: int = 1  # runs per size: the first seed and its replicates (seeds 1, 2, ...)
    bracketed: bool = False
    done: bool = False
    P_star: float = math.nan
    curvature: float = math.nan  # Eq. 25's c of loss on ln P, weighted by each size's loss uncertainty
    curvature_se: float = math.nan
    reason: str = ""
    remedy: str = ""  # what would bracket it, when it is not
    history: list[str] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict, repr=False)  # planner status per ladder size
    params: dict[str, float] = field(default_factory=dict, repr=False)  # P per ladder size
    below_floor: bool = False  # stopped: its optimum lies below the smallest trainable shape

    @property
    def name(self) -> str:
        return f"{self.family} C={self.slice_flops:.3g}"


@dataclass
class Budget:
    """The training FLOPs the adaptive sweep may spend past its size limit (``limit``) and what
    its runs have cost so far (``used``)."""

    limit: float
    used: float = 0.0

    def allows(self, flops: float) -> bool:
        return self.used + flops <= self.limit * (1 + 1e-9)


@dataclass
class AdaptiveResult:
    """What the adaptive sweep did: the sweep, each slice's state, the rounds run."""

    sweep: Any
    slices: list[SliceState]
    rounds: int
    budget: Budget | None = None

    @property
    def all_bracketed(self) -> bool:
        return all(s.bracketed for s in self.slices)

    def summary(self) -> str:
        lines = [f"adaptive sweep: {sum(s.bracketed for s in self.slices)} of {len(self.slices)} slices bracket "
                 f"their optimum after {self.rounds} round(s)"
                 + (f", {self.budget.used:.3g} of {self.budget.limit:.3g} budgeted FLOPs" if self.budget else "")]
        for s in self.slices:
            what = (f"P*={s.P_star:.3g}, curvature {s.curvature:.3g} ± {s.curvature_se:.2g}"
                    + (" (noise unknown: one seed, three sizes)" if not math.isfinite(s.curvature_se) else "")
                    if s.bracketed
                    else f"not bracketed: {s.reason}; would bracket it: {s.remedy}")
            seeds = f" x {s.seeds} seeds" if s.seeds > 1 else ""
            lines.append(f"  {s.name}: sizes {', '.join(s.sizes)}{seeds} (+{s.added}); {what}")
            lines += [f"    {h}" for h in s.history if "past the limit" in h]
        return "\n".join(lines)

    def check(self) -> None:
        """Raise ``FailedWork`` (exit 1) naming every slice not bracketed and what would bracket
        it; the caller prints ``summary()`` first."""
        if bad := [s for s in self.slices if not s.bracketed]:
            raise FailedWork(f"adaptive sweep: {len(bad)} of {len(self.slices)} slices not bracketed: "
                             + "; ".join(f"{s.name}: {s.reason} (would bracket it: {s.remedy})" for s in bad))

    def to_dict(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "all_bracketed": self.all_bracketed,
                "budget": asdict(self.budget) if self.budget else None, "slices": [asdict(s) for s in self.slices]}


def _plan(preset, family: str, c: float, sizes: list[str], ladder: dict, strict: bool, priced: bool = False):
    # the rate only prices runtime, which choosing sizes does not use: no CPU timing unless ``priced``
    # (a rate no run is slow at, so the planner's more-than-a-year check never fires on it)
    tree = Preset.load(preset, families=[family], slices={family: [c]}, sizes=sizes, size_presets=ladder,
                       max_sizes_per_slice=len(sizes) + 1)
    return plan(tree, PlanOptions(flops_per_s=None if priced else 1e30, strict=strict, all_sizes=True))


def _first_states(preset, families: Sequence[str] | None, initial: int,
                  tokens_per_param: float | None) -> tuple[Any, dict, list[SliceState]]:
    """(the preset's checked tree — ``Preset.load``, which every later plan reuses
    — the ladder's ``size_presets`` unless it names sizes, each slice's first state: the
    ``initial`` feasible sizes around the prior N*); the prior's D/N is ``tokens_per_param``,
    else the planner's centre of ``[plan] tokens_per_param``."""
    tree = Preset.load(preset)
    p = tree.plan
    fams = list(families or p.families or [])
    if not fams or p.slices is None:
        raise UserError(f"{tree.source}: an adaptive sweep needs [plan] families and slices")
    try:
        per = {f: sorted(cs) for f, cs in slice_targets(fams, p.slices).items()}
    except ValueError as exc:
        raise UserError(f"{tree.source}: [plan] slices: {exc}") from exc
    ladder = {} if p.sizes else {  # LADDER as [size_presets] tables on the nano base
        n: {"base": "nano", "n_layers": nl, "d_model": d, "n_heads": h} for n, nl, d, h in LADDER}
    names = list(p.sizes) or list(ladder)
    if tokens_per_param is None:
        tokens_per_param = window_centre(tuple(p.tokens_per_param) or (0.0, math.inf))
    states = []
    for family, cs in per.items():
        ref = _plan(tree, family, cs[0], names, ladder, strict=False).table
        below = [n for n in shapes_below(ref, names) if _builds(tree, family, cs[0], n, ladder)]
        tables = {c: _plan(tree, family, c, names + below, ladder, strict=False).table for c in cs}
        ref = ref.query("steps >= 1")
        for c in cs:
            t = tables[c].sort_values("P").reset_index(drop=True)
            t = t[~t["size"].isin(below) | (t["P"] < ref["P"].min())].reset_index(drop=True)
            prior = prior_params(ref, c, cs[0], family, float(tokens_per_param))
            ok = t.index[(t["status"] == "ok") & t["size"].isin(names)].tolist()  # the first grid: the preset's
            if not ok:
                raise UserError(f"{family}: no size of {names} fits slice C={c:.3g}")
            k = min(range(len(ok)), key=lambda j: abs(math.log(t.at[ok[j], "P"] / prior)))  # nearest N*
            lo = max(0, min(k - (initial - 1) // 2, len(ok) - initial))
            chosen = [t.at[i, "size"] for i in ok[lo: lo + initial]]
            st = SliceState(family, c, list(t["size"]), chosen, prior, status=dict(zip(t["size"], t["status"])),
                            params=dict(zip(t["size"], t["P"].astype(float))))
            st.history.append(f"round 0: {', '.join(chosen)} around N*={prior:.3g}")
            states.append(st)
    return tree, ladder, states


def shapes_below(table: pd.DataFrame, names: Sequence[str]) -> list[str]:
    """The generated :data:`LADDER` shapes below the smallest of ``names`` (by ``P`` in the
    planner's ``table`` of them): no more layers and no wider than it, down to ``L1d2``, the
    smallest that trains; the caller keeps those whose own ``P`` is smaller."""
    smallest = SIZES[str(table.sort_values("P")["size"].iloc[0])]  # a [size_presets] name: defined by the plan
    return [n for n, nl, d, _ in LADDER if n not in names and nl <= smallest.n_layers and d <= smallest.d_model
            and (nl, d) != (smallest.n_layers, smallest.d_model)]


def _builds(tree, family: str, c: float, name: str, ladder: dict) -> bool:
    """Whether ``family`` builds and prices at the generated shape ``name`` (a plugin's model
    may refuse a shape the built-in ones take): those it refuses are left out of the ladder."""
    try:
        _plan(tree, family, c, [name], ladder, strict=False)
    except (ValueError, UserError, FailedWork) as exc:
        log.info("adaptive sweep: %s at %s left out of the ladder: %s", family, name, exc)
        return False
    return True


@dataclass(frozen=True)
class Limits:
    """How far the adaptive sweep goes for one slice: ``max_added`` sizes (past it only in the
    trend's direction, and only while the budget allows), ``max_seeds`` runs per size, and
    ``z``: a curvature or trend counts when it exceeds ``z`` standard errors."""

    max_added: int = 3
    max_seeds: int = 2
    z: float = 2.0


def _final_rows(df: pd.DataFrame, run_ids: Sequence[str]) -> pd.DataFrame:
    """One row per run of ``run_ids``: its last annealed evaluation (else its last)."""
    g = df[df["run_id"].isin(list(run_ids))] if len(df) else df
    if "annealed" in g.columns and g["annealed"].astype(bool).any():
        g = g[g["annealed"].astype(bool)]
    return g.sort_values("step").groupby("run_id").tail(1).sort_values("params")


def size_table(rows: pd.DataFrame, noise: float = math.nan) -> pd.DataFrame:
    """Per size (``params``): the mean final loss over its seeds, their number ``n``, and the
    standard error ``se`` of that mean: the larger of the evaluation's own (``loss_se`` where an
    estimator reports one; 0 counts as not reported) and the run-to-run spread — the seeds'
    within-size variance pooled over the slice's sizes, else ``noise`` (the family's, from
    :func:`run_noise`) — NaN when none is known."""
    groups = [(float(p), g["loss"].to_numpy(float),
               g["loss_se"].to_numpy(float) if "loss_se" in g.columns else np.full(len(g), np.nan))
              for p, g in rows.groupby("params")]
    dof = sum(len(y) - 1 for _, y, _ in groups)
    spread = sum(float(((y - y.mean()) ** 2).sum()) for _, y, _ in groups) / dof if dof else noise ** 2
    out = []
    for p, y, se in groups:
        se = se[np.isfinite(se) & (se > 0)]
        se_eval = math.sqrt(float(np.mean(se ** 2)) / len(y)) if len(se) else math.nan
        se_run = math.sqrt(spread / len(y))
        both = [v for v in (se_eval, se_run) if math.isfinite(v)]
        out.append({"params": p, "loss": float(y.mean()), "n": len(y), "se": max(both) if both else math.nan})
    return pd.DataFrame(out, columns=["params", "loss", "n", "se"]).sort_values("params").reset_index(drop=True)


def run_noise(slices: Sequence[pd.DataFrame]) -> float:
    """The run-to-run standard deviation of a final loss, pooled over a family's slices: the
    seeds' spread around their size's mean, and the scatter of the size means around each
    slice's least-squares parabola in ln P where a slice has more than three sizes (a poor
    parabola makes it larger, never smaller); NaN with no degree of freedom."""
    ss = dof = 0.0
    for rows in slices:
        means = rows.groupby("params")["loss"].agg(["mean", "count"]).reset_index()
        dev = rows["loss"].to_numpy(float) - rows["params"].map(means.set_index("params")["mean"]).to_numpy(float)
        ss, dof = ss + float(dev @ dev), dof + len(rows) - len(means)
        if len(means) > 3:
            u = np.log(means["params"].to_numpy(float))
            X = np.column_stack([np.ones_like(u), u - u.mean(), (u - u.mean()) ** 2])
            n, y = means["count"].to_numpy(float), means["mean"].to_numpy(float)
            beta = np.linalg.lstsq(X * np.sqrt(n)[:, None], y * np.sqrt(n), rcond=None)[0]
            ss, dof = ss + float(n @ (y - X @ beta) ** 2), dof + len(means) - 3
    return math.sqrt(ss / dof) if dof else math.nan


def _wls(X: np.ndarray, y: np.ndarray, se: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares (weights 1/se²; equal weights when no se is known): the
    coefficients and their standard errors, inflated by the reduced χ² when it exceeds 1 (the
    scatter is larger than the stated uncertainties); NaN errors with no spare degree of freedom
    and no known se."""
    known = np.isfinite(se) & (se > 0)
    w = 1.0 / np.where(known, se, np.nanmedian(se[known]) if known.any() else 1.0) ** 2
    A = X.T @ (w[:, None] * X)
    beta = np.linalg.lstsq(A, X.T @ (w * y), rcond=None)[0]
    cov = np.linalg.pinv(A)
    dof = len(y) - X.shape[1]
    s2 = float(w @ (y - X @ beta) ** 2) / dof if dof > 0 else math.nan
    if known.any():  # the stated se set the scale; a larger scatter widens it
        cov = cov * max(1.0, s2) if dof > 0 else cov
    else:
        cov = cov * s2  # NaN with no spare degree of freedom: nothing says how noisy the losses are
    return beta, np.sqrt(np.clip(np.diag(cov), 0, None))


def noise_fit(params: np.ndarray, loss: np.ndarray, se: np.ndarray) -> dict[str, float]:
    """The slice's Eq. 25 parabola L = a + b·u + c·u² (u = ln P − mean) and its trend line,
    each weighted by the sizes' loss uncertainty: ``c``, ``c_se``, ``b`` (the line's slope),
    ``b_se``."""
    x = np.log(np.asarray(params, float))
    u, y, se = x - x.mean(), np.asarray(loss, float), np.asarray(se, float)
    quad, quad_se = _wls(np.column_stack([np.ones_like(u), u, u ** 2]), y, se)
    line, line_se = _wls(np.column_stack([np.ones_like(u), u]), y, se)
    return {"c": float(quad[2]), "c_se": float(quad_se[2]), "b": float(line[1]), "b_se": float(line_se[1])}


def _next(s: SliceState, side: str) -> str | None:
    """The ladder size next beyond the slice's smallest (``side="smaller"``) or largest size."""
    at = s.ladder.index(s.sizes[0 if side == "smaller" else -1]) + (-1 if side == "smaller" else 1)
    return s.ladder[at] if 0 <= at < len(s.ladder) else None


def _stop(s: SliceState, reason: str, remedy: str) -> None:
    s.done, s.reason, s.remedy = True, reason, remedy
    s.history.append(f"stopped: {reason}")


def _blocked(s: SliceState, side: str) -> tuple[str, str] | None:
    """(reason, remedy) when the ladder has no usable ``side`` size, else None."""
    name = _next(s, side)
    edge = s.sizes[0 if side == "smaller" else -1]
    if name is None and side == "smaller":  # the generated shapes end at the smallest that trains
        return (f"its optimum lies below {edge}, the smallest trainable shape", floor_budget(s, [s]))
    if name is None:
        return (f"the size ladder has no {side} size than {edge}",
                f"a wider grid: a {side} size than {edge} ([size_presets] and [plan] sizes)")
    if s.status[name] != "ok":
        fix = ("more steps per run (a smaller [plan] batch_tokens or a larger slice)" if side == "larger"
               else f"a wider grid: a {side} size between the ladder's and {edge}")
        return f"the next {side} size {name} is {s.status[name]}", fix
    return None


def floor_budget(s: SliceState, states: Sequence[SliceState]) -> str:
    """What brackets slice ``s``, whose optimum lies below its smallest trainable shape s1: the
    slice C' at which Eq. (1) puts N* at the next shape s2 (the middle of the three smallest),

        C' = C_a · (P(s2) / P*_a)^(1/α_P)

    through the bracketed slice (C_a, P*_a) of ``states`` of the same family nearest in log C,
    and never below the bound N*(C) < P(s1) sets, C · (P(s2) / P(s1))^(1/α_P)."""
    ok = [n for n in s.ladder if s.status.get(n) == "ok" and n in s.params]
    if len(ok) < 2 or s.sizes[0] != ok[0]:
        return "a larger slice ([plan] slices)"
    a, p1, p2 = alpha_p(s.family), s.params[ok[0]], s.params[ok[1]]
    bound = s.slice_flops * (p2 / p1) ** (1 / a)
    anchors = [t for t in states if t.family == s.family and t.bracketed and math.isfinite(t.P_star) and t.P_star > 0]
    if not anchors:
        return f"a slice of at least {bound:.2g} FLOPs ([plan] slices; Eq. 1 with alpha_P {a:g} puts N* at {ok[1]})"
    t = min(anchors, key=lambda x: abs(math.log(x.slice_flops / s.slice_flops)))
    at = t.slice_flops * (p2 / t.P_star) ** (1 / a)
    return (f"a slice of {'about' if at > bound else 'at least'} {max(at, bound):.2g} FLOPs ([plan] slices; Eq. 1 "
            f"with alpha_P {a:g} through {t.name}'s P*={t.P_star:.3g} puts N* at {ok[1]})")


def _extend(s: SliceState, side: str, why: str, limits: Limits, budget: Budget) -> None:
    """Add the next ladder size on ``side`` (the trend's direction); past ``max_added`` only
    while the budget allows, saying so."""
    if (block := _blocked(s, side)) is not None:
        s.below_floor = side == "smaller" and _next(s, side) is None
        return _stop(s, f"{why}; {block[0]}", block[1])
    cost = s.seeds * s.slice_flops
    if s.added >= limits.max_added:
        if not budget.allows(cost):
            return _stop(s, f"{why}; the limit of {limits.max_added} added sizes is reached and the budget "
                            f"({budget.used:.3g} of {budget.limit:.3g} FLOPs used) does not allow another size",
                         f"a larger budget (at least {(budget.used + cost) / budget.limit:.3g}x the current one) "
                         f"or --max-added {s.added + 1}")
        note = (f"past the limit of {limits.max_added} added sizes: the trend points {side} and the budget allows "
                f"it ({budget.used + cost:.3g} of {budget.limit:.3g} FLOPs)")
        log.warning("adaptive sweep, %s: %s", s.name, note)
        s.history.append(note)
    name = _next(s, side)
    s.sizes = [name] + s.sizes if side == "smaller" else s.sizes + [name]
    s.added += 1
    budget.used += cost
    s.history.append(f"{why}: added {name}")


def _settle_noise(s: SliceState, why: str, limits: Limits, budget: Budget) -> None:
    """The slice's curvature is not significant and its trend points nowhere: widen the grid
    on both sides (within ``max_added``), else replicate every size with another seed, else
    stop naming what would settle it."""
    sides = ("smaller", "larger")
    cost = 2 * s.seeds * s.slice_flops
    if s.added + 2 <= limits.max_added and all(_blocked(s, d) is None for d in sides) and budget.allows(cost):
        for d in sides:
            _extend(s, d, f"{why}: a wider grid", limits, budget)
        return
    cost = len(s.sizes) * s.slice_flops
    if s.seeds < limits.max_seeds and budget.allows(cost):
        s.seeds += 1
        budget.used += cost
        s.history.append(f"{why}: a replicate of every size (seed {s.seeds - 1})")
        return
    more = ("another replicate seed of every size (--max-seeds {})".format(s.seeds + 1) if s.seeds >= limits.max_seeds
            else f"a larger budget for a replicate ({budget.used + cost:.3g} FLOPs)")
    _stop(s, why, f"more steps per run (a larger slice, or more [train] eval_batches) or {more}")


def _judge(s: SliceState, df: pd.DataFrame, run_ids: Sequence[str], slice_minimum: Callable, limits: Limits,
           budget: Budget, noise: float = math.nan) -> None:
    """Settle ``s`` (bracketed, or why not and what would) or add what the next round trains;
    ``noise``: the family's run-to-run loss spread (:func:`run_noise`)."""
    rows = _final_rows(df, run_ids)
    if len(rows) < len(run_ids):
        return _stop(s, f"{len(run_ids) - len(rows)} of its runs produced no result",
                     "launching again (finished runs are kept), after fixing what `sweep status` shows")
    tab = size_table(rows, noise)
    P, L = tab["params"].to_numpy(float), tab["loss"].to_numpy(float)
    res = slice_minimum(P, L)
    fit = noise_fit(P, L, tab["se"].to_numpy(float))
    s.P_star, s.curvature, s.curvature_se = float(res["P_star"]), fit["c"], fit["c_se"]
    curved = fit["c"] > limits.z * fit["c_se"] if math.isfinite(fit["c_se"]) else fit["c"] > 0
    if res["interior"] and curved:
        s.bracketed, s.done, s.reason, s.remedy = True, True, "", ""
        return None
    i = int(L.argmin())
    if i in (0, len(L) - 1):  # the lowest loss at an edge: the trend points beyond it
        return _extend(s, "smaller" if i == 0 else "larger", f"lowest loss at the {'smallest' if i == 0 else 'largest'}"
                       f" size", limits, budget)
    if abs(fit["b"]) > limits.z * fit["b_se"]:  # a significant trend: towards lower loss
        return _extend(s, "larger" if fit["b"] < 0 else "smaller", f"loss trends {'down' if fit['b'] < 0 else 'up'} "
                       f"with size ({fit['b']:.3g} ± {fit['b_se']:.2g} per e-fold)", limits, budget)
    what = res["reason"] or "vertex inside"
    return _settle_noise(s, f"{what}; curvature {fit['c']:.3g} ± {fit['c_se']:.2g} is not significant "
                            f"(z = {limits.z:g})", limits, budget)


def _slice_runs(preset, s: SliceState, ladder: dict) -> list:
    """The slice's runs: each size planned, and ``s.seeds - 1`` replicates of it (training
    seed + k; the data and its validation split stay those of the first seed: ``split_seed``)."""
    runs = _plan(preset, s.family, s.slice_flops, s.sizes, ladder, True).runs
    return runs + [dataclasses.replace(r, seed=r.seed + k, data={**r.data, "split_seed": r.seed})
                   for k in range(1, s.seeds) for r in runs]


def _judge_round(states: list[SliceState], df: pd.DataFrame, per: dict, slice_minimum: Callable, limits: Limits,
                 budget: Budget) -> None:
    """Judge every slice not stopped — a bracketed one again, with the family's noise as now
    known (it reopens when its curvature is no longer significant) — then, when everything is
    settled but a family's noise is still unknown (one seed, three sizes everywhere), replicate
    the sizes of its smallest slice once to measure it."""
    rows = {s.name: _final_rows(df, [r.run_id for r in per[s.name]]) for s in states}
    noise = {f: run_noise([rows[s.name] for s in states if s.family == f]) for f in {s.family for s in states}}
    for s in states:
        if not s.done or s.bracketed:
            was, s.done, s.bracketed, at = s.bracketed, False, False, len(s.history)
            _judge(s, df, [r.run_id for r in per[s.name]], slice_minimum, limits, budget, noise[s.family])
            if was and not s.bracketed:  # the note goes before what the judge did about it
                s.history.insert(at, f"reopened: the family's run noise is {noise[s.family]:.2g}")
    if any(not s.done for s in states):
        return
    for f in sorted(noise):
        unknown = [s for s in states if s.family == f and s.bracketed and not math.isfinite(s.curvature_se)]
        if math.isnan(noise[f]) and unknown and limits.max_seeds > 1:
            s = min(unknown, key=lambda x: x.slice_flops)
            if budget.allows(cost := len(s.sizes) * s.slice_flops):
                s.seeds, s.done, budget.used = s.seeds + 1, False, budget.used + cost
                s.history.append("the run noise is unknown: a replicate of every size measures it")


def adaptive_sweep(preset: str | os.PathLike, out_dir: str | os.PathLike, *, slice_minimum: Callable,
                   families: Sequence[str] | None = None, initial: int = 3, max_added: int = 3,
                   tokens_per_param: float | None = None, extend: bool = False, budget: float = 4.0,
                   max_seeds: int = 2, z: float = 2.0, **sweep_options: Any) -> AdaptiveResult:
    """Train ``preset``'s slices, adding sizes in each slice's trend direction (past
    ``max_added`` while the sweep's FLOPs stay within ``budget`` times its first grid's),
    widening the grid or replicating sizes (up to ``max_seeds`` seeds) where the curvature is
    not significant at ``z`` standard errors, until each slice brackets its optimum or says
    what would (see the module doc; ``result.check()`` raises when one does not).
    ``slice_minimum(params, loss) -> {P_star, interior, reason, ...}`` judges a slice
    (``interpscale.scaling.isoflop.slice_minimum``); ``sweep_options`` go to
    :meth:`Sweep.from_plan` (executor, max_parallel, ...)."""
    if initial < 3 or max_added < 0 or max_seeds < 1 or budget <= 0 or z <= 0:
        raise UserError(f"initial must be >= 3 (a parabola), max_added >= 0, max_seeds >= 1, budget > 0 and "
                        f"z > 0, got {initial}, {max_added}, {max_seeds}, {budget}, {z}")
    tree, ladder, states = _first_states(preset, families, initial, tokens_per_param)
    limits, bud = Limits(max_added, max_seeds, z), None
    rounds, sweep = 0, None
    while any(not s.done for s in states):
        per = {s.name: _slice_runs(tree, s, ladder) for s in states}
        runs = [r for rs in per.values() for r in rs]
        spent = float(sum(r.flops for r in runs))
        bud = bud or Budget(budget * spent)
        bud.used = spent
        sweep = Sweep.from_plan(Plan(runs=runs, table=pd.DataFrame(), launch=dataclasses.asdict(tree.launch),
                                     config=tree), out_dir, extend=extend or rounds > 0, **sweep_options)
        try:  # runs that fail are judged as producing no result
            sweep.launch()
        except SweepIncomplete as exc:
            log.warning("adaptive sweep: %s", exc)
        rounds += 1
        _judge_round(states, sweep.collect(), per, slice_minimum, limits, bud)
        log.info("adaptive sweep round %d: %d of %d slices settled", rounds, sum(s.done for s in states), len(states))
    for s in states:  # with every bracketed slice known: the slice that would bracket each below the floor
        if s.below_floor and not s.bracketed:
            s.remedy = floor_budget(s, states)
    result = AdaptiveResult(sweep, states, rounds, bud)
    atomic_write_text(Path(out_dir) / "adaptive.json", json.dumps(result.to_dict(), indent=1, default=str))
    return result


def first_grid(preset: str | os.PathLike, *, families: Sequence[str] | None = None, initial: int = 3,
               tokens_per_param: float | None = None):
    """The plan of a preset without ``[plan] sizes``: each slice's ``initial`` ladder sizes
    around the prior N*(C) of Eq. (1) (what ``plan`` shows and the adaptive sweep trains first)."""
    tree, ladder, states = _first_states(preset, families, initial, tokens_per_param)
    plans = [_plan(tree, s.family, s.slice_flops, s.sizes, ladder, True, priced=True) for s in states]
    return Plan(runs=[r for p in plans for r in p.runs], table=pd.concat([p.table for p in plans], ignore_index=True),
                launch=dataclasses.asdict(tree.launch), device=plans[0].device if plans else {}, config=tree)
