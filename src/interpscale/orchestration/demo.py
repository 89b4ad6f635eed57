"""``interpscale demo``: plan -> train (local executor) -> evaluate -> fit -> figures + report."""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from interpscale.orchestration.launch import Sweep
from interpscale.orchestration.planner import plan
from interpscale.orchestration.rundir import atomic_write_text, ensure_writable

log = logging.getLogger(__name__)


def run_demo(out_dir: str | os.PathLike = "runs/demo", *, quick: bool = False, max_parallel: int | None = None,
             executor: str | None = None, preset: str | os.PathLike | None = None) -> dict[str, Any]:
    """Run the embedded demo sweep end to end; returns a summary dict (also DIR/demo.json).

    ``preset`` replaces the embedded grid (``demo``, or ``demo-quick`` with ``quick``) by any
    preset name or TOML path, e.g. ``demo-zoo`` (CRATE and reEtym next to AR).

    Every stage after training degrades gracefully: if the scaling fitter or the
    report/figure builders are unavailable or fail, the error is logged and recorded in
    the summary, and the results table is still written.
    """
    t0 = time.monotonic()
    out = ensure_writable(out_dir)
    preset = str(preset) if preset is not None else ("demo-quick" if quick else "demo")
    p = plan(preset)
    launch = p.launch
    sweep = Sweep(p.runs, out / "sweep", executor=executor or launch.get("executor", "local"),
                  max_parallel=int(max_parallel or launch.get("max_parallel", 2)),
                  runs_per_job=int(launch.get("runs_per_job", max(1, len(p.runs) // (4 * 2)))),
                  threads_per_job=int(launch.get("threads_per_job", 1)))
    atomic_write_text(out / "plan.txt", p.summary() + "\n")
    log.info("demo: %d runs (%s)", len(p.runs), preset)
    sweep.launch()
    results = sweep.collect()
    from interpscale.orchestration.results import write_results

    write_results(results, out / "results.parquet")
    summary: dict[str, Any] = {"preset": preset, "runs": len(p.runs), "rows": len(results), "problems": []}
    t_train = time.monotonic() - t0

    fits = None
    try:
        from interpscale.scaling import fit_families

        fits = fit_families(results, annealed=True, n_boot=int(launch.get("n_boot", 100)), seed=0)
        fit_dir = out / "fits"
        fit_dir.mkdir(exist_ok=True)
        atomic_write_text(fit_dir / "fits.json", json.dumps(fits.to_dict(), indent=1, default=str))
        atomic_write_text(fit_dir / "fits.md", fits.to_markdown())
    except Exception as exc:  # the fitter belongs to another area; the table is still useful
        log.error("demo: scaling fits unavailable (%s: %s); results table written without fits",
                  type(exc).__name__, exc)
        summary["problems"].append(f"fits: {type(exc).__name__}: {exc}")
    run_dirs = [sweep.run_dir(r) for r in p.runs]
    try:  # the report draws its figures into DIR/figures as well
        from interpscale.analysis.report import write_report

        summary["report"] = str(write_report(results, out, fits=fits, run_dirs=run_dirs,
                                             n_boot=int(launch.get("n_boot", 100))))
    except Exception as exc:
        log.error("demo: report unavailable (%s: %s); drawing the figures alone", type(exc).__name__, exc)
        summary["problems"].append(f"report: {type(exc).__name__}: {exc}")
        try:
            from interpscale.analysis.figures import make_all_figures

            make_all_figures(results, out / "figures", fits=fits, run_dirs=run_dirs)
        except Exception as exc2:
            log.error("demo: figures unavailable (%s: %s)", type(exc2).__name__, exc2)
            summary["problems"].append(f"figures: {type(exc2).__name__}: {exc2}")
    summary["figures"] = sorted(str(f) for f in (out / "figures").glob("*.png"))
    summary["interior_minima"] = interior_minima(results)
    summary["wall_s"] = round(time.monotonic() - t0, 1)
    summary["train_eval_s"] = round(t_train, 1)
    atomic_write_text(out / "demo.json", json.dumps(summary, indent=1, default=str))
    return summary


def interior_minima(results) -> dict[str, str]:
    """Per family and slice, whether the lowest annealed loss is at an inner size."""
    out = {}
    if not len(results):
        return out
    df = results[results["annealed"].astype(bool)]
    for (fam, c), g in df.groupby(["family", "slice_flops"]):
        g = g.sort_values("params")
        i = int(g["loss"].to_numpy().argmin())
        out[f"{fam} C={c:.3g}"] = "interior" if 0 < i < len(g) - 1 else "edge"
    return out
