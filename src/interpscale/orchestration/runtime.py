"""The planner's runtime estimate (docs/training.md, "The planner's runtime estimate"), and
the same estimate set against a finished sweep:

    t_run = n_train · t_step + n_eval · eval_batches · f_eval · t_step + RUN_FIXED_S

plus a start-up per job and the data's preparation, jobs ``max_parallel`` at a time.  On
the CPU ``t_step`` is timed (the mean of real steps: a median would miss the waits a long
job sees on a busy machine); a larger step (``MAX_TIMED_FLOPS``) and every GPU step is
(Eq. 23/24 + LM head) x batch tokens / the device's sustained rate.

Device peaks (for MFU, and the planner's ``--device`` table) are the vendors' dense (no 2:4
sparsity) BF16 tensor-core figures per GPU; MFU = achieved model FLOP/s (Eq. 23 / Eq. 24 FLOPs
per token x tokens/s) / (peak x GPUs).
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from interpscale._atomic import atomic_write_text
from interpscale.orchestration.config import LaunchConfig
from interpscale.orchestration.rundir import read_status
from interpscale.orchestration.spec import reservoir_steps, segments
from interpscale.errors import UserError

_log = logging.getLogger(__name__)

# (substring of torch.cuda.get_device_name(), dense BF16 FLOP/s), most specific first
GPU_PEAK_BF16: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM5 (e.g. "NVIDIA H100 80GB HBM3")
    ("H200", 989e12),
    ("GH200", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("A10", 125e12),
)

# the planner's --device choices: peak FLOP/s and the MFU it assumes (stated in the table)
PLAN_DEVICES: dict[str, dict[str, float]] = {
    "h100": {"peak": dict(GPU_PEAK_BF16)["H100"], "mfu": 0.40},
    "a100": {"peak": dict(GPU_PEAK_BF16)["A100"], "mfu": 0.40},
    "cpu": {"peak": float("nan"), "mfu": 0.30},  # peak measured on this machine (one matmul)
}


def gpu_peak_flops(name: str) -> float | None:
    """Dense BF16 peak FLOP/s of a GPU by its device name; None when not in the table."""
    return next((peak for key, peak in GPU_PEAK_BF16 if key.lower() in name.lower()), None)


def device_peak_flops(device: torch.device) -> float | None:
    """Peak of ``device`` for MFU: the GPU table on CUDA, None on CPU (no MFU reported)."""
    return gpu_peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None


@dataclass(frozen=True)
class CpuCalibration:
    """This machine's float32 matmul rate: ``flops`` (the median of ``repeats`` timed bursts
    after a warm-up, FLOP/s), ``spread`` ((max - min) / median of the bursts), ``threads``."""

    flops: float
    spread: float
    threads: int
    repeats: int


_CPU: dict[int, CpuCalibration] = {}
CALIBRATION_BURSTS = 7  # timed bursts of 512^3 GEMMs, 30 ms each, after two warm-up GEMMs


@contextlib.contextmanager
def num_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``n`` (unchanged when None) for the block."""
    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def cpu_calibration(threads: int | None = None) -> CpuCalibration:
    """The CPU's matmul rate on ``threads`` threads (default: the current count), cached per
    process and thread count.  The median of several short bursts after a warm-up is stable
    between calls where one 0.2 s burst including the thread pool's start-up was not (it
    moved 9x between two consecutive ``plan`` calls on a loaded machine)."""
    n = int(threads or torch.get_num_threads())
    if n not in _CPU:
        _CPU[n] = CpuCalibration(**stored_timing(["cpu_matmul", n], lambda: _calibrate(n)))
    return _CPU[n]


def _calibrate(n: int) -> dict[str, Any]:
    with num_threads(n):
        a = torch.randn(512, 512)
        torch.mm(a, a)
        torch.mm(a, a)
        rates = []
        for _ in range(CALIBRATION_BURSTS):
            t0, k = time.perf_counter(), 0
            while time.perf_counter() - t0 < 0.03:
                torch.mm(a, a)
                k += 1
            rates.append(2 * 512**3 * k / (time.perf_counter() - t0))
    med = statistics.median(rates)
    return {"flops": med, "spread": (max(rates) - min(rates)) / med, "threads": n, "repeats": CALIBRATION_BURSTS}


def cpu_peak_flops() -> float:
    """This machine's float32 matmul FLOP/s on the current thread count (:func:`cpu_calibration`)."""
    return cpu_calibration().flops


def sustained_flops(device: str, mfu: float | None = None) -> tuple[float, float]:
    """(sustained training FLOP/s per device, the MFU assumed) for a planner ``--device``."""
    if device not in PLAN_DEVICES:
        raise UserError(f"unknown device {device!r}; expected one of {sorted(PLAN_DEVICES)}")
    d = PLAN_DEVICES[device]
    u = d["mfu"] if mfu is None else float(mfu)
    if not 0 < u <= 1:
        raise UserError(f"MFU must be in (0, 1], got {u}")
    peak = cpu_peak_flops() if device == "cpu" else d["peak"]
    return peak * u, u


# -- timings stored per machine -------------------------------------------------------------------
TIMINGS = "step_times.json"  # $XDG_CACHE_HOME/interpscale/: {key: {seconds, ..., timed_at}}
_RETIME = [False]


def timings_path() -> Path:
    """Where this machine's timings are kept: ``$XDG_CACHE_HOME/interpscale/step_times.json``
    (``~/.cache/interpscale/step_times.json`` by default)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "interpscale" / TIMINGS


def _timing_key(parts: list) -> str:
    from importlib import metadata

    try:
        version = metadata.version("interpscale")
    except metadata.PackageNotFoundError:  # run from a source tree
        version = "source"
    return json.dumps([platform.node(), os.cpu_count(), torch.__version__, version, *parts], default=str)


def _read_timings() -> dict[str, dict]:
    try:
        table = json.loads(timings_path().read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def stored_timing(parts: list, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A timing measured once per machine (host, CPUs, torch and interpscale versions) and
    kept in :func:`timings_path`, so that ``plan`` and ``sweep launch`` of one plan price it
    the same; measured again inside :func:`retiming` (``--retime``).  The stored record has
    ``measure()``'s fields (and ``timed_at``, a ``time.time()``, dropped here)."""
    key = _timing_key(parts)
    known = None if _RETIME[0] else _read_timings().get(key)
    if known is None:
        known = {**measure(), "timed_at": time.time()}
        table = _read_timings()
        table[key] = known
        try:
            atomic_write_text(timings_path(), json.dumps(table, indent=0, sort_keys=True))
        except OSError as exc:  # a read-only home: the estimate is this process's alone
            _log.debug("runtime timings not stored in %s: %s", timings_path(), exc)
    return {k: v for k, v in known.items() if k != "timed_at"}


@contextlib.contextmanager
def retiming() -> Iterator[None]:
    """Plans made in the block time their steps again (``plan --retime``, ``sweep launch
    --retime``), replacing this machine's stored timings."""
    _TIMED.clear()
    _CPU.clear()
    _JOB_START.clear()
    _RETIME[0] = True
    try:
        yield
    finally:
        _RETIME[0] = False


# -- the runtime estimate ------------------------------------------------------------------------
WARMUP_STEPS = 2
TIMED_STEPS = 5  # at least, and for at least TIMED_WINDOW_S, at most MAX_TIMED_STEPS
TIMED_WINDOW_S = 0.3
MAX_TIMED_STEPS = 50
MAX_TIMED_FLOPS = 2e10  # per timed step (~1 s on one CPU core); larger steps are priced by FLOPs
RUN_FIXED_S = 0.5  # per run: build, run directory, TensorBoard, checkpoint writes, validation batches
JOB_START_S = 6.0  # per job, where not timed (GPU plans): a fresh interpreter's imports
EVAL_STEP_FRACTION = 1.3  # one evaluation batch (forward, estimator and interp passes, bytes) / one step
PREPARE_S_PER_DOC = 2e-3  # preparing a synthetic corpus (generation, BPE, shards), per document


@dataclass(frozen=True)
class StepTime:
    """Seconds per optimizer step and ``spread``: (max - min) / median of the timed steps, 0
    when priced by FLOPs."""

    seconds: float
    spread: float = 0.0


_TIMED: dict[str, StepTime] = {}


def _synthetic_batch(model: torch.nn.Module, rows: int, seq_len: int, concept: bool):
    """A [rows, seq_len] batch of random tokens; for a concept family, chunks of 8 tokens
    with random multi-hot labels (the shapes and work of a real batch)."""
    from interpscale.models.types import Batch

    cfg = model.config
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(4, int(cfg.vocab_size), (rows, seq_len), generator=g)
    n = int(getattr(cfg, "n_concepts", 0) or 0)
    if not (concept and n):
        return Batch(tokens)
    ids = (torch.arange(seq_len) // 8).expand(rows, seq_len).contiguous()
    labels = (torch.rand(rows, -(-seq_len // 8), n, generator=g) < 0.2).float()
    return Batch(tokens, ids, labels, torch.ones(rows, seq_len, dtype=torch.bool))


def time_step(family: str, size: str, seq_len: int, batch_tokens: int, *, threads: int | None = 1,
              **overrides: Any) -> StepTime:
    """Median seconds of one real training step (forward, backward, clipping, AdamW) of
    ``family``/``size`` at ``batch_tokens`` / ``seq_len`` rows, on ``threads`` threads."""
    key = json.dumps([family, size, seq_len, batch_tokens, threads, overrides], sort_keys=True, default=str)
    if key not in _TIMED:
        _TIMED[key] = StepTime(**stored_timing(["step", key], lambda: _time_step(
            family, size, seq_len, batch_tokens, threads=threads, **overrides)))
    return _TIMED[key]


def _time_step(family: str, size: str, seq_len: int, batch_tokens: int, *, threads: int | None,
               **overrides: Any) -> dict[str, float]:
    from interpscale.models import build_model, get_family
    from interpscale.models.types import PhaseSchedule

    with num_threads(threads):
        torch.manual_seed(0)
        model = build_model(family, size, **overrides)
        if hasattr(model, "set_phase"):
            model.set_phase(PhaseSchedule("stable", max_steps=1000))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # as the trainer steps
        batch = _synthetic_batch(model, batch_tokens // seq_len, seq_len, get_family(family).is_concept)
        times: list[float] = []
        while len(times) < WARMUP_STEPS + MAX_TIMED_STEPS and (
                len(times) < WARMUP_STEPS + TIMED_STEPS or sum(times[WARMUP_STEPS:]) < TIMED_WINDOW_S):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            model.loss(batch, len(times)).total.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            times.append(time.perf_counter() - t0)
    timed = times[WARMUP_STEPS:]
    mean = sum(timed) / len(timed)  # the mean, not the median: it keeps the waits a busy machine adds
    return {"seconds": mean, "spread": (max(timed) - min(timed)) / statistics.median(timed)}


_JOB_START: list = []  # [(start time, the probe process, then its seconds)]


# what a job does besides its runs' steps: import what a job imports, take its first
# (cold) training step, exit
_JOB_PROBE = """
import torch, torch.utils.tensorboard, interpscale.metrics
import interpscale.orchestration.launch, interpscale.orchestration.evaluate
from interpscale.models import build_model
from interpscale.models.types import Batch
torch.set_num_threads(1)
m = build_model("ar", "nano", vocab_size=64)
opt = torch.optim.AdamW(m.parameters(), fused=True)
m.loss(Batch(torch.zeros(1, 8, dtype=torch.long)), 0).total.backward()
opt.step()
"""


def start_job_probe() -> None:
    """Start timing a job's start-up in a subprocess (see :func:`job_start_seconds`), so that
    it overlaps the step timings; a no-op once started in this process, or when stored."""
    if not _JOB_START:
        known = None if _RETIME[0] else _read_timings().get(_timing_key(["job_start"]))
        _JOB_START.append((0.0, float(known["seconds"])) if known else (time.perf_counter(), subprocess.Popen(
            [sys.executable, "-c", _JOB_PROBE], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))


def job_start_seconds() -> float:
    """Seconds a fresh job costs besides its runs' steps (several, more on a loaded machine),
    timed by :data:`_JOB_PROBE` once per machine (:func:`stored_timing`); ``JOB_START_S``
    when the probe fails (not stored)."""
    start_job_probe()
    t0, probe = _JOB_START[0]
    if not isinstance(probe, float):
        rc = probe.wait(timeout=300)
        _JOB_START[0] = (t0, time.perf_counter() - t0 if rc == 0 else JOB_START_S)
        if rc == 0:
            stored_timing(["job_start"], lambda: {"seconds": _JOB_START[0][1]})
    return _JOB_START[0][1]


def run_seconds(spec, step: StepTime) -> float:
    """Estimated seconds to train and evaluate ``spec`` (the formula in the module docstring)."""
    segs = segments(spec)
    n_train = sum(s.length for s in segs)
    n_eval = len(segs) - 1 + len(set(reservoir_steps(spec)) | {spec.stable_steps})
    return step.seconds * (n_train + n_eval * spec.eval_batches * EVAL_STEP_FRACTION) + RUN_FIXED_S


def pack(costs: Sequence[float], per_job: int) -> list[list[int]]:
    """Longest-processing-time packing into ceil(n / ``per_job``) jobs (so the last job does
    not run alone while the other slots idle): each job's indices into ``costs``."""
    n_jobs = max(1, -(-len(costs) // max(1, per_job)))
    jobs: list[list[int]] = [[] for _ in range(n_jobs)]
    loads = [0.0] * n_jobs
    for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
        j = loads.index(min(loads))
        jobs[j].append(i)
        loads[j] += costs[i]
    return [j for j in jobs if j]


def sweep_seconds(run_s: Sequence[float], *, max_parallel: int = 1, runs_per_job: int = 1,
                  prepare_s: float = 0.0, job_start_s: float = JOB_START_S) -> float:
    """Wall time of a sweep of runs taking ``run_s`` seconds each, packed into jobs as
    ``launch`` packs them (:func:`pack`), ``max_parallel`` jobs at a time, each job paying
    ``job_start_s`` first."""
    if not run_s:
        return 0.0
    loads = [sum(run_s[i] for i in g) + job_start_s for g in pack(run_s, runs_per_job)]
    return prepare_s + max(sum(loads) / max(1, min(max_parallel, len(loads))), max(loads))


def measured_seconds(run_dir: str | Path) -> float | None:
    """A finished run's wall time, from its first start to its last write (status or results:
    training plus evaluation); None when it has not finished."""
    d = Path(run_dir)
    st = read_status(d)
    if st.get("state") != "done" or "started" not in st:
        return None
    end = max([st.get("finished", st["started"])] +
              [p.stat().st_mtime for p in (d / "results.parquet",) if p.exists()])
    return end - float(st["started"])


def reprice(estimate: dict[str, Any], max_parallel: int | None = None,
            runs_per_job: int | None = None) -> dict[str, Any]:
    """``estimate`` for jobs run ``max_parallel`` at a time with ``runs_per_job`` runs each
    (where they differ from the plan's): the same timed runs, packed again; nothing re-timed."""
    mp, per = max_parallel or estimate.get("max_parallel", 1), runs_per_job or estimate.get("runs_per_job", 1)
    if not estimate.get("runs") or (mp, per) == (estimate.get("max_parallel"), estimate.get("runs_per_job")):
        return estimate
    wall = sweep_seconds(list(estimate["runs"].values()), max_parallel=mp, runs_per_job=per,
                        prepare_s=float(estimate.get("prepare_s", 0.0)),
                        job_start_s=float(estimate.get("job_start_s", JOB_START_S)))
    return {**estimate, "wall_s": wall, "max_parallel": mp, "runs_per_job": per}


def estimate_report(estimate: dict[str, Any], measured_wall_s: float, run_dirs: Sequence[str | Path] = (), *,
                    max_parallel: int | None = None, runs_per_job: int | None = None,
                    since: float | None = None) -> str:
    """One line: the plan's runtime estimate (``Plan.estimate``, as ``plan`` showed it and
    SWEEP/sweep.json keeps it; :func:`reprice`-d for the launch's ``max_parallel`` /
    ``runs_per_job`` where they differ) against what this launch took.  measured/estimated
    is the ratio of the two when the launch trained every run the estimate covers; a launch
    that trained some of them (a resume: the runs of ``run_dirs`` that finished after
    ``since``, a ``time.time()``) says how many.  Each finished run's measured/estimated is
    summarised."""
    estimate = reprice(estimate, max_parallel, runs_per_job)
    runs = estimate.get("runs", {})
    if since is not None:
        run_dirs = [d for d in run_dirs if float(read_status(Path(d)).get("finished", 0)) >= since]
    if since is not None and not run_dirs:
        return f"runtime: measured {fmt_seconds(measured_wall_s)}; no run finished in this launch"
    est = float(estimate.get("wall_s", math.nan))
    if not est > 0:
        return f"runtime: measured {fmt_seconds(measured_wall_s)} (no estimate)"
    ran = {Path(d).name for d in run_dirs} & set(runs)
    if not run_dirs or ran == set(runs):
        line = (f"runtime: estimated {fmt_seconds(est)}, measured {fmt_seconds(measured_wall_s)} "
                f"(measured/estimated {measured_wall_s / est:.2f})")
    else:
        line = (f"runtime: estimated {fmt_seconds(est)} for all {len(runs)} runs; this launch finished "
                f"{len(run_dirs)} of them in {fmt_seconds(measured_wall_s)}")
    ratios = [m / runs[Path(d).name] for d in run_dirs
              if Path(d).name in runs and (m := measured_seconds(d)) is not None]
    if ratios:
        line += (f"; per run measured/estimated median {statistics.median(ratios):.2f} "
                 f"[{min(ratios):.2f}, {max(ratios):.2f}] over {len(ratios)} runs")
    return line


def estimate_line(estimate: dict[str, Any]) -> str:
    """``runtime estimate 2.1 min for 6 runs, 2 job(s) at a time, 1 run(s) per job (...)``:
    the plan's estimate as ``sweep launch`` shows it before training (``plan`` shows the same
    number as its ``estimated sweep wall time``)."""
    if not estimate.get("runs"):
        return "no runtime estimate"
    how = (f"steps timed once on this machine and kept in {timings_path()}; --retime times them again"
           if estimate.get("timed") else "steps priced by FLOPs")
    return (f"runtime estimate {fmt_seconds(float(estimate['wall_s']))} for {len(estimate['runs'])} runs, "
            f"{estimate.get('max_parallel', 1)} job(s) at a time, {estimate.get('runs_per_job', 1)} run(s) per job "
            f"({how})")


def fmt_seconds(s: float) -> str:
    """``12.3 s``, ``2.5 min``, ``1.2 h``, ``3.0 d`` or ``1.26e+87 d``; ``-`` when not finite."""
    if not math.isfinite(s):
        return "-"
    for unit, div in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= div:
            return f"{s / div:{'.3g' if s / div >= 1e5 else '.1f'}} {unit}"
    return f"{s:.1f} s"


def device_rate(device: str | None, flops_per_s: float | None, mfu: float | None,
                launch: LaunchConfig) -> tuple[float | None, dict]:
    """(sustained FLOP/s, or None on the CPU where steps are timed; the plan's device record)."""
    if flops_per_s:
        return float(flops_per_s), {"name": None, "rate": float(flops_per_s), "how": "given"}
    device = device or ("h100" if launch.gpus_per_node else "cpu")
    if device == "cpu":
        cal = cpu_calibration(launch.threads_per_job)
        u = sustained_flops("cpu", mfu)[1]  # the FLOP rate of steps too large to time
        return None, {"name": "cpu", "peak": cal.flops, "mfu": u, "rate": cal.flops * u, "spread": cal.spread,
                      "threads": cal.threads, "how": f"cpu, training steps timed on {cal.threads} thread(s)"}
    rate, u = sustained_flops(device, mfu)
    return rate, {"name": device, "peak": PLAN_DEVICES[device]["peak"], "mfu": u, "rate": rate, "how": device}


def price_runs(rows: list[dict], runs: dict[int, Any], rate: float | None,
               build_args: Callable[[dict], dict], *, seq_len: int, batch_tokens: int, launch: LaunchConfig,
               data: dict) -> dict[str, Any]:
    """Fill the plan rows' ``est_runtime_s`` (the main run's training steps) and ``est_run_s``
    (the whole run: :func:`run_seconds`) of the rows ``runs`` plans (row index -> RunSpec;
    ``build_args(row)`` is its build arguments); the plan's estimate record."""
    threads, max_parallel, per_job = launch.threads_per_job, launch.max_parallel, launch.runs_per_job
    per_run, spreads = {}, []
    if rate is None and runs:
        start_job_probe()  # a job's start-up, timed in a subprocess while the steps are
    for i, r in enumerate(rows):
        if r["steps"] < 1 or (rate is None and i not in runs):  # the CPU times planned points only
            continue
        flops = (r["M"] + r["M_head"]) * batch_tokens  # timed on the CPU when small enough, else priced
        timed = rate is None and flops <= MAX_TIMED_FLOPS
        st = (time_step(r["family"], r["size"], seq_len, batch_tokens, threads=threads, **build_args(r))
              if timed else StepTime(flops / (rate or sustained_flops("cpu")[0])))
        r["est_runtime_s"] = st.seconds * r["steps"]
        if i in runs:
            r["est_run_s"] = per_run[runs[i].run_id] = run_seconds(runs[i], st)
            spreads.append(st.spread)
    synthetic = data.get("kind", "synthetic") == "synthetic"  # prepared data costs nothing more
    prepare_s = PREPARE_S_PER_DOC * int(data.get("n_docs", 1000)) if synthetic else 0.0
    job_s = job_start_seconds() if rate is None and per_run else JOB_START_S
    wall = sweep_seconds(list(per_run.values()), max_parallel=max_parallel, runs_per_job=per_job,
                        prepare_s=prepare_s, job_start_s=job_s)
    return {"runs": per_run, "wall_s": wall, "prepare_s": prepare_s, "job_start_s": job_s,
            "max_spread": max(spreads, default=0.0), "max_parallel": max_parallel, "runs_per_job": per_job,
            "timed": rate is None}
