"""The end-to-end pipeline behind ``interpscale demo`` (``STAGES``), above both ``orchestration``
and ``analysis``; after training a failed stage is a problem in the summary, not an end.
"""

from __future__ import annotations

import json
import logging
import os
import time
from contextlib import contextmanager
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from interpscale import paper
from interpscale._atomic import atomic_write_text
from interpscale.analysis.figures import figure_options
from interpscale.analysis.fit_status import fit_statuses
from interpscale.analysis.report import report_options, write_report
from interpscale.design import with_powers
from interpscale.errors import FailedWork
from interpscale.judges import build_judge
from interpscale.metrics.checkpoint_judging import judge_checkpoint_alignment
from interpscale.models import FAMILIES
from interpscale.orchestration import plan, write_results
from interpscale.orchestration.launch import Sweep
from interpscale.orchestration.outcome import SweepIncomplete, SweepOutcome
from interpscale.orchestration.rundir import ensure_writable
from interpscale.orchestration.runtime import estimate_report
from interpscale.scaling import analyse

log = logging.getLogger(__name__)

STAGES = ("plan", "train + evaluate", "collect", "judge alignment", "fit", "figures + report")


class PipelineError(FailedWork):
    """The pipeline could not produce any result (every run failed, no rows to fit): exit 1."""


def run_demo(out_dir: str | os.PathLike = "runs/demo", *, quick: bool = False, max_parallel: int | None = None,
             executor: str | None = None, preset: str | os.PathLike | None = None,
             n_boot: int | None = None) -> dict[str, Any]:
    """Run the demo sweep (``preset``, default ``demo`` / ``demo-quick``) end to end; returns the
    summary (also DIR/demo.json): slice minima, fit statuses, stage times. ``PipelineError`` when
    no run produced a row."""
    t0, cpu0 = time.monotonic(), _cpu_seconds()
    times: dict[str, float] = {}
    out = ensure_writable(out_dir)
    preset = str(preset) if preset is not None else ("demo-quick" if quick else "demo")
    summary: dict[str, Any] = {"preset": preset, "problems": []}
    with tqdm(total=len(STAGES), unit="stage", disable=None, leave=False) as bar:
        with _timed(bar, times, 0, "plan", preset):
            p = plan(preset)  # the preset is loaded and validated here, once; its tree travels in p.config
            tree = p.config
            boot = int(n_boot or tree.fit.n_boot)
            parallel = int(max_parallel or tree.launch.max_parallel)
            atomic_write_text(out / "plan.txt", p.summary() + "\n")
            summary["runs"] = len(p.runs)
        with _timed(bar, times, 1, "train + evaluate", f"{len(p.runs)} runs"):
            sweep = Sweep.from_plan(p, out / "sweep", executor=executor, max_parallel=parallel)
            run_dirs = [sweep.run_dir(r) for r in p.runs]
            t_launch, since = time.monotonic(), time.time()
            try:
                sweep.launch()
            except SweepIncomplete as exc:  # the runs that finished are fitted; the demo exits 1 at the end
                log.error("demo: %s", exc)
            outcome = SweepOutcome.read(sweep.out_dir.name, run_dirs)
            summary["sweep"], summary["sweep_complete"] = outcome.line(), outcome.complete
            summary["runtime"] = estimate_report(  # planned vs measured
                p.estimate, time.monotonic() - t_launch, run_dirs, max_parallel=sweep.max_parallel,
                runs_per_job=sweep.runs_per_job, since=since)
        with _timed(bar, times, 2, "collect"):
            results, results_path = _collect(sweep, len(p.runs), out, summary)
        with _timed(bar, times, 3, "judge alignment"):
            with _problem(summary, "alignment", "known concept alignment not scored (%s)",
                          ValueError, OSError, RuntimeError):
                results = judge_alignment(results, sweep.run_dir, p.runs)
                write_results(results, results_path)
            empty = [c for c in paper.INTERP_METRICS if c in results.columns and not results[c].notna().any()
                     and _concept_rows(results).any()]
            if empty:
                summary["problems"].append(f"metric column(s) {empty} are empty in every row")
        fits = analysis = None
        with _timed(bar, times, 4, "fit", f"{results['family'].nunique()} families, {boot} bootstrap replicates"):
            with _problem(summary, "fits", "scaling fits failed (%s); results table written without fits",
                          ValueError, ArithmeticError):  # fits.json as `interpscale fit` writes it
                # what the report shows, with what its figures draw (one analysis for both)
                analysis = analyse(results, figure_options(results, report_options(n_boot=boot, annealed=True)))
                if tree.fit.power_sims:  # an undetermined verdict comes with the power it had (docs/design.md)
                    analysis = with_powers(analysis, n_sims=tree.fit.power_sims)
                fitted = analysis.require_fits()
                atomic_write_text(out / "fits" / "fits.json", fitted.to_json() + "\n")
                fits = fitted
        with _timed(bar, times, 5, "figures + report"):
            with _problem(summary, "report", "report failed (%s)", ValueError, OSError):  # and DIR/figures
                summary["report"] = str(write_report(results, out, analysis=analysis, run_dirs=run_dirs, n_boot=boot,
                                                     source=str(results_path)))
    _finish(summary, out, results, fits, times, t0, cpu0, parallel)
    return summary


@contextmanager
def _timed(bar, times: dict[str, float], i: int, name: str, detail: str = ""):
    """One stage: its progress line, its wall time in ``times`` (keyed by its name)."""
    t = time.monotonic()
    bar.set_description(f"demo [{i + 1}/{len(STAGES)}] {name}")
    log.info("demo: stage %d/%d %s%s", i + 1, len(STAGES), name, f" ({detail})" if detail else "")
    yield
    times[name.replace(" + ", "_").split(" ")[0]] = time.monotonic() - t  # plan, train_evaluate, ..., judge
    bar.update()


def _collect(sweep, n_runs: int, out, summary: dict[str, Any]):
    """Stage 3: the sweep's results table (DIR/results.parquet); PipelineError when empty."""
    results = sweep.collect()
    results_path = write_results(results, out / "results.parquet")
    summary.update(results=str(results_path), rows=len(results))
    if not len(results):
        raise PipelineError(f"demo: none of the {n_runs} runs produced a result; see {out / 'sweep'}")
    summary["runs_failed"] = n_runs - int(results["run_id"].nunique())
    if summary["runs_failed"]:
        summary["problems"].append(f"{summary['runs_failed']} of {n_runs} runs produced no result")
    return results, results_path


@contextmanager
def _problem(summary: dict[str, Any], name: str, what: str, *errors: type[Exception]):
    """A stage after training that raises one of ``errors``: logged ("demo: " + ``what`` % the
    exception) and listed in the summary's problems, not an end."""
    try:
        yield
    except errors as exc:
        log.error("demo: " + what, exc)
        summary["problems"].append(f"{name}: {type(exc).__name__}: {exc}")


def _finish(summary: dict[str, Any], out, results: pd.DataFrame, fits, times: dict[str, float], t0: float,
            cpu0: float, parallel: int) -> None:
    """The summary's slice, fit and timing fields; DIR/demo.json."""
    summary["figures"] = sorted(str(f) for f in (out / "figures").glob("*.png"))
    summary["interior_minima"] = interior_minima(results)
    n_in = sum(v == "interior" for v in summary["interior_minima"].values())
    summary["interior_minima_count"] = f"{n_in} of {len(summary['interior_minima'])} slices"
    summary["fit_status"] = fit_statuses(fits) if fits is not None else {}
    summary["wall_s"] = round(time.monotonic() - t0, 1)
    summary["stage_s"] = {k: round(v, 1) for k, v in times.items()}
    summary["load_average"] = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    summary["cpu_s"] = round(_cpu_seconds() - cpu0, 1)
    # on a busy machine wall time says little: CPU time / cores in use is the idle-machine estimate
    summary["idle_estimate_s"] = round(summary["cpu_s"] / max(1, min(os.cpu_count() or 1, parallel)), 1)
    atomic_write_text(out / "demo.json", json.dumps(summary, indent=1, default=str))


def _cpu_seconds() -> float:
    """User + system CPU time of this process and every child it has waited for (the jobs)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _concept_rows(results: pd.DataFrame) -> pd.Series:  # "has concepts" is a registry fact
    return results["family"].astype(str).map(lambda f: f in FAMILIES and FAMILIES[f].is_concept).astype(bool)


def judge_alignment(results: pd.DataFrame, run_dir, runs, *, judge: Any = None, k: int = 20) -> pd.DataFrame:
    """Fill ``known_concept_alignment`` for every concept-family checkpoint in ``results``
    (its concepts' top-k tokens judged 1-5, App. E) and name the judge in ``alignment_judge``.

    Without a configured endpoint the judge is the offline lexical backend, a word-overlap
    proxy on the judge's scale (``interpscale judge alignment`` rescores with an LLM)."""
    out = results.copy()
    rows = out.index[_concept_rows(out) & out.get("checkpoint", pd.Series(index=out.index, dtype=object)).notna()]
    if not len(rows):
        return out
    judge = build_judge(judge)
    name = getattr(judge, "backend", None) or type(judge).__name__
    dirs = {r.run_id: run_dir(r) for r in runs}
    out["known_concept_alignment"] = pd.to_numeric(out.get("known_concept_alignment"), errors="coerce")
    out["alignment_judge"] = out.get("alignment_judge", pd.Series(index=out.index, dtype=object))
    for i in tqdm(rows, desc="judge alignment", unit="ckpt", disable=None, leave=False):
        if pd.notna(out.at[i, "known_concept_alignment"]):
            continue
        rd = dirs.get(out.at[i, "run_id"])
        ckpt = rd / "checkpoints" / str(out.at[i, "checkpoint"]) if rd is not None else None
        if ckpt is None or not ckpt.exists():
            continue
        res = judge_checkpoint_alignment(ckpt, run_dir=rd, k=k, judge=judge)
        out.at[i, "known_concept_alignment"] = float(res.mean)
        out.at[i, "alignment_judge"] = str(name)
    return out


def interior_minima(results: pd.DataFrame) -> dict[str, str]:
    """Per family and slice, whether the lowest annealed loss is at an inner size."""
    out: dict[str, str] = {}
    if not len(results):
        return out
    df = results[results["annealed"].astype(bool)] if "annealed" in results.columns else results
    for (fam, c), g in df.groupby(["family", "slice_flops"]):
        g = g.sort_values("params")
        i = int(g["loss"].to_numpy().argmin())
        out[f"{fam} C={c:.3g}"] = "interior" if 0 < i < len(g) - 1 else "edge"
    return out
