"""An IsoFLOP sweep that brackets its optima (issue 29.1; docs/data.md, "Sweeping a new
corpus"): train, fit each slice's parabola, add the next size beyond an edge minimum, repeat
up to a stated limit.  Each slice's first grid centres on the prior optimal size

    N*(C) = N_0 · (C / C_0)^α_P                                                    (1)

(:func:`prior_params`); ``slice_minimum`` (the IsoFLOP fit's Eq. 25 parabola, injected by
the caller since scaling sits above this layer) judges each slice after a round.
"""
from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from interpscale._atomic import atomic_write_text

log = logging.getLogger(__name__)

DEFAULT_ALPHA_P = 0.5  # Chinchilla's N* ∝ C^0.5, for families outside Table 6
# (name, n_layers, d_model, n_heads): parameters grow ~2.25x per step
LADDER: tuple[tuple[str, int, int, int], ...] = tuple(
    (f"L{nl}d{d}", nl, d, h) for nl, d, h in (
        (1, 4, 1), (1, 6, 1), (1, 8, 1), (1, 12, 1), (1, 16, 2), (1, 24, 2), (1, 32, 2), (2, 48, 3), (2, 64, 4), (3, 96, 6),
        (4, 128, 8), (6, 192, 12), (8, 256, 16), (10, 384, 24), (12, 512, 32), (16, 768, 48), (20, 1024, 64)))


def ladder_presets() -> dict[str, dict[str, Any]]:
    """:data:`LADDER` as ``[size_presets]`` tables (on the ``nano`` base)."""
    return {name: {"base": "nano", "n_layers": nl, "d_model": d, "n_heads": h} for name, nl, d, h in LADDER}


def alpha_p(family: str) -> float:
    """α_P of Table 6 for ``family`` (paper values), else :data:`DEFAULT_ALPHA_P`."""
    from interpscale import paper

    return float(paper.TABLE6.get(family, {}).get("alpha_P", DEFAULT_ALPHA_P))


def prior_params(table: pd.DataFrame, c: float, c0: float, family: str, tokens_per_param: float) -> float:
    """Eq. (1): N*(C) from the candidate table at the reference slice ``c0`` (columns P and
    tokens_per_param of the planner's rows, one per ladder size)."""
    t = table.sort_values("P")
    logp, logr = t["P"].map(math.log).to_numpy(), t["tokens_per_param"].map(math.log).to_numpy()
    target = math.log(tokens_per_param)
    # D/N falls as N grows: interpolate log N at log(D/N) = target (clamped to the ladder)
    n0 = float(pd.Series(logp).iloc[0]) if target >= logr[0] else float(pd.Series(logp).iloc[-1])
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
    bracketed: bool = False
    done: bool = False
    P_star: float = math.nan
    reason: str = ""
    history: list[str] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict, repr=False)  # planner status per ladder size


@dataclass
class AdaptiveResult:
    """What the adaptive sweep did: the sweep, each slice's state, the rounds run."""

    sweep: Any
    slices: list[SliceState]
    rounds: int

    @property
    def all_bracketed(self) -> bool:
        return all(s.bracketed for s in self.slices)

    def summary(self) -> str:
        lines = [f"adaptive sweep: {sum(s.bracketed for s in self.slices)} of {len(self.slices)} slices bracket "
                 f"their optimum after {self.rounds} round(s)"]
        for s in self.slices:
            what = f"P*={s.P_star:.3g}" if s.bracketed else f"not bracketed: {s.reason}"
            lines.append(f"  {s.family} C={s.slice_flops:.3g}: sizes {', '.join(s.sizes)} (+{s.added}); {what}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "all_bracketed": self.all_bracketed, "slices": [asdict(s) for s in self.slices]}


def _plan(preset, family: str, c: float, sizes: list[str], ladder: dict, strict: bool, priced: bool = False):
    from interpscale.orchestration.planner import plan

    # the rate only prices runtime, which choosing sizes does not use: no CPU timing unless ``priced``
    return plan(preset, families=[family], slices={family: [c]}, sizes=sizes, size_presets=ladder, strict=strict,
                flops_per_s=None if priced else 1.0, max_sizes_per_slice=len(sizes) + 1)


def _initial_states(preset, per: dict, ladder_names: list[str], ladder: dict, initial: int,
                    tokens_per_param: float) -> list[SliceState]:
    states = []
    for family, cs in per.items():
        tables = {c: _plan(preset, family, c, ladder_names, ladder, strict=False).table for c in cs}
        ref = tables[cs[0]]
        ref = ref[ref["steps"] >= 1]
        for c in cs:
            t = tables[c].sort_values("P").reset_index(drop=True)
            prior = prior_params(ref, c, cs[0], family, tokens_per_param)
            ok = t.index[t["status"] == "ok"].tolist()
            if not ok:
                raise ValueError(f"{family}: no size of {ladder_names} fits slice C={c:.3g}")
            centre = min(ok, key=lambda i: abs(math.log(t.at[i, "P"] / prior)))
            k = ok.index(centre)
            lo = max(0, min(k - (initial - 1) // 2, len(ok) - initial))
            chosen = [t.at[i, "size"] for i in ok[lo: lo + initial]]
            st = SliceState(family, c, list(t["size"]), chosen, prior, status=dict(zip(t["size"], t["status"])))
            st.history.append(f"round 0: {', '.join(chosen)} around N*={prior:.3g}")
            states.append(st)
    return states


def _first_states(preset: str | os.PathLike, families: Sequence[str] | None, initial: int,
                  tokens_per_param: float | None) -> tuple[dict, dict, list[SliceState]]:
    """(the validated preset, the ladder's ``size_presets`` unless it names sizes, each
    slice's first state); the prior's D/N is ``tokens_per_param``, else the planner's centre
    of ``[plan] tokens_per_param``."""
    from interpscale.errors import UserError
    from interpscale.orchestration.config_schema import validate_config
    from interpscale.orchestration.planner import load_preset, slice_targets, window_centre

    cfg = validate_config(load_preset(preset), preset)
    p = cfg.get("plan", {})
    fams = list(families or p.get("families") or [])
    if not fams or p.get("slices") is None:
        raise UserError(f"{preset}: an adaptive sweep needs [plan] families and slices")
    try:
        per = {f: sorted(cs) for f, cs in slice_targets(fams, p["slices"]).items()}
    except ValueError as exc:
        raise UserError(f"{preset}: [plan] slices: {exc}") from exc
    given = list(p.get("sizes") or [])
    ladder = {} if given else ladder_presets()
    if tokens_per_param is None:
        tokens_per_param = window_centre(p.get("tokens_per_param", (0.0, math.inf)))
    names = given or list(ladder)
    return cfg, ladder, _initial_states(preset, per, names, ladder, initial, float(tokens_per_param))


def _final_rows(df: pd.DataFrame, family: str, c: float) -> pd.DataFrame:
    """One row per run of the slice: its last annealed evaluation (else its last)."""
    g = df[(df["family"] == family) & (df["slice_flops"] == c)]
    if "annealed" in g.columns and g["annealed"].astype(bool).any():
        g = g[g["annealed"].astype(bool)]
    return g.sort_values("step").groupby("run_id").tail(1).sort_values("params")


def _next(s: SliceState, side: str) -> str | None:
    """The ladder size next beyond the slice's smallest (``side="smaller"``) or largest size."""
    at = s.ladder.index(s.sizes[0 if side == "smaller" else -1]) + (-1 if side == "smaller" else 1)
    return s.ladder[at] if 0 <= at < len(s.ladder) else None


def _judge(s: SliceState, df: pd.DataFrame, slice_minimum: Callable, max_added: int) -> None:
    """Settle ``s`` (bracketed, or why not) or add the next size(s) beyond its minimum."""
    rows = _final_rows(df, s.family, s.slice_flops)
    if len(rows) < len(s.sizes):
        s.done, s.reason = True, f"{len(s.sizes) - len(rows)} of its runs produced no result"
        return
    res = slice_minimum(rows["params"].to_numpy(float), rows["loss"].to_numpy(float))
    s.P_star = float(res["P_star"])
    if res["interior"]:
        s.bracketed, s.done, s.reason = True, True, ""
        return
    i = int(rows["loss"].to_numpy().argmin())
    if i == 0 or i == len(rows) - 1:
        sides = ["smaller"] if i == 0 else ["larger"]
    elif math.isfinite(s.P_star):  # an inner lowest loss but the vertex outside: towards the vertex
        sides = ["smaller"] if s.P_star < rows["params"].iloc[0] else ["larger"]
    else:  # a non-convex slice: widen on both sides (where the ladder goes on)
        sides = [d for d in ("smaller", "larger") if _next(s, d) is not None] or ["smaller"]
    for side in sides:
        if s.added >= max_added:
            s.done, s.reason = True, f"{res['reason']}; the limit of {max_added} added sizes is reached"
            return
        name = _next(s, side)
        if name is None:
            s.done, s.reason = True, f"{res['reason']}; the size ladder has no {side} size"
            return
        status = s.status[name]
        if status != "ok":
            s.done, s.reason = True, f"{res['reason']}; the next {side} size {name} is {status}"
            return
        s.sizes = [name] + s.sizes if side == "smaller" else s.sizes + [name]
        s.added += 1
        s.history.append(f"{res['reason']}: added {name}")


def adaptive_sweep(preset: str | os.PathLike, out_dir: str | os.PathLike, *, slice_minimum: Callable,
                   families: Sequence[str] | None = None, initial: int = 3, max_added: int = 3,
                   tokens_per_param: float | None = None, extend: bool = False,
                   **sweep_options: Any) -> AdaptiveResult:
    """Train ``preset``'s slices, adding sizes beyond edge minima until each brackets its
    optimum (see the module doc).  ``slice_minimum(params, loss) -> {P_star, interior,
    reason, ...}`` judges a slice (``interpscale.scaling.isoflop.slice_minimum``);
    ``sweep_options`` go to :meth:`Sweep.from_plan` (executor, max_parallel, ...)."""
    from interpscale.orchestration.launch import Sweep
    from interpscale.orchestration.planner import Plan

    if initial < 3 or max_added < 0:
        raise ValueError(f"initial must be >= 3 (a parabola) and max_added >= 0, got {initial}, {max_added}")
    cfg, ladder, states = _first_states(preset, families, initial, tokens_per_param)
    rounds, sweep = 0, None
    while any(not s.done for s in states):
        runs = [r for s in states for r in _plan(preset, s.family, s.slice_flops, s.sizes, ladder, True).runs]
        sweep = Sweep.from_plan(Plan(runs=runs, table=pd.DataFrame(), launch=dict(cfg.get("launch", {}))), out_dir,
                                extend=extend or rounds > 0, **sweep_options)
        sweep.launch()
        rounds += 1
        df = sweep.collect()
        for s in states:
            if not s.done:
                _judge(s, df, slice_minimum, max_added)
        log.info("adaptive sweep round %d: %d of %d slices settled", rounds, sum(s.done for s in states), len(states))
    result = AdaptiveResult(sweep, states, rounds)
    atomic_write_text(Path(out_dir) / "adaptive.json", json.dumps(result.to_dict(), indent=1, default=str))
    return result


def first_grid(preset: str | os.PathLike, *, families: Sequence[str] | None = None, initial: int = 3,
               tokens_per_param: float | None = None):
    """The plan of a preset without ``[plan] sizes``: each slice's ``initial`` ladder sizes
    around the prior N*(C) of Eq. (1) (what ``plan`` shows and the adaptive sweep trains first)."""
    from interpscale.orchestration.planner import Plan

    cfg, ladder, states = _first_states(preset, families, initial, tokens_per_param)
    plans = [_plan(preset, s.family, s.slice_flops, s.sizes, ladder, True, priced=True) for s in states]
    return Plan(runs=[r for p in plans for r in p.runs], table=pd.concat([p.table for p in plans], ignore_index=True),
                launch=dict(cfg.get("launch", {})), device=plans[0].device if plans else {})
