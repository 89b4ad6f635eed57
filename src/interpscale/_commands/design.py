"""``interpscale design PRESET --question multiplier|exponent|forecast --out DIR``: the chance that a
planned sweep answers its question, and the cheapest grid that would (docs/design.md)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    from interpscale._commands.options import count, level, non_negative_int, out_dir, positive_float, table_file

    p.add_argument("preset", help="the preset to design (a name such as demo, or a .toml path)")
    p.add_argument("--question", choices=("multiplier", "exponent", "forecast"), default="multiplier",
                   help="what the sweep must answer: the multiplier's growth verdict, alpha_P's interval, or the "
                        "forecast at --target-compute (default: multiplier)")
    p.add_argument("--pilot", metavar="RESULTS", type=table_file, help="a pilot results table (a small sweep, the quick demo, past "
                   "runs): the noise model and the planted law are measured on it")
    p.add_argument("--noise", type=positive_float, metavar="SD", help="per-run log-loss noise (instead of a pilot's)")
    p.add_argument("--slice-noise", type=non_negative_float, default=None, metavar="SD",
                   help="shock shared by every run of one slice, log scale (default: the pilot's, else 0)")
    p.add_argument("--base", help="base family (default: the preset's first family with a +concept twin)")
    p.add_argument("--variant", help="variant family (default: BASE+concept)")
    p.add_argument("--growth", type=float, default=0.05, help="planted growth g of k ∝ C^g (default: 0.05)")
    p.add_argument("--multiplier", type=positive_float, help="planted k at the grid's middle (default: the pilot's)")
    p.add_argument("--target-compute", type=positive_float, help="compute of the question's target "
                   "(default: 10x the preset's largest slice)")
    p.add_argument("--power", type=level, default=0.8, help="required power (default: 0.8)")
    p.add_argument("--false-alarm", type=level, default=0.10, help="allowed false alarms (default: 0.1)")
    p.add_argument("--halfwidth", type=positive_float, default=0.05,
                   help="required 90%% half-width of alpha_P (exponent question; default: 0.05)")
    p.add_argument("--budget", type=positive_float, metavar="FLOPS", help="largest total compute a grid may have")
    p.add_argument("--sims", type=count, default=200, help="simulated sweeps per grid and truth (default 200)")
    p.add_argument("--screen-sims", type=count, default=40,
                   help="simulations that screen a candidate grid before it is confirmed (default 40)")
    p.add_argument("--max-grids", type=non_negative_int, default=24,
                   help="candidate grids screened at most (default 24): in cost order at doubling steps, then "
                   "bisected to the cheapest that meets the target (docs/design.md); 0: the planned grid only")
    p.add_argument("--n-boot", type=count, default=None,
                   help="bootstrap replicates inside each simulated analysis (default: the design's, 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=count, help="worker processes (default: the CPU count, at most 4)")
    p.add_argument("--out", required=True, type=out_dir, help="output directory: design.json, design.md, design.png, "
                   "recommended.toml")


def non_negative_float(text: str) -> float:
    """An argparse ``type``: a finite number >= 0 (a noise level)."""
    value = float(text) if text.strip().lower() not in ("nan", "inf", "-inf", "+inf") else math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def run(args: argparse.Namespace) -> int:
    from interpscale import design as d
    from interpscale.errors import UserError
    from interpscale.orchestration.config import Preset
    from interpscale.results_table import read_results

    tree = Preset.load(args.preset)
    fams = list(tree.plan.families)
    base = args.base or next((f for f in fams if f"{f}+concept" in fams), fams[0])
    variant = args.variant or (f"{base}+concept" if f"{base}+concept" in fams else None)
    for name, f in (("--base", base), ("--variant", variant)):
        if f is not None and f not in fams:
            raise UserError(f"design: {name} {f!r} is not a family of the preset ({', '.join(fams)})")
    if args.question == "multiplier" and variant is None:
        raise UserError("design: the multiplier question needs --variant (the preset has no BASE+concept family)")
    pilot = read_results(args.pilot) if args.pilot else None
    if pilot is None and args.noise is None:
        raise UserError("design: give a noise level: --pilot RESULTS or --noise SD")
    noise = d.noise_from_pilot(pilot) if args.noise is None else d.NoiseModel(
        run_sd=args.noise, slice_sd=args.slice_noise or 0.0)
    if args.noise is None and args.slice_noise is not None:
        noise = d.NoiseModel(**{**noise.to_dict(), "slice_sd": args.slice_noise})
    planned = d.grid_from_plan(tree, label="planned")  # planned once: the stated truth and the search use it
    truth = d.truth_from_pilot(pilot, base, variant, multiplier=args.multiplier) if pilot is not None else \
        d.truth_for_grid(planned, base, multiplier=args.multiplier or 1.3)
    largest = max(max(v) for v in d.slices_of(tree).values())
    target = args.target_compute or 10 * largest
    progress, close = _progress(sys.stderr)
    design = d.search(tree, truth, noise, question=args.question, base=base, variant=variant, growth=args.growth,
                      target=target, power=args.power, false_alarm=args.false_alarm, halfwidth=args.halfwidth,
                      budget=args.budget, n_sims=args.sims, screen_sims=args.screen_sims, max_grids=args.max_grids,
                      n_boot=args.n_boot or d.DESIGN_BOOT, seed=args.seed, workers=args.workers,
                      progress=progress, planned=planned)
    close()
    out = Path(args.out)
    written = d.write_outputs(design, tree, out)
    sys.stdout.write(d.render(design) + "\n" + "wrote " + ", ".join(str(p) for p in written) + "\n")
    return 0


def _progress(stream, every_s: float | None = None):
    """(progress, close) of the design's simulations: a tqdm bar on a terminal; elsewhere (a log, a batch
    job) a plain line when a stage starts and at most every ``every_s`` seconds within one (default: the
    sweep's ``PLAIN_EVERY_S``, once a minute), with its ETA:
    ``design: grid 3 (of 135), growing: 14/40 simulated sweeps (ETA 0.4 min)``."""
    import time

    from tqdm.auto import tqdm

    from interpscale.orchestration.outcome import PLAIN_EVERY_S

    every_s = PLAIN_EVERY_S if every_s is None else every_s
    if getattr(stream, "isatty", lambda: False)():
        bar = tqdm(total=0, unit="sim", file=stream, leave=False)

        def progress(stage: str, done: int, total: int) -> None:
            bar.set_description(stage)
            bar.total, bar.n = total, done
            bar.refresh()

        return progress, bar.close
    state = {"stage": None, "start": 0.0, "shown": 0.0}

    def plain(stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if stage != state["stage"]:
            state.update(stage=stage, start=now, shown=0.0)
        elif now - state["shown"] < every_s and done < total:
            return
        state["shown"] = now
        rate = done / max(now - state["start"], 1e-9)
        eta = f" (ETA {(total - done) / rate / 60:.1f} min)" if 0 < done < total else ""
        stream.write(f"design: {stage}: {done}/{total} simulated sweeps{eta}\n" if total else f"design: {stage}\n")
        stream.flush()

    return plain, lambda: None
