"""Launching a sweep through :mod:`interpscale.executors`: finished runs are never submitted
again, a failed run fails alone, Ctrl-C / SIGTERM stops the jobs with their state saved
(``docs/launching.md``)."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import submitit
from tqdm.auto import tqdm

from interpscale.executors import EXECUTORS, JobsFailed, make_executor
from interpscale.orchestration.evaluate import pending_evaluations
from interpscale.orchestration.jobs import EvalJob, TrainJob
from interpscale.orchestration.manifest import check_manifest, data_fingerprint, write_manifest
from interpscale.orchestration.parallel import PARALLEL
from interpscale.orchestration.results import collect
from interpscale.orchestration.rundir import (ensure_writable, find_run_dirs, read_status, run_state,
                                              trainer_alive, write_status)
from interpscale.orchestration.spec import RunSpec
from interpscale.orchestration.trainer import init_run_dir, model_kwargs, prepare_run_data

log = logging.getLogger(__name__)
__all__ = ["EXECUTORS", "Sweep", "SweepInterrupted", "TrainJob", "EvalJob", "run_cost", "pack"]


class SweepInterrupted(KeyboardInterrupt):
    """The launcher was interrupted (Ctrl-C / SIGTERM); its jobs were stopped and their runs
    marked ``interrupted`` (launch again to resume them)."""


# Relative cost of a run for packing runs into jobs: a fixed cost per optimizer step (launch,
# optimizer, logging: what dominates small models) plus its FLOPs. Fitted to the 57 runs of
# the CPU demo (R² 0.92 against 0.31 for FLOPs alone); only the ratio matters for packing.
STEP_COST_S = 7.5e-3
FLOP_COST_S = 7.4e-11


def run_cost(spec: RunSpec) -> float:
    """Estimated seconds to train ``spec`` (for ordering and packing, not for planning)."""
    return spec.steps * STEP_COST_S + spec.flops * FLOP_COST_S


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


# [launch] keys that configure the cluster rather than the sweep (timeout_min applies locally too)
SLURM_KEYS = ("timeout_min", "gpus_per_node", "cpus_per_task", "mem_gb", "max_array_size", "partition")
# [launch] keys that are Sweep fields as they are
SWEEP_KEYS = ("executor", "max_parallel", "runs_per_job", "threads_per_job", "nodes", "micro_batch_tokens",
              "parallel", "compile", "save_every_s")


@dataclass
class Sweep:
    """RunSpecs under one directory: ``SWEEP/runs/<run_id>/``, shared data in ``SWEEP/_data``.

    ``executor``: ``"local" | "slurm" | "debug"`` or a submitit executor the caller
    configured.  ``nodes`` x ``tasks_per_node`` tasks (one per GPU) train each run
    data-parallel; ``micro_batch_tokens`` / ``parallel`` / ``compile`` go to the
    :class:`~interpscale.orchestration.trainer.Trainer`.  ``extend`` lets a launch add runs
    to a sweep directory that lists others (on the same data).
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
    extend: bool = False  # add runs the sweep directory does not list yet

    def __post_init__(self) -> None:
        if not (isinstance(self.executor, submitit.Executor) or self.executor in EXECUTORS):
            raise ValueError(f"unknown executor {self.executor!r}; expected one of {EXECUTORS} "
                             f"or a submitit.Executor")
        counts = (self.max_parallel, self.runs_per_job, self.nodes, self.tasks_per_node)
        if min(counts) < 1:
            raise ValueError(f"max_parallel, runs_per_job, nodes, tasks_per_node must be >= 1, got {counts}")
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
        self.out_dir = p = Path(self.out_dir)
        while not p.exists() and p != p.parent:  # created by launch(), once every check has passed
            p = p.parent
        ensure_writable(p)

    @classmethod
    def from_plan(cls, plan, out_dir: str | os.PathLike, **overrides: Any) -> "Sweep":
        """A sweep of ``plan.runs`` configured by the preset's ``[launch]`` table (validated by
        ``config_schema``); ``overrides`` that are not ``None`` win.  ``partition``,
        ``timeout_min`` and ``gpus_per_node`` are cluster settings (``gpus_per_node`` also
        sets one task per GPU)."""
        lc = dict(plan.launch)
        over = {k: v for k, v in overrides.items() if v is not None}
        if "slurm_partition" in lc:
            lc.setdefault("partition", lc.pop("slurm_partition"))
        slurm = {k: lc[k] for k in SLURM_KEYS if k in lc}
        slurm.update({k: over.pop(k) for k in ("partition", "timeout_min", "gpus_per_node") if k in over})
        kw = {k: lc[k] for k in SWEEP_KEYS if k in lc}
        kw.update(tasks_per_node=slurm.get("gpus_per_node") or lc.get("tasks_per_node") or 1, **over)
        if kw.get("executor", "local") != "slurm":
            slurm.pop("gpus_per_node", None)
        return cls(plan.runs, out_dir, slurm=slurm, **kw)

    @classmethod
    def from_dir(cls, out_dir: str | os.PathLike, **kwargs: Any) -> "Sweep":
        """Re-open a sweep from its manifest (for ``sweep status`` / ``sweep collect``)."""
        out = Path(out_dir)
        if not (out / "sweep.json").exists():
            raise ValueError(f"{out} is not a sweep directory (no sweep.json)")
        return cls([RunSpec.load(d) for d in find_run_dirs(out)], out, **kwargs)

    @property
    def executor_name(self) -> str:
        return self.executor if isinstance(self.executor, str) else type(self.executor).__name__

    def run_dir(self, spec: RunSpec) -> Path:
        return self.out_dir / "runs" / spec.run_id

    def _evaluated(self, d: Path) -> bool:
        return not pending_evaluations(d)  # a checkpoint changed since it was evaluated counts as not

    def _finished(self, spec: RunSpec) -> bool:
        d = self.run_dir(spec)
        return read_status(d).get("state") == "done" and (not self.evaluate or self._evaluated(d))

    def _data_fingerprints(self) -> dict[str, dict]:
        """Prepare (or find) each run's data and check the run against it; each run's data
        fingerprint."""
        cache: dict[tuple, tuple] = {}
        out = {}
        for r in self.runs:
            key = (repr(sorted(r.data.items())), r.seq_len, r.vocab_size, r.val_fraction, r.seed)
            if key not in cache:
                path, data = prepare_run_data(r, self.out_dir / "_data")
                cache[key] = (data, data_fingerprint(path))
            model_kwargs(r, cache[key][0])  # a vocabulary / concept mismatch fails before anything is written
            out[r.run_id] = cache[key][1]
        return out

    def _prepare(self) -> list[RunSpec]:
        """Check everything, then write the manifest and the run directories; a refused
        launch leaves the directory as it was (a new one is removed again)."""
        existed, data_root = self.out_dir.exists(), self.out_dir / "_data"
        before = set(data_root.iterdir()) if data_root.exists() else set()
        try:
            fps = self._data_fingerprints()
            manifest = check_manifest(self.out_dir, list(fps), fps.values(), extend=self.extend)
        except BaseException:
            if not existed:
                shutil.rmtree(self.out_dir, ignore_errors=True)
            elif data_root.exists():
                for p in set(data_root.iterdir()) - before:
                    shutil.rmtree(p, ignore_errors=True)
            raise
        write_manifest(self.out_dir, manifest)
        todo = [r for r in self.runs if not self._finished(r)]
        for r in todo:
            init_run_dir(r, self.run_dir(r), data_root)
        return todo

    def _groups(self, todo: list[RunSpec]) -> list[list[str]]:
        """Runs packed into jobs of ~runs_per_job by :func:`run_cost` (:func:`pack`)."""
        jobs = pack([run_cost(r) for r in todo], self.runs_per_job)
        return [[str(self.run_dir(todo[i])) for i in g] for g in jobs]

    def _launcher(self):
        return make_executor(self.executor, self.out_dir / "submitit", name=f"sweep-{self.out_dir.name}",
                             slurm=self.slurm, max_parallel=self.max_parallel, tasks_per_node=self.tasks_per_node,
                             nodes=self.nodes)

    def launch(self, wait: bool = True) -> list[submitit.Job]:
        """Submit every unfinished run; with ``wait`` block until all jobs end and raise if any
        failed (other runs' results are kept).  Ctrl-C / SIGTERM: :class:`SweepInterrupted`.
        Local jobs stop (saving their state) when this process ends: ``wait=False`` suits SLURM."""
        todo = self._prepare()
        if not todo:
            log.info("sweep %s: all %d runs finished", self.out_dir, len(self.runs))
            return []
        groups = self._groups(todo)
        train = dict(micro_batch_tokens=self.micro_batch_tokens, parallel=self.parallel, compile=self.compile)
        args = (str(self.out_dir / "_data"), self.threads_per_job, self.evaluate, self.save_every_s, train)
        log.info("sweep %s: %d runs in %d jobs (%s)", self.out_dir, len(todo), len(groups), self.executor_name)
        return self._run(TrainJob(), groups, args, wait, "running")

    def evaluate_runs(self, wait: bool = True, eval_batch_tokens: int | None = None) -> list[submitit.Job]:
        """Evaluate every trained run not yet fully evaluated, through the sweep's executor."""
        todo = [r for r in self.runs if read_status(self.run_dir(r)).get("state") == "done"
                and not self._evaluated(self.run_dir(r))]
        if not todo:
            return []
        args = (self.threads_per_job, eval_batch_tokens)
        return self._run(EvalJob(), self._groups(todo), args, wait, "evaluated")

    def _run(self, fn, groups: list[list[str]], args: tuple, wait: bool, what: str) -> list[submitit.Job]:
        launcher = self._launcher()
        dirs = [Path(d) for g in groups for d in g]
        update, close = self._progress(dirs, what) if self.progress else (None, None)
        try:
            with launcher:  # an interrupt or error in here cancels the jobs
                jobs = launcher.map(fn, groups, *[[a] * len(groups) for a in args], progress=update)
                if wait:
                    launcher.wait(jobs, progress=update)
        except JobsFailed as exc:
            raise RuntimeError("some sweep jobs failed (finished runs are kept):\n" + str(exc)) from None
        except KeyboardInterrupt:
            n = self._mark_interrupted(dirs)
            raise SweepInterrupted(f"sweep {self.out_dir}: interrupted; {n} run(s) stopped with their state "
                                   f"saved (launch again to resume)") from None
        finally:
            if close is not None:
                close()
        return jobs

    def _progress(self, dirs: list[Path], what: str):
        """(update, close) of the live ``runs done, running, failed, interrupted, total`` line
        on stderr (tqdm, from the runs' status files, at most once a second)."""
        bar = tqdm(total=len(dirs), desc=f"sweep {self.out_dir.name}: runs {what}", unit="run",
                   file=sys.stderr, dynamic_ncols=True, mininterval=1.0, smoothing=0.0)
        last = [0.0]

        def update(*_: int, force: bool = False) -> None:
            if not force and time.monotonic() - last[0] < 1.0:
                return
            last[0] = time.monotonic()
            states = [read_status(d).get("state") for d in dirs]
            n = {k: states.count(k) for k in ("done", "running", "failed", "interrupted")}
            bar.n = sum(map(self._evaluated, dirs)) if what == "evaluated" else n["done"]
            extra = f", interrupted {n['interrupted']}" if n["interrupted"] else ""
            bar.set_postfix_str(f"running {n['running']}, failed {n['failed']}{extra}, total {len(dirs)}",
                                refresh=False)
            bar.refresh()

        def close() -> None:
            update(force=True)
            bar.close()

        return update, close

    @staticmethod
    def _mark_interrupted(dirs: list[Path]) -> int:
        """Runs left ``running`` by a stopped job (no live trainer) become ``interrupted``; the
        number of interrupted runs."""
        for d in dirs:
            if read_status(d).get("state") == "running" and not trainer_alive(d):
                write_status(d, "interrupted")
        return sum(read_status(d).get("state") == "interrupted" for d in dirs)

    def status(self) -> pd.DataFrame:
        """One row per run; a run left ``running`` by a dead process shows ``interrupted``."""
        rows = []
        for r in self.runs:
            st = run_state(self.run_dir(r))
            rows.append({"run_id": r.run_id, "family": r.family, "size": r.size, "slice_flops": r.slice_flops,
                         "steps": r.steps, "state": st.get("state"), "segments_done": len(st.get("segments_done", [])),
                         "evaluated": (self.run_dir(r) / "results.parquet").exists(),
                         "error": st.get("error", "") if st.get("state") == "failed" else ""})
        return pd.DataFrame(rows)

    def counts(self) -> dict[str, int]:
        """Runs per state (``status()``'s state column)."""
        return {k: int(v) for k, v in self.status()["state"].value_counts().items()}

    def collect(self) -> pd.DataFrame:
        return collect([self.run_dir(r) for r in self.runs], self.out_dir / "results.parquet")
