"""Launching a sweep with submitit: ``local`` (bounded concurrency), ``slurm`` (job arrays), ``debug``.

A job is a list of runs trained (then evaluated) one after another; jobs are
``Checkpointable``, so on preemption / timeout submitit requeues them and every run
resumes from its last saved state.  Finished runs (status ``done`` and evaluated) are
never submitted again.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import submitit
from tqdm.auto import tqdm

from interpscale.orchestration.rundir import atomic_write_text, ensure_writable, read_status
from interpscale.orchestration.spec import RunSpec

log = logging.getLogger(__name__)
EXECUTORS = ("local", "slurm", "debug")


def _job_world() -> tuple[int, int, int]:
    """(global rank, local rank, number of tasks) of this submitit job; (0, 0, 1) outside one."""
    try:
        env = submitit.JobEnvironment()
        return env.global_rank, env.local_rank, env.num_tasks
    except RuntimeError:  # not inside a submitit job (e.g. called directly)
        return 0, 0, 1


class TrainJob(submitit.helpers.Checkpointable):
    """Train + evaluate a list of runs; re-submitted unchanged on preemption (each run resumes).

    With several tasks (``tasks_per_node`` x ``nodes``) the tasks form one
    ``torch.distributed`` group (NCCL on GPUs, gloo on CPU) from submitit's
    ``TorchDistributedEnvironment``; each binds ``cuda:<local rank>``.
    """

    def __call__(self, run_dirs: list[str], data_root: str, threads: int = 1, evaluate: bool = True,
                 distributed: bool | None = None, save_every_s: float = 60.0,
                 train: dict[str, Any] | None = None) -> list[dict]:
        import torch

        from interpscale.orchestration.evaluate import evaluate_run
        from interpscale.orchestration.rundir import write_status
        from interpscale.orchestration.trainer import train_run

        torch.set_num_threads(max(1, threads))
        rank, local_rank, n_tasks = _job_world()
        distributed = n_tasks > 1 if distributed is None else distributed
        device = None
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank)
            device = f"cuda:{local_rank}"
        if distributed:
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
            torch.distributed.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
            rank = torch.distributed.get_rank()
        out = []
        try:
            for d in run_dirs:
                spec = RunSpec.load(d)
                try:
                    status = train_run(spec, d, data_root=data_root, progress=False, save_every_s=save_every_s,
                                       device=device, **(train or {}))
                    if evaluate and rank == 0:
                        evaluate_run(d, device=device)
                except Exception as exc:
                    if rank == 0:
                        write_status(Path(d), "failed", error=f"{type(exc).__name__}: {exc}")
                    raise
                out.append(status)
        finally:
            if distributed:
                torch.distributed.destroy_process_group()
        return out


class EvalJob(submitit.helpers.Checkpointable):
    """Evaluate run directories (on the job's GPU when it has one); resumable per checkpoint."""

    def __call__(self, run_dirs: list[str], threads: int = 1, eval_batch_tokens: int | None = None) -> int:
        import torch

        from interpscale.orchestration.evaluate import evaluate_run

        torch.set_num_threads(max(1, threads))
        device = "cuda" if torch.cuda.is_available() else None
        return sum(len(evaluate_run(d, device=device, eval_batch_tokens=eval_batch_tokens)) for d in run_dirs)


# Relative cost of a run for packing runs into jobs: a fixed cost per optimizer step (launch,
# optimizer, logging: what dominates small models) plus its FLOPs. Fitted to the 57 runs of
# the CPU demo (R² 0.92 against 0.31 for FLOPs alone); only the ratio matters for packing.
STEP_COST_S = 7.5e-3
FLOP_COST_S = 7.4e-11


def run_cost(spec: RunSpec) -> float:
    """Estimated seconds to train ``spec`` (for ordering and packing, not for planning)."""
    return spec.steps * STEP_COST_S + spec.flops * FLOP_COST_S


@dataclass
class Sweep:
    """A set of RunSpecs under one directory: ``SWEEP/runs/<run_id>/``, shared data in ``SWEEP/_data``.

    ``launch()`` submits every unfinished run and waits (a live progress line on stderr);
    ``status()`` is the per-run table; ``evaluate()`` (re)evaluates every trained run
    through the same executor; ``collect()`` merges the per-run results into
    SWEEP/results.parquet (+ .csv).

    ``executor`` is ``"local" | "slurm" | "debug"`` or a submitit executor object
    configured by the caller (submitit's own style: ``AutoExecutor(...)`` +
    ``update_parameters``).  ``nodes`` x ``tasks_per_node`` tasks (one per GPU) train each
    run data-parallel; ``micro_batch_tokens`` / ``parallel`` / ``compile`` go to the
    :class:`~interpscale.orchestration.trainer.Trainer`.
    """

    runs: Sequence[RunSpec]
    out_dir: str | os.PathLike
    executor: Any = "local"
    max_parallel: int = 2  # local: jobs running at once (LocalExecutor alone starts them all)
    runs_per_job: int = 1
    threads_per_job: int = 1
    evaluate: bool = True
    slurm: dict[str, Any] = field(default_factory=dict)  # partition, timeout_min, cpus_per_task, ...
    tasks_per_node: int = 1  # >1: one task per GPU with torch.distributed
    nodes: int = 1
    save_every_s: float = 60.0  # resume-state cadence: the work a preemption can lose
    micro_batch_tokens: int | None = None  # per rank and micro-batch; None: the whole per-rank share
    parallel: str = "ddp"  # or "fsdp" (FSDP2 fully_shard) for models that do not fit one device
    compile: bool | None = None  # torch.compile the loss (default: on CUDA only)
    progress: bool = True  # the live runs done / running / failed line on stderr

    def __post_init__(self) -> None:
        if isinstance(self.executor, str) and self.executor not in EXECUTORS:
            raise ValueError(f"unknown executor {self.executor!r}; expected one of {EXECUTORS} "
                             f"or a submitit executor object")
        if not isinstance(self.executor, (str, submitit.Executor)):
            raise ValueError(f"executor must be one of {EXECUTORS} or a submitit.Executor, "
                             f"got {type(self.executor).__name__}")
        if self.max_parallel < 1 or self.runs_per_job < 1:
            raise ValueError("max_parallel and runs_per_job must be >= 1")
        if self.nodes < 1 or self.tasks_per_node < 1:
            raise ValueError(f"nodes and tasks_per_node must be >= 1 (got {self.nodes}, {self.tasks_per_node})")
        from interpscale.orchestration.parallel import PARALLEL

        if self.parallel not in PARALLEL:
            raise ValueError(f"unknown parallelism {self.parallel!r}; expected one of {PARALLEL}")
        ids = [r.run_id for r in self.runs]
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate RunSpecs in sweep")
        world = self.nodes * self.tasks_per_node
        for r in self.runs:  # Table 24's global batch whatever the world size: it must split evenly
            if r.batch_size % world:
                raise ValueError(f"{r.run_id}: batch of {r.batch_size} sequences does not split over "
                                 f"{world} tasks ({self.nodes} nodes x {self.tasks_per_node})")
        self.out_dir = ensure_writable(self.out_dir)
        self.manifest = self.out_dir / "sweep.json"

    @property
    def executor_name(self) -> str:
        return self.executor if isinstance(self.executor, str) else type(self.executor).__name__

    def run_dir(self, spec: RunSpec) -> Path:
        return Path(self.out_dir) / "runs" / spec.run_id

    def _evaluated(self, d: Path) -> bool:
        from interpscale.orchestration.results import read_results

        evaluated = set(read_results(d / "results.parquet", missing_ok=True).get("checkpoint", []))
        return {p.name for p in (d / "checkpoints").glob("*.pt")} <= evaluated

    def _finished(self, spec: RunSpec) -> bool:
        d = self.run_dir(spec)
        if read_status(d).get("state") != "done":
            return False
        return not self.evaluate or self._evaluated(d)

    def _prepare(self) -> list[RunSpec]:
        from interpscale.orchestration.trainer import init_run_dir

        known = json.loads(self.manifest.read_text()) if self.manifest.exists() else []
        ids = sorted(set(known) | {r.run_id for r in self.runs})
        atomic_write_text(self.manifest, json.dumps(ids, indent=1))
        todo = [r for r in self.runs if not self._finished(r)]
        for r in todo:  # data is built once here, not raced by the jobs
            init_run_dir(r, self.run_dir(r), self.out_dir / "_data")
        return todo

    def _groups(self, todo: list[RunSpec]) -> list[list[str]]:
        """Longest-processing-time packing of runs into jobs of ~runs_per_job runs, by
        :func:`run_cost` (so the last job does not run alone while the other slots idle)."""
        n_jobs = max(1, -(-len(todo) // self.runs_per_job))
        groups: list[list[RunSpec]] = [[] for _ in range(n_jobs)]
        loads = [0.0] * n_jobs
        for r in sorted(todo, key=lambda r: -run_cost(r)):
            i = loads.index(min(loads))
            groups[i].append(r)
            loads[i] += run_cost(r)
        return [[str(self.run_dir(r)) for r in g] for g in groups if g]

    def _executor(self):
        if not isinstance(self.executor, str):
            return self.executor
        folder = Path(self.out_dir) / "submitit" / "%j"
        if self.executor == "debug":
            return submitit.DebugExecutor(folder=folder)
        if self.executor == "local":
            ex = submitit.LocalExecutor(folder=folder)
            ex.update_parameters(timeout_min=self.slurm.get("timeout_min", 24 * 60),
                                 tasks_per_node=self.tasks_per_node * self.nodes)
            return ex
        ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
        params = {"timeout_min": 60, **{k: v for k, v in self.slurm.items() if k != "max_array_size"}}
        params.setdefault("nodes", self.nodes)
        params.setdefault("tasks_per_node", self.tasks_per_node)
        params.setdefault("slurm_array_parallelism", self.max_parallel)
        ex.update_parameters(**params)
        return ex

    def _train_options(self) -> dict[str, Any]:
        return {"micro_batch_tokens": self.micro_batch_tokens, "parallel": self.parallel, "compile": self.compile}

    def launch(self, wait: bool = True) -> list[submitit.Job]:
        """Submit every unfinished run; with ``wait`` block until all jobs end (showing
        runs done / running / failed / total and an ETA) and raise if any failed (other
        runs' results are kept)."""
        todo = self._prepare()
        if not todo:
            log.info("sweep %s: all %d runs finished", self.out_dir, len(self.runs))
            return []
        groups = self._groups(todo)
        ex = self._executor()
        args = (str(Path(self.out_dir) / "_data"), self.threads_per_job, self.evaluate, None,
                self.save_every_s, self._train_options())
        log.info("sweep %s: %d runs in %d jobs (%s)", self.out_dir, len(todo), len(groups), self.executor_name)
        return self._run(ex, TrainJob(), groups, args, wait, what="trained")

    def evaluate_runs(self, wait: bool = True, eval_batch_tokens: int | None = None) -> list[submitit.Job]:
        """Evaluate every trained run not yet fully evaluated, through the sweep's executor."""
        todo = [r for r in self.runs if read_status(self.run_dir(r)).get("state") == "done"
                and not self._evaluated(self.run_dir(r))]
        if not todo:
            return []
        groups = self._groups(todo)
        return self._run(self._executor(), EvalJob(), groups, (self.threads_per_job, eval_batch_tokens), wait,
                         what="evaluated")

    def _run(self, ex, fn, groups, args, wait: bool, what: str) -> list[submitit.Job]:
        if isinstance(ex, submitit.LocalExecutor):
            jobs = self._local_pool(ex, fn, groups, args)
        else:
            jobs = self._submit_array(ex, fn, groups, args)
        if wait:
            self._wait(jobs, groups, what)
        return jobs

    def _wait(self, jobs: list[submitit.Job], groups: list[list[str]], what: str) -> None:
        self._watch(jobs, groups, what)
        errors = []
        for j in jobs:
            try:
                j.results()
            except Exception as exc:  # keep waiting for the others; report all at the end
                errors.append(f"job {j.job_id}: {type(exc).__name__}: {exc}")
        if errors:
            raise RuntimeError("some sweep jobs failed (finished runs are kept):\n" + "\n".join(errors))

    def _submit_array(self, ex, fn, groups, args) -> list[submitit.Job]:
        # chunk to the cluster's MaxArraySize; submitit's map_array makes one array per call
        slurm = isinstance(ex, (submitit.AutoExecutor, submitit.SlurmExecutor))
        max_array = int(self.slurm.get("max_array_size") or (_max_array_size() if slurm else None) or 1000)
        jobs = []
        for i in range(0, len(groups), max_array):
            chunk = groups[i: i + max_array]
            n = len(chunk)
            jobs += ex.map_array(fn, chunk, *[[a] * n for a in args])
        return jobs

    def _local_pool(self, ex, fn, groups, args) -> list[submitit.Job]:
        pending, running, finished = list(groups), [], []
        progress = SweepProgress(self, groups, "running") if self.progress else None
        try:
            while pending or running:
                while pending and len(running) < self.max_parallel:
                    running.append(ex.submit(fn, pending.pop(0), *args))
                time.sleep(0.2)
                still = []
                for j in running:
                    (finished if j.done() else still).append(j)
                running = still
                if progress is not None:
                    progress.update(finished)
        finally:
            if progress is not None:
                progress.close()
        return finished

    def _watch(self, jobs: list[submitit.Job], groups: list[list[str]], what: str) -> None:
        """Poll until every job ends, updating the progress line (no-op for finished pools)."""
        if all(j.done() for j in jobs):
            return
        progress = SweepProgress(self, groups, what) if self.progress else None
        try:
            while not all(j.done() for j in jobs):
                if progress is not None:
                    progress.update([j for j in jobs if j.done()])
                time.sleep(2.0)
        finally:
            if progress is not None:
                progress.close()

    def status(self) -> pd.DataFrame:
        rows = []
        for r in self.runs:
            st = read_status(self.run_dir(r))
            res = self.run_dir(r) / "results.parquet"
            rows.append({"run_id": r.run_id, "family": r.family, "size": r.size, "slice_flops": r.slice_flops,
                         "steps": r.steps, "state": st.get("state"), "segments_done": len(st.get("segments_done", [])),
                         "evaluated": res.exists()})
        return pd.DataFrame(rows)

    def collect(self) -> pd.DataFrame:
        from interpscale.orchestration.results import collect

        return collect([self.run_dir(r) for r in self.runs], Path(self.out_dir) / "results.parquet")

    @classmethod
    def from_dir(cls, out_dir: str | os.PathLike, **kwargs: Any) -> "Sweep":
        """Re-open a sweep from its manifest (for ``sweep status`` / ``sweep collect``)."""
        out = Path(out_dir)
        if not (out / "sweep.json").exists():
            raise ValueError(f"{out} is not a sweep directory (no sweep.json)")
        ids = json.loads((out / "sweep.json").read_text())
        runs = [RunSpec.load(out / "runs" / i) for i in ids if (out / "runs" / i / "spec.json").exists()]
        return cls(runs, out, **kwargs)


class SweepProgress:
    """``runs done / running / failed / total`` with an ETA, on stderr (tqdm), from the
    runs' status files and the jobs that ended."""

    def __init__(self, sweep: Sweep, groups: list[list[str]], what: str):
        self.sweep, self.groups, self.what = sweep, groups, what
        self.dirs = [Path(d) for g in groups for d in g]
        self.bar = tqdm(total=len(self.dirs), desc=f"sweep {Path(sweep.out_dir).name}: runs {what}", unit="run",
                        file=sys.stderr, dynamic_ncols=True, mininterval=1.0, smoothing=0.0)
        self._last = 0.0

    def update(self, ended_jobs: list[submitit.Job]) -> None:
        now = time.monotonic()
        if now - self._last < 1.0:
            return
        self._last = now
        states = [read_status(d).get("state") for d in self.dirs]
        done = sum(self.sweep._evaluated(d) for d in self.dirs) if self.what == "evaluated" else \
            sum(s == "done" for s in states)
        failed = sum(s == "failed" for s in states)
        running = sum(s == "running" for s in states)
        self.bar.n = done
        self.bar.set_postfix_str(f"running {running}, failed {failed}, total {len(self.dirs)}", refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self.update([])
        self._last = 0.0
        self.update([])
        self.bar.close()


def _max_array_size() -> int | None:
    """MaxArraySize from ``scontrol show config`` (array indices must be < it)."""
    import subprocess

    try:
        out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        if line.strip().startswith("MaxArraySize"):
            return max(1, int(line.split("=")[1]) - 1)
    return None
