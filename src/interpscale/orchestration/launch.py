"""Launching a sweep through :mod:`interpscale.executors`: finished runs are never submitted
again, a failed run fails alone, Ctrl-C / SIGTERM stops the jobs with their state saved
(``docs/launching.md``); and what a sweep's submitit job runs: train (then evaluate) its runs, or
evaluate them.  Jobs are ``Checkpointable`` (requeued unchanged on preemption; every run resumes
from its saved state)."""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import submitit
import torch

from interpscale.executors import (EXECUTORS, JobsFailed, handle_stop_signals, make_executor, stop_requested,
                                   stop_signal)
from interpscale.orchestration.config import (LaunchConfig, ObserveConfig, Preset, TrainConfig, deprecated,
                                             split_settings, with_settings)
from interpscale.orchestration.evaluate import collect, evaluate_run, evaluate_runs, pending_evaluations
from interpscale.orchestration.outcome import (SweepIncomplete, SweepOutcome, SweepState, own_code_error,
                                               progress_line)
from interpscale.orchestration.runtime import pack, reprice
from interpscale.orchestration.rundir import (check_manifest, data_fingerprint, ensure_writable,
                                              find_run_dirs, read_manifest, read_status, trainer_alive,
                                              write_manifest, write_status)
from interpscale.orchestration.spec import RunSpec
from interpscale.orchestration.trainer import init_run_dir, model_kwargs, prepare_run_data, train_run
from interpscale.errors import UserError

log = logging.getLogger(__name__)
__all__ = ["EXECUTORS", "Sweep", "SweepInterrupted", "SweepIncomplete", "TrainJob", "EvalJob", "run_cost", "pack"]


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


# -- what a job runs ------------------------------------------------------------------------------
def _setup_job(threads: int):
    """Threads, this task's device and (several tasks) the torch.distributed group, from
    submitit's ``TorchDistributedEnvironment`` (NCCL on GPUs, gloo on CPU)."""
    torch.set_num_threads(max(1, threads))
    try:
        env = submitit.JobEnvironment()
        rank, local_rank, n_tasks = env.global_rank, env.local_rank, env.num_tasks
    except RuntimeError:  # not inside a submitit job (e.g. called directly)
        rank, local_rank, n_tasks = 0, 0, 1
    distributed, device = n_tasks > 1, None
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    if distributed:
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        torch.distributed.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        rank = torch.distributed.get_rank()
    return rank, device, distributed


@dataclass(frozen=True)
class JobConfig:
    """What every train job of a launch shares: the prepared-data root, threads, whether to
    evaluate, and the Trainer's and the observers' sections whole."""

    data_root: str
    threads: int = 1
    evaluate: bool = True
    train: TrainConfig = field(default_factory=TrainConfig)
    observe: ObserveConfig = field(default_factory=ObserveConfig)


def run_error(spec: RunSpec | None, exc: BaseException) -> str:
    """A failed run's error; where the family's own code raised, it says so (``own_code_error``)."""
    own = own_code_error(spec.family, spec.plugins, exc) if spec is not None else None
    return own or f"{type(exc).__name__}: {exc}"


class TrainJob(submitit.helpers.Checkpointable):
    """Train + evaluate a list of runs, data-parallel over the job's tasks (each binds
    ``cuda:<local rank>``).  A run that raises is marked ``failed`` and the job goes on with
    the next (a distributed job stops: its ranks cannot agree to go on); the job fails at
    the end, naming them.  A run stopped by a signal is marked ``interrupted`` with it."""

    def __call__(self, run_dirs: list[str], job: JobConfig) -> list[dict]:
        handle_stop_signals()
        rank, device, distributed = _setup_job(job.threads)
        out, failed = [], []
        try:
            for d in run_dirs:
                if stop_requested():
                    break
                spec = None
                try:
                    spec = RunSpec.load(d)
                    status = train_run(spec, d, config=job.train, observe=job.observe,
                                       data_root=job.data_root, progress=False, device=device)
                    if status.get("state") != "done":  # stopped part-way, state saved
                        if rank == 0:
                            by = stop_signal() or "the launcher's exit"
                            write_status(Path(d), "interrupted", stopped_by=by)
                        break
                    if job.evaluate and rank == 0:
                        evaluate_run(d, device=device)
                    out.append(status)
                except Exception as exc:
                    if rank == 0:
                        write_status(Path(d), "failed", error=run_error(spec, exc))
                    if distributed:
                        raise
                    failed.append(f"{Path(d).name}: {run_error(spec, exc)}")
        finally:
            if distributed:
                torch.distributed.destroy_process_group()
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(run_dirs)} runs failed: " + "; ".join(failed))
        return out


class EvalJob(submitit.helpers.Checkpointable):
    """Evaluate run directories (on the job's GPU when it has one); resumable per checkpoint."""

    def __call__(self, run_dirs: list[str], threads: int = 1, eval_batch_tokens: int | None = None) -> int:
        handle_stop_signals()
        torch.set_num_threads(max(1, threads))  # evaluate_run picks the GPU when there is one
        return len(evaluate_runs(run_dirs, progress=False, eval_batch_tokens=eval_batch_tokens))


@dataclass(init=False)
class Sweep:
    """RunSpecs under one directory: ``SWEEP/runs/<run_id>/``, shared data in ``SWEEP/_data``.

    ``launch``: the preset's ``[launch]`` section, whole (:class:`LaunchConfig`: the executor,
    jobs at once, runs per job, ``nodes`` x ``tasks_per_node`` tasks, one per GPU, training each
    run data-parallel, the cluster keys); ``executor`` replaces its executor (a name, or a
    submitit executor the caller configured).  ``train`` (the preset's ``[train]`` settings)
    goes whole to each :class:`~interpscale.orchestration.trainer.Trainer`, ``observe`` to its
    loggers.  ``extend`` lets a launch add runs to a sweep directory that lists others (on the
    same data).  ``keywords``: the earlier spelling, LaunchConfig's fields one by one
    (``max_parallel=``, ``slurm={...}``; kept one release).
    """

    runs: Sequence[RunSpec]
    out_dir: Path
    launch_config: LaunchConfig  # ``launch`` in the constructor (``launch()`` launches)
    executor: Any  # launch_config.executor, or the submitit executor the caller configured
    train: TrainConfig  # to every Trainer, whole
    observe: ObserveConfig
    evaluate: bool = True
    progress: bool = True  # the live runs done / running / failed line on stderr
    extend: bool = False  # add runs the sweep directory does not list yet
    estimate: dict[str, Any] = field(default_factory=dict)  # the plan's runtime estimate, kept in sweep.json
    _job_problems: list = field(default_factory=list, init=False, repr=False)  # the last launch's failed jobs

    def __init__(self, runs: Sequence[RunSpec], out_dir: str | os.PathLike, launch: LaunchConfig | None = None, *,
                 executor: Any = None, train: TrainConfig | None = None, observe: ObserveConfig | None = None,
                 evaluate: bool = True, progress: bool = True, extend: bool = False,
                 estimate: dict[str, Any] | None = None, **keywords: Any) -> None:
        launch = launch if launch is not None else LaunchConfig()
        if keywords:
            deprecated("Sweep(runs, out_dir, max_parallel=..., slurm=...)", "Sweep(runs, out_dir, LaunchConfig(...))")
            (settings,) = split_settings({**keywords.pop("slurm", {}), **keywords}, LaunchConfig)
            launch = with_settings(launch, **settings)
        if isinstance(executor, str):
            launch, executor = replace(launch, executor=executor), None
        self.runs, self.out_dir, self.launch_config = runs, out_dir, launch
        self.executor = executor if executor is not None else launch.executor
        self.train = train if train is not None else TrainConfig()
        self.observe = observe if observe is not None else ObserveConfig()
        self.evaluate, self.progress, self.extend, self.estimate = evaluate, progress, extend, dict(estimate or {})
        self._job_problems = []
        self._check()

    # the launch settings, from the section
    max_parallel = property(lambda self: self.launch_config.max_parallel, doc="jobs running at once (local)")
    runs_per_job = property(lambda self: self.launch_config.runs_per_job)
    threads_per_job = property(lambda self: self.launch_config.threads_per_job)
    nodes = property(lambda self: self.launch_config.nodes)
    tasks_per_node = property(lambda self: self.launch_config.gpus_per_node or self.launch_config.tasks_per_node,
                              doc="tasks per node: one per GPU when gpus_per_node is set")
    slurm = property(lambda self: self.launch_config.slurm, doc="the cluster settings that are set")

    def _check(self) -> None:
        if not (isinstance(self.executor, submitit.Executor) or self.executor in EXECUTORS):
            raise UserError(f"unknown executor {self.executor!r}; expected one of {tuple(EXECUTORS)} "
                            f"or a submitit.Executor")
        counts = (self.max_parallel, self.runs_per_job, self.nodes, self.tasks_per_node)
        if min(counts) < 1:
            raise UserError(f"max_parallel, runs_per_job, nodes, tasks_per_node must be >= 1, got {counts}")
        ids = [r.run_id for r in self.runs]
        if len(set(ids)) != len(ids):
            raise UserError("duplicate RunSpecs in sweep")
        world = self.nodes * self.tasks_per_node
        for r in self.runs:  # Table 24's global batch whatever the world size: it must split evenly
            if r.batch_size % world:
                raise UserError(f"{r.run_id}: batch of {r.batch_size} sequences does not split over "
                                f"{world} tasks ({self.nodes} nodes x {self.tasks_per_node})")
        self.out_dir = p = Path(self.out_dir)
        while not p.exists() and p != p.parent:  # created by launch(), once every check has passed
            p = p.parent
        ensure_writable(p)

    @classmethod
    def from_plan(cls, plan, out_dir: str | os.PathLike, **overrides: Any) -> "Sweep":
        """A sweep of ``plan.runs`` configured by the preset's tree (``plan.config``):
        ``[launch]`` for the jobs, ``[train]`` / ``[observe]`` whole for the trainers.
        ``overrides`` that are not ``None`` win: fields of LaunchConfig or TrainConfig by
        name, or the Sweep's own (``extend``, ``evaluate``, ``progress``).  ``gpus_per_node``
        also sets one task per GPU."""
        tree = plan.config if getattr(plan, "config", None) is not None else Preset.load(
            {"launch": {k: v for k, v in plan.launch.items() if v is not None}})
        over = {k: v for k, v in overrides.items() if v is not None}
        own = {k: over.pop(k) for k in ("extend", "evaluate", "progress") if k in over}
        launch_kw, train_kw = split_settings(over, LaunchConfig, TrainConfig)
        launch = with_settings(tree.launch, **launch_kw)
        return cls(plan.runs, out_dir, launch, train=with_settings(tree.train, **train_kw), observe=tree.observe,
                   **own, estimate=reprice(getattr(plan, "estimate", None) or {}, launch.max_parallel,
                                           launch.runs_per_job))

    @classmethod
    def from_dir(cls, out_dir: str | os.PathLike, **kwargs: Any) -> "Sweep":
        """Re-open a sweep from its manifest (for ``sweep status`` / ``sweep collect``)."""
        out = Path(out_dir)
        if not (out / "sweep.json").exists():
            raise UserError(f"{out} is not a sweep directory (no sweep.json)")
        return cls([RunSpec.load(d) for d in find_run_dirs(out)], out,
                   **{"estimate": read_manifest(out)["estimate"], **kwargs})

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
        write_manifest(self.out_dir, {**manifest, "estimate": self.estimate or manifest["estimate"]})
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
        job = JobConfig(str(self.out_dir / "_data"), self.threads_per_job, self.evaluate, self.train, self.observe)
        log.info("sweep %s: %d runs in %d jobs (%s)", self.out_dir, len(todo), len(groups), self.executor_name)
        jobs = self._run(TrainJob(), groups, (job,), wait, "running")
        if wait:
            self.outcome = SweepOutcome.read(self.out_dir.name, [self.run_dir(r) for r in self.runs],
                                             self._job_problems)
            if not self.outcome.complete:
                raise SweepIncomplete(self.outcome)
        return jobs

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
        self._job_problems = []
        dirs = [Path(d) for g in groups for d in g]
        shown = [self.run_dir(r) for r in self.runs] if isinstance(fn, TrainJob) else dirs  # the whole sweep
        update, close = (progress_line(self.out_dir.name, "done" if isinstance(fn, TrainJob) else what, shown,
                                       self._evaluated, estimate=self.estimate)
                         if self.progress else (None, None))  # the live ``runs done, running, ...`` line
        try:
            with launcher:  # an interrupt or error in here cancels the jobs
                jobs = launcher.map(fn, groups, *[[a] * len(groups) for a in args], progress=update)
                if wait:
                    launcher.wait(jobs, progress=update)
        except JobsFailed as exc:
            jobs = launcher.jobs
            self._job_problems = self._describe_failures(exc, groups)
            if not isinstance(fn, TrainJob):
                raise RuntimeError("some sweep jobs failed (finished runs are kept):\n" + str(exc)) from None
        except KeyboardInterrupt:
            n = self._mark_interrupted(dirs)
            raise SweepInterrupted(f"sweep {self.out_dir}: interrupted; {n} run(s) stopped with their state "
                                   f"saved (launch again to resume)") from None
        finally:
            if close is not None:
                close()
        return jobs

    def _describe_failures(self, exc: JobsFailed, groups: list[list[str]]) -> list[str]:
        """One clause per job that ended without a result: the signal that killed it and its
        runs not done (marked ``interrupted``: their state is saved up to the last resume
        point); a job that raised before any run is named with its error.  Runs that failed
        alone say so in their own status."""
        out = []
        for i, job_id, sig, error in exc.failures:
            dirs = [Path(d) for d in groups[i]] if i < len(groups) else []
            left = [d for d in dirs if read_status(d).get("state") not in ("done", "failed")]
            if sig is not None:
                self._mark_interrupted(left, stopped_by=sig)
                hint = " (out of memory?)" if sig == "SIGKILL" else ""
                out.append(f"job {job_id} killed by {sig}{hint}: runs {', '.join(d.name for d in left) or 'none'}")
            elif not any(read_status(d).get("state") == "failed" for d in dirs):
                out.append(f"job {job_id} failed: {error}")
        return out

    @staticmethod
    def _mark_interrupted(dirs: list[Path], **fields: str) -> int:
        """Runs left ``running`` by a stopped job (no live trainer) become ``interrupted`` (with
        ``fields``); the number of interrupted runs."""
        for d in dirs:
            if read_status(d).get("state") == "running" and not trainer_alive(d):
                write_status(d, "interrupted", **fields)
        return sum(read_status(d).get("state") == "interrupted" for d in dirs)

    def state(self) -> SweepState:
        """The sweep's one account (runs per state, steps, ETA); a run left ``running`` by a
        dead process shows ``interrupted``."""
        return SweepState.read([self.run_dir(r) for r in self.runs], self.estimate)

    def status(self) -> pd.DataFrame:
        """One row per run (:meth:`state`): its state, ``step`` (steps trained, every segment)
        of ``planned_steps``, its segment in training."""
        rows = []
        for r, p in zip(self.runs, self.state().runs):
            st = p.status
            rows.append({"run_id": r.run_id, "family": r.family, "size": r.size, "slice_flops": r.slice_flops,
                         "state": p.state, "step": p.steps_done, "planned_steps": p.steps_planned,
                         "segment": st.get("segment") or "", "segments_done": len(st.get("segments_done", [])),
                         "evaluated": (self.run_dir(r) / "results.parquet").exists(),
                         "error": st.get("error", "") if p.state == "failed" else ""})
        return pd.DataFrame(rows)

    def counts(self) -> dict[str, int]:
        """Runs per state (``status()``'s state column)."""
        return {k: int(v) for k, v in self.status()["state"].value_counts().items()}

    def collect(self) -> pd.DataFrame:
        return collect([self.run_dir(r) for r in self.runs], self.out_dir / "results.parquet")
