"""The design's search (docs/design.md): candidate grids in order of cost, probed and bisected, each
assessed by simulation, the cheapest meeting the target recommended and written as a preset (else the
larger grid beyond the preset's sizing that would, named); the design's outputs (design.json,
design.md, design.png, recommended.toml)."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from interpscale._toml import dumps as toml_dumps
from interpscale.design.achieved import larger_grid
from interpscale.design.simulation import (DEFAULT_SIMS, DESIGN_BOOT, Grid, GridPower, NoiseModel, Truth, assess,
                                           grid_from_plan, meets, nested)
from interpscale.orchestration.config import Preset, load_preset

log = logging.getLogger(__name__)


# Shapes past a CPU preset's ladder, about 1.5-2x apart in parameters (generated names, valid in any preset:
# models.config.GENERATED): the slices of a wide grid need sizes near their optimum, not the ladder's largest.
# Finer than the adaptive sweep's LADDER (~2.25x): with it a 1024x grid's largest ar slice gets 3 sizes, not 4.
LARGER_SHAPES = ("L2d64", "L3d64", "L3d96", "L4d96", "L4d128", "L5d160", "L6d192")
RANGES = (4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0)


def candidate_grids(preset, *, n_slices=(3, 4, 5, 7, 9), ranges=RANGES, sizes=(4, 5, 6), budget: float | None = None,
                    ladder: Sequence[str] | None = None) -> Iterator[Grid]:
    """Grids ``plan`` makes of ``preset``, cheapest first: geometric slices from the preset's smallest
    budget over ``ranges`` (last / first), ``sizes`` per slice, within ``budget`` FLOPs, each planned
    with the size ``ladder`` (default: the preset's, then the ``LARGER_SHAPES`` beyond its largest; a
    grid keeps those it uses, and its preset lists them). Ordered by their nominal compute (sizes x the
    slices' sum) and planned only when reached."""
    tree = Preset.load(preset)
    first = min(min(v) for v in slices_of(tree).values())
    if ladder is None:
        top = max((_size_params(tree, z) for z in tree.plan.sizes), default=0)
        ladder = list(tree.plan.sizes) + [z for z in LARGER_SHAPES if _size_params(tree, z) > top]
    specs = {(tuple(float(f"{first * r ** (i / (n - 1)):.4g}") for i in range(n)), s, f"{n}x{s} over {r:g}x")
             for n in n_slices for r in ranges for s in sizes}
    for sl, s, label in sorted(specs, key=lambda t: (t[1] * sum(t[0]), t[2])):
        if budget is not None and s * sum(sl) * len(tree.plan.families) > budget * 1.5:
            continue  # nominally far over the budget: not worth planning
        g = None
        for sizes_ in dict.fromkeys((tuple(ladder), tuple(tree.plan.sizes))):  # a family that refuses a shape:
            try:                                                                 # the preset's own ladder
                g = grid_from_plan(tree, slices=sl, sizes_per_slice=s, label=label, sizes=sizes_)
                break
            except ValueError as exc:  # a slice no size fits, or a family without that shape
                log.info("design: grid %s with sizes %s not planned: %s", label, list(sizes_), exc)
        if g is None:
            continue
        if budget is None or g.compute <= budget:
            yield g


def _size_params(tree, name: str) -> int:
    """Non-embedding parameters of a size (``models.lm.backbone_params``; built-in, generated or the
    preset's ``[size_presets]``), to order a ladder; 0 when it is not known here (a plugin's own size)."""
    from dataclasses import fields

    from interpscale.models.config import SIZES, ModelConfig, make_config
    from interpscale.models.lm import backbone_params

    own = tree.size_presets.get(name) or {}
    base = own.get("base", name)
    if SIZES.get(base) is None:
        return 0
    known = {f.name for f in fields(ModelConfig)} - {"family", "size"}
    return backbone_params(make_config("", base, **{k: v for k, v in own.items() if k in known}))


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
    candidates: int = 0  # the candidate grids within the budget, of which ``tried`` were screened
    # when no grid the preset's sizing makes meets the multiplier target: the cheapest larger grid at the
    # planned spacing, sizes about the planted optimum, that reaches the power (``achieved.larger_grid``)
    beyond: Grid | None = None
    beyond_tried: bool = False  # whether that larger grid was searched for (its largest: 4x the planned slices)

    def to_dict(self) -> dict:
        return dict(question=self.question, noise=self.noise.to_dict(), truth=self.truth.to_dict(),
                    target=self.target, planned=self.planned.to_dict(), tried=[t.to_dict() for t in self.tried],
                    recommended=self.recommended.to_dict() if self.recommended else None,
                    candidates=self.candidates, beyond=None if self.beyond is None else dict(
                        slices=list(self.beyond.slices), sizes_per_slice=self.beyond.sizes_per_slice,
                        n_runs=self.beyond.n_runs, compute=self.beyond.compute, wall_s=self.beyond.wall_s,
                        label=self.beyond.label), beyond_tried=self.beyond_tried)


def search(preset, truth: Truth, noise: NoiseModel, *, question: str, base: str, variant: str | None = None,
           growth: float = 0.05, target: float = 1e20, power: float = 0.8, false_alarm: float = 0.10,
           halfwidth: float = 0.05, budget: float | None = None, n_sims: int = DEFAULT_SIMS,
           screen_sims: int = 40, max_grids: int = 24, n_boot: int = DESIGN_BOOT, seed: int = 0,
           workers: int | None = None, progress=None, grids: Sequence[Grid] | None = None,
           planned: Grid | None = None) -> Design:
    """Assess the preset's own grid, then search the candidate grids (in order of cost) for the cheapest
    that meets the target: each grid screened with ``screen_sims`` simulations, a passing one confirmed
    with ``n_sims``. The search probes the candidates at doubling steps of the cost order (1st, 2nd,
    4th, 8th, ..., last) until a screen passes, then bisects between the last grid that fell short and
    that one -- it assumes the power grows with compute along the order, so a few screens find the
    threshold among tens of grids (docs/design.md) -- and confirms the cheapest passing grid; a failed
    confirmation continues upward, cheapest first. At most ``max_grids`` grids are screened;
    ``planned``: the preset's own grid when the caller has already planned it."""
    kw = dict(question=question, base=base, variant=variant, growth=growth, target=target, n_boot=n_boot,
              seed=seed, workers=workers)
    goal = dict(power=power, false_alarm=false_alarm, halfwidth=halfwidth)
    planned = assess(planned or grid_from_plan(preset, label="planned"), truth, noise, n_sims=n_sims,
                     progress=_stage(progress, "planned grid"), **kw)
    cands = sorted(grids if grids is not None else candidate_grids(preset, budget=budget),
                   key=lambda g: g.compute)  # planned compute: the nominal order can differ
    failed = [] if meets(planned, **goal) else [planned.grid]
    screens: dict[int, GridPower | None] = {}  # candidate index -> its screen, in screening order (None: skipped)
    n_screened = lambda: sum(gp is not None for gp in screens.values())  # noqa: E731

    def passes(i: int) -> bool:
        if i not in screens:
            g, within = cands[i], next((f for f in failed if nested(cands[i], f)), None)
            if within is not None:  # a part of a grid that fell short cannot do better: not simulated
                log.info("design: grid %s skipped: nested in %s, which fell short", g.label, within.label)
                screens[i] = None
            elif n_screened() >= max_grids:
                raise _Exhausted
            else:
                screens[i] = assess(g, truth, noise, n_sims=screen_sims,
                                    progress=_stage(progress, f"grid {n_screened() + 1} (of {len(cands)})"), **kw)
                if not meets(screens[i], **goal):
                    failed.append(g)
        return screens[i] is not None and meets(screens[i], **goal)

    best = None
    try:
        lo, hi = -1, None  # the cost order's last index known short, its first passing screen
        for i in _probes(len(cands)):
            if passes(i):
                hi = i
                break
            lo = i
        while hi is not None and best is None:
            while hi - lo > 1:  # bisect: the cheapest passing screen between them
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if passes(mid) else (mid, hi)
            gp = assess(cands[hi], truth, noise, n_sims=n_sims, progress=_stage(progress, f"confirm {cands[hi].label}"),
                        more_of=screens[hi], **kw)  # the screen's simulations are the first of these
            screens[hi] = gp
            if meets(gp, **goal):
                best = gp
            else:
                failed.append(cands[hi])
                lo, hi = hi, next((j for j in range(hi + 1, len(cands)) if passes(j)), None)
    except _Exhausted:
        log.info("design: %d grids screened (--max-grids); the search stopped", max_grids)
    # no grid the preset sizes meets a multiplier target the planned grid misses: name the one that would
    beyond, beyond_tried = None, (best is None and question == "multiplier" and grids is None and budget is None
                                  and max_grids > 0 and not meets(planned, **goal))
    if beyond_tried:
        beyond = _beyond(planned, truth, noise, power=power, n_sims=n_sims, progress=progress, **kw)
    tried = tuple(gp for gp in screens.values() if gp is not None)
    return Design(question=question, noise=noise, truth=truth, planned=planned, tried=tried,
                  recommended=best, target=dict(goal, growth=growth, target_compute=target, budget=budget),
                  candidates=len(cands), beyond=beyond, beyond_tried=beyond_tried)


def _beyond(planned: GridPower, truth: Truth, noise: NoiseModel, *, power: float, n_sims: int, progress, base: str,
            variant: str, workers: int | None, **kw) -> Grid | None:
    """The cheapest larger grid at the planned spacing, sizes about the planted optimum (not the
    preset's D/P rule), whose power reaches ``power``: priced as the pair's C x runs, its wall time at
    the planned grid's FLOPs per second scaled to every family of the preset."""
    g = planned.grid
    truth = truth.pivoted(g.slices)  # as assess placed it on the planned grid
    if progress is not None:
        progress("beyond the preset's sizing: larger grids at the planned spacing, growing k", 0, 0)
    kw = {k: v for k, v in kw.items() if k != "question" and k != "target"}
    found = larger_grid(g, truth, noise, (base, variant), power=power, n_sims=n_sims, workers=workers,
                        starts=planned.starts, base=base, variant=variant, **kw)
    if found is None:
        return None
    pair = g.points[g.points["family"].isin([base, variant])]  # the planned grid's share of the pair
    whole = found.compute * g.compute / float(pair["flops"].sum())  # every family of the preset, at that share
    return dataclasses.replace(found, compute=whole, wall_s=g.wall_s * whole / g.compute,
                               n_runs=int(round(found.n_runs * g.n_runs / max(1, len(pair)))),
                               label=f"{len(found.slices)}x{found.sizes_per_slice} at the planned spacing")


class _Exhausted(Exception):
    """``max_grids`` grids were screened."""


def _probes(n: int) -> list[int]:
    """Indices 0, 1, 3, 7, ... of a cost order of ``n`` grids, and its last."""
    out, i = [], 0
    while i < n - 1:
        out.append(i)
        i = 2 * i + 1
    return out + [n - 1] if n else []


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
    if grid.sizes:  # the ladder it was planned with: the preset's, and larger shapes where its slices need them
        plan_sec["sizes"] = list(grid.sizes)
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
    rows = [_row(design.planned)] + [_row(g) for g in sorted(design.tried, key=lambda g: g.grid.compute)]
    header = list(dict.fromkeys(k for r in rows for k in r))
    lines += [md_table(header, [[r.get(k, "") for k in header] for r in rows]), ""]
    r = design.recommended
    if r is not None:
        extra = [z for z in r.grid.sizes if z not in design.planned.grid.sizes]
        lines.append(f"**Recommended**: {r.grid.describe()}, estimated {_minutes(r.grid.wall_s)} wall "
                     f"({_answer(r)})" + (f"; it adds sizes {', '.join(extra)} to the preset's ladder" if extra
                                          else "") + "; written as recommended.toml.")
    else:
        lines.append(f"**No grid tried meets the target** ({len(design.tried)} of {design.candidates} candidate "
                     "grids screened" + (f", within {goal['budget']:.3g} FLOPs" if goal.get("budget") else "")
                     + "); raise --budget or --max-grids, or lower the target.")
    if design.beyond is not None:
        b = design.beyond
        lines.append(f"**Beyond the preset's sizing**: {len(b.slices)} slices ({b.slices[0]:.3g}-{b.slices[-1]:.3g} "
                     f"FLOPs, the planned spacing) x {b.sizes_per_slice} sizes a factor 2 apart about the planted "
                     f"optimum, about {b.n_runs} runs and {b.compute:.3g} FLOPs for the preset's families, estimated "
                     f"{_minutes(b.wall_s)} wall at the planned grid's FLOPs per second, reaches power "
                     f"{goal['power']:g} for growth {goal['growth']:g} (its growing-k simulations; the false-alarm "
                     "rate not simulated). `plan` places a slice's sizes by tokens per parameter, which misses the planted "
                     "optimum at these slices, so this grid cannot be written as a preset: no recommended.toml.")
    elif design.beyond_tried:
        lines.append(f"**Beyond the preset's sizing**: no grid of up to {4 * len(design.planned.grid.slices)} slices "
                     f"at the planned spacing, sizes about the planted optimum, reached power {goal['power']:g} "
                     "either: at this noise and planted law the growth is not decidable by adding slices.")
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
