"""The design's search (docs/design.md): candidate grids cheapest first, each assessed by
simulation, the cheapest meeting the target recommended and written as a preset; the design's
outputs (design.json, design.md, design.png, recommended.toml)."""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from interpscale._toml import dumps as toml_dumps
from interpscale.design.simulation import (DEFAULT_SIMS, DESIGN_BOOT, Grid, GridPower, NoiseModel, Truth, assess,
                                           grid_from_plan, meets)
from interpscale.orchestration.config import Preset, load_preset

log = logging.getLogger(__name__)


def candidate_grids(preset, *, n_slices=(3, 4, 5, 7, 9), ranges=(4.0, 8.0, 16.0, 32.0, 64.0),
                    sizes=(4, 5, 6), budget: float | None = None) -> Iterator[Grid]:
    """Grids ``plan`` makes of ``preset``, cheapest first: geometric slices from the preset's smallest
    budget over ``ranges`` (last / first), ``sizes`` per slice, within ``budget`` FLOPs. Ordered by
    their nominal compute (sizes x the slices' sum) and planned only when reached."""
    tree = Preset.load(preset)
    first = min(min(v) for v in slices_of(tree).values())
    specs = {(tuple(float(f"{first * r ** (i / (n - 1)):.4g}") for i in range(n)), s, f"{n}x{s} over {r:g}x")
             for n in n_slices for r in ranges for s in sizes}
    for sl, s, label in sorted(specs, key=lambda t: (t[1] * sum(t[0]), t[2])):
        if budget is not None and s * sum(sl) * len(tree.plan.families) > budget * 1.5:
            continue  # nominally far over the budget: not worth planning
        try:
            g = grid_from_plan(tree, slices=sl, sizes_per_slice=s, label=label)
        except ValueError as exc:  # a slice no size fits
            log.info("design: grid %s skipped: %s", label, exc)
            continue
        if budget is None or g.compute <= budget:
            yield g


def nested(grid: Grid, other: Grid) -> bool:
    """Whether ``grid`` asks no more than ``other``: no more slices, all within ``other``'s range, and no
    more sizes per slice. Such a grid has less information on every question the design asks, so when
    ``other`` falls short of a target the search does not simulate it."""
    return (len(grid.slices) <= len(other.slices) and grid.sizes_per_slice <= other.sizes_per_slice
            and grid.slices[0] >= other.slices[0] * (1 - 1e-9) and grid.slices[-1] <= other.slices[-1] * (1 + 1e-9))


def slices_of(tree) -> dict:
    s = tree.plan.slices
    return s if isinstance(s, dict) else {f: list(s) for f in tree.plan.families}


@dataclass(frozen=True)
class Design:
    """The planned grid's assessment, every grid the search tried, and the recommendation (None when
    no grid within the budget meets the target)."""

    question: str
    noise: NoiseModel
    truth: Truth
    planned: GridPower
    tried: tuple[GridPower, ...] = ()
    recommended: GridPower | None = None
    target: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(question=self.question, noise=self.noise.to_dict(), truth=self.truth.to_dict(),
                    target=self.target, planned=self.planned.to_dict(), tried=[t.to_dict() for t in self.tried],
                    recommended=self.recommended.to_dict() if self.recommended else None)


def search(preset, truth: Truth, noise: NoiseModel, *, question: str, base: str, variant: str | None = None,
           growth: float = 0.05, target: float = 1e20, power: float = 0.8, false_alarm: float = 0.10,
           halfwidth: float = 0.05, budget: float | None = None, n_sims: int = DEFAULT_SIMS,
           screen_sims: int = 40, max_grids: int = 12, n_boot: int = DESIGN_BOOT, seed: int = 0,
           workers: int | None = None, progress=None, grids: Sequence[Grid] | None = None,
           planned: Grid | None = None) -> Design:
    """Assess the preset's own grid, then walk candidate grids cheapest first: each screened with
    ``screen_sims`` simulations, a passing one confirmed with ``n_sims``; the first confirmed is the
    recommendation. At most ``max_grids`` candidates are tried; ``planned``: the preset's own grid
    when the caller has already planned it."""
    kw = dict(question=question, base=base, variant=variant, growth=growth, target=target, n_boot=n_boot,
              seed=seed, workers=workers)
    goal = dict(power=power, false_alarm=false_alarm, halfwidth=halfwidth)
    planned = assess(planned or grid_from_plan(preset, label="planned"), truth, noise, n_sims=n_sims,
                     progress=_stage(progress, "planned grid"), **kw)
    tried, best = [], None
    failed = [] if meets(planned, **goal) else [planned.grid]
    cands = iter(grids) if grids is not None else candidate_grids(preset, budget=budget)
    for g in cands:
        if len(tried) >= max_grids:
            break
        within = next((f for f in failed if nested(g, f)), None)
        if within is not None:  # a part of a grid that fell short cannot do better: not simulated
            log.info("design: grid %s skipped: nested in %s, which fell short", g.label, within.label)
            continue
        i = len(tried)
        gp = assess(g, truth, noise, n_sims=screen_sims, progress=_stage(progress, f"grid {i + 1}/{max_grids}"),
                    **kw)
        tried.append(gp)
        if not meets(gp, **goal):
            failed.append(g)
        else:
            gp = assess(g, truth, noise, n_sims=n_sims, progress=_stage(progress, f"confirm grid {i + 1}"),
                        more_of=gp, **kw)  # the screen's simulations are the first of these
            tried[-1] = gp
            if meets(gp, **goal):
                best = gp
                break
            failed.append(g)
    return Design(question=question, noise=noise, truth=truth, planned=planned, tried=tuple(tried),
                  recommended=best, target=dict(goal, growth=growth, target_compute=target, budget=budget))


def _stage(progress, name):
    return None if progress is None else (lambda scen, d, n: progress(f"{name}, {scen}", d, n))


# ---- outputs --------------------------------------------------------------------------------

def write_preset(preset, grid: Grid, path: str | os.PathLike) -> Path:
    """``preset``'s TOML with its ``[plan]`` slices (every family) and ``max_sizes_per_slice``
    replaced by ``grid``'s, so ``plan`` and ``sweep launch --preset`` run it as written."""
    import tomllib

    from interpscale._atomic import atomic_write_text

    src = preset.to_table() if isinstance(preset, Preset) else dict(preset) if isinstance(preset, Mapping) \
        else load_preset(preset)
    src = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in src.items()}
    plan_sec = src.setdefault("plan", {})
    fams = plan_sec.get("families") or sorted(set(grid.points["family"]))
    plan_sec["slices"] = {f: list(grid.slices) for f in fams}
    plan_sec["max_sizes_per_slice"] = int(grid.sizes_per_slice)
    text = f"# written by `interpscale design`: {grid.describe()}\n" + toml_dumps(src)
    tomllib.loads(text)  # what we write must read back
    return atomic_write_text(Path(path), text)


def _row(gp: GridPower, mark: str = "") -> dict:
    g = gp.grid
    row = {"grid": f"{g.label}{mark}", "slices": len(g.slices), "range": f"{g.slices[0]:.3g}-{g.slices[-1]:.3g}",
           "sizes/slice": g.sizes_per_slice, "runs": g.n_runs, "FLOPs": f"{g.compute:.3g}",
           "est. wall": _minutes(g.wall_s), "sims": gp.n_sims}
    if gp.question == "multiplier":
        c, gr = gp.scenarios["constant"], gp.scenarios["growing"]
        row.update({"power": f"{gp.power:.2f}", "false alarm": f"{gp.false_alarm:.2f}",
                    "undetermined (const / grow)": f"{c['p_verdict']['undetermined']:.2f} / "
                                                   f"{gr['p_verdict']['undetermined']:.2f}",
                    "k band at middle (x)": f"{10 ** c['k_decades_mid']:.3g}"
                    if math.isfinite(c["k_decades_mid"]) else "unbounded",
                    "k covered at middle": f"{c['k_cover_mid']:.2f}",
                    "brackets": f"{c['bracketed_slices']:.2f}"})
    else:
        t = gp.scenarios["truth"]
        row.update({"alpha_P half-width": f"{t['alpha_P_halfwidth']:.3g}", "identified": f"{t['p_identified']:.2f}",
                    "brackets": f"{t['bracketed_slices']:.2f}"})
        if "forecast_abs_error" in t:
            row["forecast |error|"] = f"{100 * t['forecast_abs_error']:.2f}%"
    return row


def _minutes(s: float) -> str:
    return "-" if not math.isfinite(s) else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def render(design: Design) -> str:
    """The design as markdown: what it assumed, the planned grid's chances, every grid tried and
    the recommendation (or why there is none)."""
    from interpscale._markdown import md_table

    n, t, goal = design.noise, design.truth, design.target
    lines = [f"# Sweep design: the {design.question} question", "",
             f"- noise ({n.source}): run sd {n.run_sd:.4g} [{n.run_ci[0]:.3g}, {n.run_ci[1]:.3g}], slice shock sd "
             f"{n.slice_sd:.4g} [{n.slice_ci[0]:.3g}, {n.slice_ci[1]:.3g}] (log loss, {round(100 * n.level)}% "
             f"intervals, df {n.df_run} / {n.df_slice})",
             f"- truth ({t.source}): {'Eq. 27' if t.kind == 'joint' else 'IsoFLOP envelopes (Eqs. 25-26)'} with " + ", ".join(f"{k} {v:.4g}" for k, v in t.law.items())
             + (f"; k0 {t.multiplier:.3g}, planted growth {goal['growth']:g} vs none" if design.question ==
                "multiplier" else "") + (f" ({t.note})" if t.note else ""),
             (f"- target: power >= {goal['power']:g} for growth {goal['growth']:g} with <= {goal['false_alarm']:g} "
              "false alarms" if design.question == "multiplier" else
              f"- target: alpha_P's 90% half-width <= {goal['halfwidth']:g}")
             + (f", within {goal['budget']:.3g} FLOPs" if goal.get("budget") else ""), ""]
    rows = [_row(design.planned)] + [_row(g) for g in design.tried]
    header = list(dict.fromkeys(k for r in rows for k in r))
    lines += [md_table(header, [[r.get(k, "") for k in header] for r in rows]), ""]
    r = design.recommended
    if r is not None:
        lines.append(f"**Recommended**: {r.grid.describe()}, estimated {_minutes(r.grid.wall_s)} wall "
                     f"({_answer(r)}); written as recommended.toml.")
    else:
        lines.append(f"**No grid tried meets the target** ({len(design.tried)} tried, cheapest first"
                     + (f", within {goal['budget']:.3g} FLOPs" if goal.get("budget") else "")
                     + "); raise --budget or --max-grids, or lower the target.")
    lines.append(f"Planned grid: {design.planned.grid.describe()} — {_answer(design.planned)}.")
    return "\n".join(lines)


def _answer(gp: GridPower) -> str:
    if gp.question == "multiplier":
        return f"power {gp.power:.2f}, false alarms {gp.false_alarm:.2f} over {gp.n_sims} simulated sweeps"
    return f"alpha_P half-width {gp.alpha_P_halfwidth:.3g} over {gp.n_sims} simulated sweeps"


def write_outputs(design: Design, preset, out: str | os.PathLike) -> list[Path]:
    """DIR/design.json, design.md, design.png and (when a grid was recommended) recommended.toml."""
    import json

    import matplotlib.pyplot as plt

    from interpscale._atomic import atomic_write_text
    from interpscale.analysis.figures.design import design_figure

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = [atomic_write_text(out / "design.json", json.dumps(design.to_dict(), indent=2, default=str) + "\n"),
               atomic_write_text(out / "design.md", render(design) + "\n")]
    multiplier = design.question == "multiplier"
    value = (lambda gp: gp.power) if multiplier else (lambda gp: gp.alpha_P_halfwidth)
    tried = list(design.tried)
    fig = design_figure([g.grid.compute for g in tried], [value(g) for g in tried],
                        labels=[g.grid.label for g in tried],
                        ylabel="power (growing k detected)" if multiplier else "alpha_P 90% half-width",
                        target=design.target["power"] if multiplier else design.target["halfwidth"],
                        planned=(design.planned.grid.compute, value(design.planned)),
                        recommended=None if design.recommended is None else (design.recommended.grid.compute,
                                                                           value(design.recommended)),
                        higher_is_better=multiplier)
    fig.savefig(out / "design.png", dpi=150)
    plt.close(fig)
    written.append(out / "design.png")
    if design.recommended is not None:
        written.append(write_preset(preset, design.recommended.grid, out / "recommended.toml"))
    return written


# ---- a finished sweep's achieved power --------------------------------------------------------
