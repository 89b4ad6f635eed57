"""Loss at the end of a learning-rate schedule from a stable (constant-LR) run and some of its
annealed (cooldown) branches (issue 36, App. I; the laws and measurements: docs/anneal.md).

Four predictors of a branch's final loss (``CURVE_METHODS``; docs/anneal.md tables them): two offsets and
two laws (Tissue et al. 2024, Eq. 1; Luo et al. 2025, Eq. 5, warmup area folded into S1) on the one
engine (``engine.Projected``), learning rates relative to the stable run's peak (the fitted constants
are then free of the LR's units). The predictor is chosen by :func:`leave_one_out`, its interval by
:func:`error_interval`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Sequence

import numpy as np
from scipy.signal import lfilter
from scipy.sparse import csr_matrix
from scipy.stats import norm

from interpscale.errors import UserError

from ._base import DEFAULT_LEVEL, from_options
from .engine import Projected, multistart

log = logging.getLogger(__name__)

CURVE_METHODS = ("offset-add", "offset-mul", "lr-annealing", "multi-power")
TISSUE_LAMBDA = 0.999  # Tissue et al. 2024: momentum of the annealing area
MAX_DROPS = 300  # multi-power: LR drops grouped into at most this many blocks per curve
LR_MATCH = 1e-6  # relative tolerance when finding where a schedule leaves the stable run
# With one annealed branch nothing can be left out: the default predictor, and a prior error scale
# measured on public logs (tests/data/schedules_luo2025/one_branch_errors.csv, docs/anneal.md): the
# LR-annealing law fitted on the stable run and one cooldown branch, predicting each other branch's
# final loss (Luo et al. 2025's 25M/100M/400M logs, 3 x 5 x 4 = 60 predictions): RMS relative error
# 0.377%, mean |error| 0.30%, 90th percentile of |error| 0.62% (its normal 0.9 half-width: 0.62%).
DEFAULT_METHOD = "lr-annealing"
PRIOR_RMS = 0.0038


@dataclass(frozen=True)
class Curve:
    """One run's schedule and evaluated losses: ``lr[t]`` is the LR of step ``t`` (t = 0..T-1),
    ``steps``/``loss`` the evaluated points (a step ``s`` is the loss after ``s`` steps)."""

    name: str
    lr: np.ndarray
    steps: np.ndarray
    loss: np.ndarray

    @property
    def final_step(self) -> int:
        return int(self.steps[-1])

    @property
    def final_loss(self) -> float:
        return float(self.loss[-1])


def schedule_from_points(steps, lrs) -> np.ndarray:
    """A per-step LR array from logged (step, lr) pairs: linear between logged steps, the first
    logged LR before the first logged step, the last after the last."""
    steps, lrs = np.asarray(steps, float), np.asarray(lrs, float)
    order = np.argsort(steps, kind="stable")
    steps, lrs = steps[order], lrs[order]
    return np.interp(np.arange(int(steps[-1]) + 1, dtype=float), steps, lrs)


def curve_from_log(name: str, steps, lrs, losses) -> Curve:
    """A :class:`Curve` from one run's per-step log (rows sorted by step, the lr of each logged step)."""
    steps, losses = np.asarray(steps, float), np.asarray(losses, float)
    order = np.argsort(steps, kind="stable")
    return Curve(name, schedule_from_points(steps, lrs), steps[order].astype(int), losses[order])


def _same_lr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a - b) <= LR_MATCH * np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-30)


def _warmup_end(stable: Curve) -> int:
    """The first step at which the stable run's LR reaches its peak (0 when the log holds no warm-up)."""
    lr = np.abs(stable.lr)
    return int(np.argmax(lr >= np.max(lr) * (1 - LR_MATCH)))


def _leave(stable: Curve, curve: Curve) -> tuple[int | None, int]:
    """(j, b): j the first step, at or after the stable run's warm-up end, at which ``curve`` has the
    stable run's LR (None: never), b the first step after j at which it differs (the branch point;
    ``len(curve.lr)`` when it never does). Past its last step the stable run keeps its last LR."""
    n = len(curve.lr)
    a = stable.lr[np.minimum(np.arange(n), len(stable.lr) - 1)]
    same = _same_lr(a, curve.lr)
    ws = _warmup_end(stable)
    on = np.flatnonzero(same[ws:])
    j = ws + int(on[0]) if len(on) else None
    off = np.flatnonzero(~same[j or 0:])
    return j, (j or 0) + int(off[0]) if len(off) else n


def branch_point(stable: Curve, curve: Curve) -> int:
    """The branch point b of ``curve``: ``curve.lr[b]`` is the first LR that differs from the stable
    run's (its loss at step b is the stable run's). Compared from where both follow the stable run
    after its warm-up: a warm-up written at another granularity than the log's, or missing from the
    log, is not a departure (:func:`check_branch` refuses a schedule that leaves during warm-up)."""
    return _leave(stable, curve)[1]


def check_branch(stable: Curve, curve: Curve, rows=None) -> int:
    """The branch point of a schedule to predict (``rows``: the steps it was written at, default every
    step), or ValueError (one line, naming the step) when it contradicts the log: it lowers its LR
    before it has the stable run's LR after warm-up; it has it never, or later than the stable run's
    warm-up end by more than the log's and its own rows' spacing; it never leaves it; or it leaves it
    outside the stable run's logged steps (where the stable loss is not known)."""
    j, b = _leave(stable, curve)
    what, ws, first = f"schedule {curve.name!r}", _warmup_end(stable), int(stable.steps[0])
    pre = curve.lr[: len(curve.lr) if j is None else j]  # its own warm-up, before it joins the stable run
    down = np.flatnonzero(pre[1:] < pre[:-1] * (1 - LR_MATCH))
    if len(down):
        raise UserError(f"{what} lowers its learning rate at step {int(down[0]) + 1}, before it runs at the "
                        f"learning rate of the stable run {stable.name!r} after warm-up: it leaves before "
                        "warm-up ends")
    rows = np.sort(np.asarray(rows if rows is not None else np.arange(len(curve.lr)), float))
    upto = rows[: int(np.searchsorted(rows, j if j is not None else np.inf)) + 1]
    slack = max(float(np.max(np.diff(x))) if len(x) > 1 else 0.0 for x in (stable.steps, upto))
    if j is None or j > max(ws, first) + slack:  # later than the log and its rows can place the warm-up's end
        runs = "never runs" if j is None else f"runs only from step {j}"
        raise UserError(f"{what} {runs} at the learning rate of the stable run {stable.name!r} after its warm-up "
                        f"(which ends by step {max(ws, first)}): its branch point is not in the stable run")
    if b >= len(curve.lr):
        raise UserError(f"{what} follows the stable run {stable.name!r} to its last step {len(curve.lr) - 1}: "
                        "no branch point (its loss is the stable run's)")
    if not first <= b <= stable.final_step:
        raise UserError(f"{what} branches at step {b}, outside the stable run {stable.name!r}'s logged steps "
                        f"({first}-{stable.final_step}): its branch point is not in the stable run")
    return b


def on_stable(stable: Curve, curve: Curve) -> Curve:
    """``curve`` with the stable run's LR before its branch point: the history a branch shares with the
    stable run is the log's, however the schedule wrote it (every step, every N steps, from its branch
    point, with or without warm-up)."""
    b = min(branch_point(stable, curve), len(stable.lr))
    return Curve(curve.name, np.concatenate([stable.lr[:b], curve.lr[b:]]), curve.steps, curve.loss)


# ---------------------------------------------------------------- schedule features

@dataclass
class _Features:
    """Per evaluated point: S1, S2 and the loss; the multi-power drop blocks that end before a
    point as entries (``point`` index, drop size, LR after, area S1(t) − S1(block end))."""

    s1: np.ndarray
    s2: np.ndarray
    loss: np.ndarray
    point: np.ndarray
    drop: np.ndarray
    lr_after: np.ndarray
    area_after: np.ndarray

    @cached_property
    def _sum_to_points(self) -> csr_matrix:  # built once: the fit evaluates the law thousands of times
        return csr_matrix((np.ones(self.point.size), (self.point, np.arange(self.point.size))),
                          shape=(self.s1.size, self.point.size))

    def per_point(self, v: np.ndarray) -> np.ndarray:
        """Sums of entry values v (..., entries) per evaluated point: (..., n_points)."""
        lead = v.shape[:-1]
        return (self._sum_to_points @ v.reshape(math.prod(lead), self.point.size).T).T.reshape(*lead, self.s1.size)


def _curve_features(c: Curve, peak: float) -> _Features:
    """S1 and S2 after s steps, s = 0..T: the LR area ``S1[s] = Σ_{t<s} η_t`` and Tissue et al. 2024's
    annealing area ``S2 = Σ m_i``, ``m_i = λ m_{i-1} + (η_{i-1} − η_i)``, read at the evaluated steps."""
    lr = c.lr / peak
    s1 = np.concatenate([[0.0], np.cumsum(lr)])
    m = lfilter([1.0], [1.0, -TISSUE_LAMBDA], np.concatenate([[0.0], lr[:-1] - lr[1:]]))
    s2 = np.concatenate([[0.0], np.cumsum(m)])
    steps = np.clip(c.steps, 0, len(lr))
    edges = np.unique(np.linspace(0, len(lr) - 1, min(MAX_DROPS, len(lr)) + 1).astype(int))
    start, end = edges[:-1], edges[1:]
    d = np.maximum(lr[start] - lr[end], 0.0)  # Luo et al.: only LR decreases add a loss drop
    keep = d > 0
    end, d = end[keep], d[keep]
    after = s1[steps][:, None] - s1[end + 1][None, :]
    i, k = np.nonzero(after >= 0)
    return _Features(s1[steps], s2[steps], np.asarray(c.loss, float), i, d[k], lr[end][k], after[i, k])


def _stack(feats: Sequence[_Features]) -> _Features:
    offset = np.cumsum([0] + [f.s1.size for f in feats])
    cat = lambda k: np.concatenate([getattr(f, k) + (offset[j] if k == "point" else 0)  # noqa: E731
                                    for j, f in enumerate(feats)])
    return _Features(*map(cat, ("s1", "s2", "loss", "point", "drop", "lr_after", "area_after")))


# ---------------------------------------------------------------- the laws, on the engine

def _power(s1: np.ndarray, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """S1^(-α) (S, n) for a column of α (S, 1), and its derivative in α."""
    s1 = np.maximum(s1, 1e-12)[None, :]
    p = s1**-alpha
    return p, -np.log(s1) * p


class _Law(Projected):
    """A schedule law: ``names`` its nonlinear parameters (``logC`` is reported as ``C``), ``coefs``
    its non-negative linear coefficients, ``starts(features) -> (starts, bounds)``."""

    def theta(self, p: dict) -> np.ndarray:
        return np.array([math.log(p["C"]) if k == "logC" else p[k] for k in self.names])

    def params(self, theta, coef) -> dict:
        p = dict(zip(self.coefs, coef)) | {k: float(v) for k, v in zip(self.names, theta)}
        return p | ({"C": math.exp(p.pop("logC"))} if "logC" in p else {})


class _Tissue(_Law):
    """Tissue et al. Eq. 1, L0 + A·S1^(-α) − C·S2: linear in L0, A, C >= 0 given α."""

    names, coefs, screen = ("alpha",), ("L0", "A", "C"), 3  # α from the 3 best of a grid, within [0.01, 2.6]

    def starts(self, f: _Features):
        return np.linspace(0.05, 2.5, 25)[:, None], ([0.01], [2.6])

    def columns(self, theta, f: _Features):
        p, dp = _power(f.s1, theta[:, :1])
        z = np.zeros_like(p)
        cols = np.stack([np.ones_like(p), p, np.broadcast_to(-f.s2, p.shape)], -1)
        return cols, np.stack([z, dp, z], -1)[..., None]


class _MultiPower(_Law):
    """Luo et al. Eq. 5, L0 + A·S1(t)^(-α) − B·LD(t): linear in L0, A, B >= 0 given θ = (α, log C, β, γ),
    LD = Σ_k (η_{k-1} − η_k)·G(η_k^(-γ) S_k(t)), G(x) = 1 − (Cx + 1)^(-β), S_k(t) = Σ_{τ=k..t} η_τ."""

    names, coefs, screen = ("alpha", "logC", "beta", "gamma"), ("L0", "A", "B"), None

    def starts(self, f: _Features):
        """A small grid of (α, log C, β, γ) and the bounds, C's scaled to the LR area of the data."""
        scale = -math.log(max(float(np.median(f.s1[f.s1 > 0])) if np.any(f.s1 > 0) else 1.0, 1.0))
        bounds = ([0.01, scale - 12, 0.05, 0.0], [3.0, scale + 12, 5.0, 2.0])
        return np.clip([[a, scale + dc, 0.6, 0.6] for a in (0.3, 0.6) for dc in (-2.0, 2.0)], *bounds), bounds

    def columns(self, theta, f: _Features):
        p, dp = _power(f.s1, theta[:, :1])
        logC, beta, gamma = (theta[:, i, None] for i in (1, 2, 3))
        loglr = np.log(np.maximum(f.lr_after, 1e-12))
        cx = np.exp(logC - gamma * loglr) * f.area_after  # C·η_k^(-γ)·S_k(t) of every entry, (S, entries)
        lu = np.log1p(cx)
        up = np.exp(-beta * lu)  # (Cx + 1)^(-β)
        d = f.drop * beta * up * cx / (cx + 1.0)  # drop · β (Cx + 1)^(-β-1) · Cx
        ld, *dld = f.per_point(np.stack([f.drop * (1.0 - up), d, f.drop * up * lu, -d * loglr]))
        dld = np.stack(dld, -1)  # d LD / d(log C, β, γ)
        z = np.zeros_like(p)
        dcols = np.stack([np.zeros(p.shape + (4,)), np.stack([dp, z, z, z], -1),
                          np.concatenate([z[..., None], -dld], -1)], -2)
        return np.stack([np.ones_like(p), p, -ld], -1), dcols


CURVE_LAWS = {"lr-annealing": _Tissue, "multi-power": _MultiPower}


def _fit_law(method: str, f: _Features) -> dict:
    """The law's nonlinear parameters by the engine's multistart (summed squares, within the
    law's bounds), its coefficients by non-negative least squares given them."""
    law = CURVE_LAWS[method]()
    starts, bounds = law.starts(f)
    theta = multistart(law, (f, f.loss), f.loss, starts, loss="ls", bounds=bounds, what=method,
                       screen=law.screen, n_polish=2).theta
    return law.params(theta, [float(c) for c in law.coef(theta, (f, f.loss))[0]])


# ---------------------------------------------------------------- one predictor, fitted

@dataclass
class CurveModel:
    """One method fitted on a stable curve and some branches; ``predict(curve)`` is the loss at
    ``curve``'s last evaluated step."""

    method: str
    stable: Curve
    params: dict = field(default_factory=dict)
    peak: float = 1.0

    def stable_loss_at(self, step: float) -> float:
        return float(np.interp(step, self.stable.steps, self.stable.loss))

    def predict(self, curve: Curve) -> float:
        if self.method in ("offset-add", "offset-mul"):
            base = self.stable_loss_at(branch_point(self.stable, curve))
            return base + self.params["delta"] if self.method == "offset-add" else base * self.params["ratio"]
        law, lr = CURVE_LAWS[self.method](), on_stable(self.stable, curve).lr
        f = _curve_features(Curve(curve.name, lr, curve.steps[-1:], curve.loss[-1:]), self.peak)
        cols = law.columns(law.theta(self.params)[None, :], f)[0][0]
        return float(cols[0] @ np.array([self.params[k] for k in law.coefs]))


N_PARAMS = {"offset-add": 1, "offset-mul": 1,
            **{m: len(law.names) + len(law.coefs) for m, law in CURVE_LAWS.items()}}


def fit_curve_model(method: str, stable: Curve, branches: Sequence[Curve]) -> CurveModel:
    """Fit ``method`` on the stable curve and ``branches`` (each a schedule leaving the stable run)."""
    if method not in CURVE_METHODS:
        raise UserError(f"unknown curve method {method!r}; expected one of {', '.join(CURVE_METHODS)}")
    if not branches:
        raise UserError(f"{method}: needs at least one annealed branch to fit")
    model = CurveModel(method, stable, peak=float(np.max(np.abs(stable.lr))) or 1.0)
    if method in ("offset-add", "offset-mul"):
        base = np.array([model.stable_loss_at(branch_point(stable, b)) for b in branches])
        end = np.array([b.final_loss for b in branches])
        model.params = {"delta": float(np.mean(end - base)), "ratio": float(np.mean(end / base))}
        return model
    f = _stack([_curve_features(on_stable(stable, c), model.peak) for c in (stable, *branches)])
    if len(f.loss) < N_PARAMS[method] + 1:
        raise UserError(f"{method}: {len(f.loss)} evaluated points for {N_PARAMS[method]} parameters")
    model.params = _fit_law(method, f)
    return model


def usable_methods(stable: Curve, branches: Sequence[Curve], methods: Sequence[str] = CURVE_METHODS) -> list[str]:
    """Methods with enough points to fit (and to leave a branch out): a law needs more evaluated
    points than parameters after one branch's are removed."""
    n = len(stable.steps) + sum(len(b.steps) for b in branches) - max((len(b.steps) for b in branches), default=0)
    return [m for m in methods if len(branches) >= 2 and (m.startswith("offset") or n > N_PARAMS[m] + 1)]


def leave_one_out(stable: Curve, branches: Sequence[Curve], methods: Sequence[str] | None = None,
                  fit: Callable = fit_curve_model) -> list[dict]:
    """Leave-one-branch-out: each method fitted without one branch predicts that branch's final
    loss. Rows: method, branch, step, predicted, actual, rel_error = predicted/actual − 1."""
    rows = []
    for m in usable_methods(stable, branches, methods or CURVE_METHODS):
        for i, held in enumerate(branches):
            rest = [b for j, b in enumerate(branches) if j != i]
            try:
                pred = fit(m, stable, rest).predict(held)
            except (ValueError, np.linalg.LinAlgError, FloatingPointError) as exc:
                log.debug("%s without %s: %s", m, held.name, exc)
                pred = math.nan
            rows.append({"method": m, "branch": held.name, "step": held.final_step, "predicted": pred,
                         "actual": held.final_loss, "rel_error": pred / held.final_loss - 1.0})
    return rows


def prior_half_width(level: float = DEFAULT_LEVEL) -> float:
    """The prior interval's relative half-width at ``level``: normal errors with RMS ``PRIOR_RMS``."""
    return PRIOR_RMS * float(norm.ppf(0.5 + level / 2))


def error_interval(rel_errors: Sequence[float], level: float = DEFAULT_LEVEL, *,
                   floor: float = 0.0) -> tuple[float, str]:
    """Half-width q of a relative interval ``[pred·(1 − q), pred·(1 + q)]`` from leave-one-out
    errors: the split-conformal quantile (the ⌈(n+1)·level⌉-th smallest |error|) when n allows it,
    else the largest |error| and at least ``floor`` (a prior half-width: a few errors never give a
    narrower interval; the stated level is then not guaranteed; the second value says which)."""
    e = np.sort(np.abs(np.asarray([x for x in rel_errors if np.isfinite(x)], float)))
    if not len(e):
        return (floor, "prior (no leave-one-out errors)") if floor > 0 else (math.inf, "no leave-one-out errors")
    k = math.ceil((len(e) + 1) * level)
    if k <= len(e):
        return float(e[k - 1]), f"conformal {level:g} quantile of {len(e)} leave-one-out errors"
    if floor > e[-1]:
        return floor, (f"prior ±{100 * floor:.2f}%, wider than the largest of {len(e)} leave-one-out errors "
                       f"(too few for level {level:g})")
    return float(e[-1]), f"largest of {len(e)} leave-one-out errors (too few for level {level:g})"


def choose_method(loo_rows: Sequence[dict]) -> tuple[str, dict[str, float]]:
    """The method with the smallest mean |relative error| (a method with a failed fit never wins)."""
    scores: dict[str, list[float]] = {}
    for r in loo_rows:
        scores.setdefault(r["method"], []).append(abs(r["rel_error"]))
    mean = {m: (float(np.mean(v)) if np.all(np.isfinite(v)) else math.inf) for m, v in scores.items()}
    if not mean or all(not math.isfinite(v) for v in mean.values()):
        raise UserError("no predictor could be fitted with one branch left out (need >= 2 annealed branches)")
    return min(mean, key=lambda m: (mean[m], CURVE_METHODS.index(m))), mean


@dataclass
class CurvePredictor:
    """The chosen method fitted on all branches, with its leave-one-out errors and interval."""

    model: CurveModel
    loo: list[dict]
    scores: dict[str, float]
    half_width: float
    interval: str
    level: float
    chosen_by: str = "leave-one-out"

    @property
    def method(self) -> str:
        return self.model.method

    def predict(self, curve: Curve) -> tuple[float, float, float]:
        """(predicted, lo, hi) loss at ``curve``'s last step."""
        p = self.model.predict(curve)
        return p, p * (1.0 - self.half_width), p * (1.0 + self.half_width)


def fit_predictor(stable: Curve, branches: Sequence[Curve], *, methods: Sequence[str] | None = None,
                  level: float = DEFAULT_LEVEL, options=None) -> CurvePredictor:
    """Choose among ``methods`` by leave-one-branch-out error; fit the winner on every branch. Its
    interval is never narrower than the prior's (:func:`prior_half_width`) when its errors are too
    few for ``level``. With one branch: ``DEFAULT_METHOD`` with the prior interval, ``chosen_by`` "default".
    ``options`` (a ``FitOptions``): its ``level`` (the loose ``level`` kept for one release)."""
    level = from_options(options, {"level": level}, fit_predictor)["level"]
    prior = prior_half_width(level)
    if not branches:
        raise UserError(f"no annealed branch of the stable run {stable.name!r}: need at least one")
    if len(branches) == 1:
        if DEFAULT_METHOD not in (methods or CURVE_METHODS):
            raise UserError(f"with one annealed branch only the default predictor {DEFAULT_METHOD} can be used "
                            "(nothing to leave out; its prior error is measured, docs/anneal.md)")
        how = f"prior: RMS error {100 * PRIOR_RMS:.2f}% of {DEFAULT_METHOD} from one branch on public logs"
        return CurvePredictor(fit_curve_model(DEFAULT_METHOD, stable, branches), [], {}, prior, how, level,
                              chosen_by="default")
    loo = leave_one_out(stable, branches, methods)
    best, scores = choose_method(loo)
    q, how = error_interval([r["rel_error"] for r in loo if r["method"] == best], level, floor=prior)
    return CurvePredictor(fit_curve_model(best, stable, branches), loo, scores, q, how, level)


# ---------------------------------------------------------------- a per-step log (fit curve)

def _is_stable(c: Curve) -> bool:
    """Constant LR after its peak (warmup allowed): no step lowers the LR."""
    peak = int(np.argmax(c.lr))
    return bool(np.all(np.abs(c.lr[peak:] - c.lr[peak]) <= LR_MATCH * abs(c.lr[peak])))


def split_runs(curves: Sequence[Curve], stable: str | None = None) -> tuple[Curve, list[Curve], list[str]]:
    """The stable run (named, else the longest constant-LR run), the runs that branch from it
    (same LR up to their branch point, later than its first logged step) and the names left out."""
    by_name = {c.name: c for c in curves}
    if stable is not None:
        if stable not in by_name:
            raise UserError(f"stable run {stable!r} is not in the log (runs: {', '.join(sorted(by_name))})")
        st = by_name[stable]
    else:
        flat = [c for c in curves if _is_stable(c)]
        if not flat:
            raise UserError("no run of the log keeps a constant learning rate after warmup (name one with --stable)")
        st = max(flat, key=lambda c: c.final_step)
    branches, skipped = [], []
    for c in curves:
        if c is st:
            continue
        before = st.steps <= branch_point(st, c)
        # a branch repeats the stable run up to its branch point (median gap: one logging glitch is allowed)
        shared = before.any() and branch_point(st, c) > st.steps[0] and float(np.median(np.abs(
            np.interp(st.steps[before], c.steps, c.loss) / st.loss[before] - 1))) < 5e-3
        (branches if shared else skipped).append(c if shared else c.name)
    return st, branches, skipped


def schedule_curve(name: str, steps, lrs, stable: Curve) -> Curve:
    """A schedule to predict (its steps and LRs at any granularity), the stable run's LR before its
    first step and before its branch point (:func:`on_stable`); ValueError when its branch point
    contradicts the log (:func:`check_branch`)."""
    steps = np.asarray(steps, float)
    lr = schedule_from_points(steps, lrs)
    first = int(np.min(steps))
    lr[:first] = stable.lr[:first] if len(stable.lr) >= first else stable.lr[-1]
    end = int(np.max(steps))
    c = Curve(name, lr, np.array([end]), np.array([math.nan]))
    check_branch(stable, c, steps)
    return on_stable(stable, c)
