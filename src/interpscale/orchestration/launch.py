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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import submitit

from interpscale.orchestration.rundir import atomic_write_text, ensure_writable, read_status
from interpscale.orchestration.spec import RunSpec

log = logging.getLogger(__name__)
EXECUTORS = ("local", "slurm", "debug")


class TrainJob(submitit.helpers.Checkpointable):
    """Train + evaluate a list of runs; re-submitted unchanged on preemption (each run resumes)."""

    def __call__(self, run_dirs: list[str], data_root: str, threads: int = 1, evaluate: bool = True,
                 distributed: bool = False, save_every_s: float = 60.0) -> list[dict]:
        import torch

        from interpscale.orchestration.evaluate import evaluate_run
        from interpscale.orchestration.trainer import train_run

        torch.set_num_threads(max(1, threads))
        rank = 0
        if distributed:
            env = submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
            torch.distributed.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
            rank = env.rank
        out = []
        try:
            for d in run_dirs:
                spec = RunSpec.load(d)
                status = train_run(spec, d, data_root=data_root, progress=False, save_every_s=save_every_s)
                if evaluate and rank == 0:
                    evaluate_run(d)
                out.append(status)
        finally:
            if distributed:
                torch.distributed.destroy_process_group()
        return out


@dataclass
class Sweep:
    """A set of RunSpecs under one directory: ``SWEEP/runs/<run_id>/``, shared data in ``SWEEP/_data``.

    ``launch()`` submits every unfinished run and waits; ``status()`` is the per-run
    table; ``collect()`` merges the per-run results into SWEEP/results.parquet (+ .csv).
    """

    runs: Sequence[RunSpec]
    out_dir: str | os.PathLike
    executor: str = "local"
    max_parallel: int = 2  # local: jobs running at once (LocalExecutor alone starts them all)
    runs_per_job: int = 1
    threads_per_job: int = 1
    evaluate: bool = True
    slurm: dict[str, Any] = field(default_factory=dict)  # partition, timeout_min, gpus_per_node, ...
    tasks_per_node: int = 1  # >1: one task per GPU with torch.distributed
    save_every_s: float = 60.0  # resume-state cadence: the work a preemption can lose

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(f"unknown executor {self.executor!r}; expected one of {EXECUTORS}")
        if self.max_parallel < 1 or self.runs_per_job < 1:
            raise ValueError("max_parallel and runs_per_job must be >= 1")
        ids = [r.run_id for r in self.runs]
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate RunSpecs in sweep")
        self.out_dir = ensure_writable(self.out_dir)
        self.manifest = self.out_dir / "sweep.json"

    def run_dir(self, spec: RunSpec) -> Path:
        return Path(self.out_dir) / "runs" / spec.run_id

    def _finished(self, spec: RunSpec) -> bool:
        d = self.run_dir(spec)
        if read_status(d).get("state") != "done":
            return False
        if not self.evaluate:
            return True
        from interpscale.orchestration.results import read_results

        evaluated = set(read_results(d / "results.parquet", missing_ok=True).get("checkpoint", []))
        return {p.name for p in (d / "checkpoints").glob("*.pt")} <= evaluated

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
        """Longest-processing-time packing of runs into jobs of ~runs_per_job runs."""
        n_jobs = max(1, -(-len(todo) // self.runs_per_job))
        groups: list[list[RunSpec]] = [[] for _ in range(n_jobs)]
        loads = [0.0] * n_jobs
        for r in sorted(todo, key=lambda r: -r.flops):
            i = loads.index(min(loads))
            groups[i].append(r)
            loads[i] += r.flops
        return [[str(self.run_dir(r)) for r in g] for g in groups if g]

    def _executor(self):
        folder = Path(self.out_dir) / "submitit" / "%j"
        if self.executor == "debug":
            return submitit.DebugExecutor(folder=folder)
        if self.executor == "local":
            ex = submitit.LocalExecutor(folder=folder)
            ex.update_parameters(timeout_min=self.slurm.get("timeout_min", 24 * 60),
                                 tasks_per_node=self.tasks_per_node)
            return ex
        ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
        params = {"timeout_min": 60, **{k: v for k, v in self.slurm.items() if k != "max_array_size"}}
        if self.tasks_per_node > 1:
            params.setdefault("tasks_per_node", self.tasks_per_node)
        params.setdefault("slurm_array_parallelism", self.max_parallel)
        ex.update_parameters(**params)
        return ex

    def launch(self, wait: bool = True) -> list[submitit.Job]:
        """Submit every unfinished run; with ``wait`` block until all jobs end and raise
        if any failed (other runs' results are kept)."""
        todo = self._prepare()
        if not todo:
            log.info("sweep %s: all %d runs finished", self.out_dir, len(self.runs))
            return []
        groups = self._groups(todo)
        ex = self._executor()
        args = (str(Path(self.out_dir) / "_data"), self.threads_per_job, self.evaluate, self.tasks_per_node > 1,
                self.save_every_s)
        log.info("sweep %s: %d runs in %d jobs (%s)", self.out_dir, len(todo), len(groups), self.executor)
        if self.executor == "local":
            jobs = self._local_pool(ex, groups, args)
        else:
            jobs = self._submit_array(ex, groups, args)
        if wait:
            errors = []
            for j in jobs:
                try:
                    j.results()
                except Exception as exc:  # keep waiting for the others; report all at the end
                    errors.append(f"job {j.job_id}: {type(exc).__name__}: {exc}")
            if errors:
                raise RuntimeError("some sweep jobs failed (finished runs are kept):\n" + "\n".join(errors))
        return jobs

    def _submit_array(self, ex, groups, args) -> list[submitit.Job]:
        # chunk to the cluster's MaxArraySize; submitit's map_array makes one array per call
        max_array = int(self.slurm.get("max_array_size") or _max_array_size() or 1000)
        jobs = []
        for i in range(0, len(groups), max_array):
            chunk = groups[i: i + max_array]
            n = len(chunk)
            jobs += ex.map_array(TrainJob(), chunk, *[[a] * n for a in args])
        return jobs

    def _local_pool(self, ex, groups, args) -> list[submitit.Job]:
        pending, running, finished = list(groups), [], []
        while pending or running:
            while pending and len(running) < self.max_parallel:
                running.append(ex.submit(TrainJob(), pending.pop(0), *args))
            time.sleep(0.2)
            still = []
            for j in running:
                (finished if j.done() else still).append(j)
            running = still
        return finished

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
