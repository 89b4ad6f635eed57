"""Launching a sweep through :mod:`interpscale.executors`: ``local`` (bounded concurrency),
``slurm`` (job arrays), ``debug`` (in this process).

A job is a list of runs trained (then evaluated) one after another; jobs are
``Checkpointable``, so on preemption / timeout submitit requeues them and every run
resumes from its last saved state.  Finished runs (status ``done`` and evaluated) are
never submitted again.  A run that fails ends as ``failed`` with its error and its job
goes on with its other runs.  Ctrl-C or SIGTERM to the launcher stops the local jobs (each
saves its state), marks their runs ``interrupted`` and ends in one line; a launcher killed
outright is noticed by its jobs, which stop the same way.  The sweep directory is bound to
its runs and data (:mod:`~interpscale.orchestration.manifest`).
"""

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

from interpscale.executors import EXECUTORS, JobsFailed, handle_stop_signals, make_executor, stop_requested
from interpscale.orchestration.rundir import read_status, run_state, trainer_alive, write_status
from interpscale.orchestration.spec import RunSpec

log = logging.getLogger(__name__)
__all__ = ["EXECUTORS", "Sweep", "SweepInterrupted", "TrainJob", "EvalJob", "run_cost"]


class SweepInterrupted(KeyboardInterrupt):
    """The launcher was interrupted (Ctrl-C / SIGTERM); its jobs were stopped and their runs
    marked ``interrupted`` (launch again to resume them)."""


def _job_world() -> tuple[int, int, int]:
    """(global rank, local rank, number of tasks) of this submitit job; (0, 0, 1) outside one."""
    try:
        env = submitit.JobEnvironment()
        return env.global_rank, env.local_rank, env.num_tasks
    except RuntimeError:  # not inside a submitit job (e.g. called directly)
        return 0, 0, 1


def _setup_job(threads: int, distributed: bool | None):
    """Threads, the device of this task and (several tasks) the torch.distributed group."""
    import torch

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
    return rank, device, distributed


class TrainJob(submitit.helpers.Checkpointable):
    """Train + evaluate a list of runs; re-submitted unchanged on preemption (each run resumes).

    With several tasks (``tasks_per_node`` x ``nodes``) the tasks form one
    ``torch.distributed`` group (NCCL on GPUs, gloo on CPU) from submitit's
    ``TorchDistributedEnvironment``; each binds ``cuda:<local rank>``.  A run that raises is
    marked ``failed`` and the job goes on with the next (single-task jobs: the ranks of a
    distributed job cannot agree to go on, so it stops); the job fails at the end, naming
    them.  Asked to stop (:func:`interpscale.executors.stop_requested`), the run in progress
    saves its state and is marked ``interrupted``, and the job returns.
    """

    def __call__(self, run_dirs: list[str], data_root: str, threads: int = 1, evaluate: bool = True,
                 distributed: bool | None = None, save_every_s: float = 60.0,
                 train: dict[str, Any] | None = None) -> list[dict]:
        from interpscale.orchestration.evaluate import evaluate_run
        from interpscale.orchestration.trainer import train_run

        handle_stop_signals()
        rank, device, distributed = _setup_job(threads, distributed)
        out, failed = [], []
        try:
            for d in run_dirs:
                if stop_requested():
                    break
                try:
                    status = train_run(RunSpec.load(d), d, data_root=data_root, progress=False,
                                       save_every_s=save_every_s, device=device, **(train or {}))
                    if status.get("state") != "done":  # stopped part-way, state saved
                        if rank == 0:
                            write_status(Path(d), "interrupted")
                        break
                    if evaluate and rank == 0:
                        evaluate_run(d, device=device)
                except Exception as exc:
                    if rank == 0:
                        write_status(Path(d), "failed", error=f"{type(exc).__name__}: {exc}")
                    if distributed:
                        raise
                    failed.append(f"{Path(d).name}: {type(exc).__name__}: {exc}")
                    continue
                out.append(status)
        finally:
            if distributed:
                import torch

                torch.distributed.destroy_process_group()
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(run_dirs)} runs failed: " + "; ".join(failed))
        return out


class EvalJob(submitit.helpers.Checkpointable):
    """Evaluate run directories (on the job's GPU when it has one); resumable per checkpoint;
    a cancelled job stops after the run it is evaluating."""

    def __call__(self, run_dirs: list[str], threads: int = 1, eval_batch_tokens: int | None = None) -> int:
        import torch

        from interpscale.orchestration.evaluate import evaluate_run

        handle_stop_signals()
        torch.set_num_threads(max(1, threads))
        device = "cuda" if torch.cuda.is_available() else None
        rows = 0
        for d in run_dirs:
            if stop_requested():  # cancelled: the next launch evaluates what is left
                break
            rows += len(evaluate_run(d, device=device, eval_batch_tokens=eval_batch_tokens))
        return rows


# Relative cost of a run for packing runs into jobs: a fixed cost per optimizer step (launch,
# optimizer, logging: what dominates small models) plus its FLOPs. Fitted to the 57 runs of
# the CPU demo (R² 0.92 against 0.31 for FLOPs alone); only the ratio matters for packing.
STEP_COST_S = 7.5e-3
FLOP_COST_S = 7.4e-11


def run_cost(spec: RunSpec) -> float:
    """Estimated seconds to train ``spec`` (for ordering and packing, not for planning)."""
    return spec.steps * STEP_COST_S + spec.flops * FLOP_COST_S


# [launch] keys that configure the cluster rather than the sweep (timeout_min applies locally too)
SLURM_KEYS = ("timeout_min", "gpus_per_node", "cpus_per_task", "mem_gb", "max_array_size", "partition")


def _check_writable(directory: Path) -> None:
    """Raise ``PermissionError`` unless ``directory`` exists writable or could be created."""
    p = directory
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir() or not os.access(p, os.W_OK | os.X_OK):
        raise PermissionError(f"output directory {directory} is not writable ({p} is "
                              f"{'not a directory' if not p.is_dir() else 'read-only'})")


@dataclass
class Sweep:
    """A set of RunSpecs under one directory: ``SWEEP/runs/<run_id>/``, shared data in ``SWEEP/_data``.

    ``launch()`` submits every unfinished run and waits (a live progress line on stderr);
    ``status()`` is the per-run table; ``evaluate_runs()`` (re)evaluates every trained run
    through the same executor; ``collect()`` merges the per-run results into
    SWEEP/results.parquet (+ .csv).  ``Sweep.from_plan(plan, out_dir, **overrides)`` maps a
    preset's ``[launch]`` table onto these fields.

    ``executor`` is ``"local" | "slurm" | "debug"`` or a submitit executor object
    configured by the caller (submitit's own style: ``AutoExecutor(...)`` +
    ``update_parameters``).  ``nodes`` x ``tasks_per_node`` tasks (one per GPU) train each
    run data-parallel; ``micro_batch_tokens`` / ``parallel`` / ``compile`` go to the
    :class:`~interpscale.orchestration.trainer.Trainer`.  ``extend`` lets a launch add runs
    to a sweep directory that already lists others (on the same data).
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
        self.out_dir = Path(self.out_dir)
        _check_writable(self.out_dir)  # created by launch(), once every check has passed
        self.manifest = self.out_dir / "sweep.json"

    @classmethod
    def from_plan(cls, plan, out_dir: str | os.PathLike, **overrides: Any) -> "Sweep":
        """A sweep of ``plan.runs`` configured by the preset's ``[launch]`` table; keyword
        ``overrides`` (a ``None`` value keeps the preset's) win.  ``partition``,
        ``timeout_min`` and ``gpus_per_node`` go to the cluster settings (``gpus_per_node``
        also sets one task per GPU)."""
        lc = dict(plan.launch)
        over = {k: v for k, v in overrides.items() if v is not None}
        if "slurm_partition" in lc:
            lc.setdefault("partition", lc.pop("slurm_partition"))
        slurm = {k: lc[k] for k in SLURM_KEYS if k in lc}
        slurm.update({k: over.pop(k) for k in ("partition", "timeout_min", "gpus_per_node") if k in over})
        fields_ = dict(executor=lc.get("executor", "local"), max_parallel=int(lc.get("max_parallel", 2)),
                       runs_per_job=int(lc.get("runs_per_job", 1)), threads_per_job=int(lc.get("threads_per_job", 1)),
                       tasks_per_node=int(slurm.get("gpus_per_node") or lc.get("tasks_per_node") or 1),
                       nodes=int(lc.get("nodes", 1)), micro_batch_tokens=lc.get("micro_batch_tokens"),
                       parallel=lc.get("parallel", "ddp"), compile=lc.get("compile"))
        if "save_every_s" in lc:
            fields_["save_every_s"] = float(lc["save_every_s"])
        fields_.update(over)
        if fields_["executor"] != "slurm":
            slurm.pop("gpus_per_node", None)
        return cls(plan.runs, out_dir, slurm=slurm, **fields_)

    @property
    def executor_name(self) -> str:
        return self.executor if isinstance(self.executor, str) else type(self.executor).__name__

    def run_dir(self, spec: RunSpec) -> Path:
        return Path(self.out_dir) / "runs" / spec.run_id

    def _evaluated(self, d: Path) -> bool:
        from interpscale.orchestration.evaluate import pending_evaluations

        return not pending_evaluations(d)  # a checkpoint changed since it was evaluated counts as not

    def _finished(self, spec: RunSpec) -> bool:
        d = self.run_dir(spec)
        if read_status(d).get("state") != "done":
            return False
        return not self.evaluate or self._evaluated(d)

    def _data_fingerprints(self) -> dict[str, dict]:
        """Prepare (or find) each run's data and check the run against it (vocabulary,
        concepts, a validation split); the data fingerprint of every run id."""
        from interpscale.data.loaders import PreparedData, prepare_data
        from interpscale.orchestration.manifest import data_fingerprint
        from interpscale.orchestration.trainer import model_kwargs

        cache: dict[tuple, tuple[PreparedData, dict]] = {}
        out = {}
        for r in self.runs:
            key = (repr(sorted(r.data.items())), r.seq_len, r.vocab_size, r.val_fraction, r.seed)
            if key not in cache:
                path = prepare_data(r.data, Path(self.out_dir) / "_data", seq_len=r.seq_len,
                                    vocab_size=r.vocab_size, val_fraction=r.val_fraction, seed=r.seed)
                data = PreparedData(path, r.seq_len)
                if getattr(data.val, "n_tokens", 1) == 0:
                    raise ValueError(f"{path}: the data has no validation split; prepare it with val_fraction > 0")
                cache[key] = (data, data_fingerprint(path))
            data, fp = cache[key]
            model_kwargs(r, data)  # a vocabulary / concept mismatch fails here, before anything is written
            out[r.run_id] = fp
        return out

    def _prepare(self) -> list[RunSpec]:
        """Check everything, then write the manifest and the run directories; a refused
        launch leaves the directory as it was (a new one is removed again)."""
        from interpscale.orchestration.manifest import check_manifest, write_manifest
        from interpscale.orchestration.trainer import init_run_dir

        out = Path(self.out_dir)
        existed = out.exists()
        data_root = out / "_data"
        before = set(data_root.iterdir()) if data_root.exists() else set()
        try:
            fps = self._data_fingerprints()
            manifest = check_manifest(out, [r.run_id for r in self.runs], fps.values(), extend=self.extend)
        except BaseException:
            if not existed:
                shutil.rmtree(out, ignore_errors=True)
            elif data_root.exists():
                for p in set(data_root.iterdir()) - before:
                    shutil.rmtree(p, ignore_errors=True)
            raise
        write_manifest(out, manifest)
        todo = [r for r in self.runs if not self._finished(r)]
        for r in todo:
            init_run_dir(r, self.run_dir(r), data_root)
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

    def _launcher(self):
        return make_executor(self.executor, Path(self.out_dir) / "submitit", name=f"sweep-{Path(self.out_dir).name}",
                             slurm=self.slurm, max_parallel=self.max_parallel, tasks_per_node=self.tasks_per_node,
                             nodes=self.nodes)

    def _train_options(self) -> dict[str, Any]:
        return {"micro_batch_tokens": self.micro_batch_tokens, "parallel": self.parallel, "compile": self.compile}

    def launch(self, wait: bool = True) -> list[submitit.Job]:
        """Submit every unfinished run; with ``wait`` block until all jobs end (showing
        runs done / running / failed / total and an ETA) and raise if any failed (other
        runs' results are kept).  Ctrl-C / SIGTERM: :class:`SweepInterrupted`.  Local jobs
        stop (saving their state) when this process ends, so ``wait=False`` suits SLURM."""
        todo = self._prepare()
        if not todo:
            log.info("sweep %s: all %d runs finished", self.out_dir, len(self.runs))
            return []
        groups = self._groups(todo)
        args = (str(Path(self.out_dir) / "_data"), self.threads_per_job, self.evaluate, None,
                self.save_every_s, self._train_options())
        log.info("sweep %s: %d runs in %d jobs (%s)", self.out_dir, len(todo), len(groups), self.executor_name)
        return self._run(TrainJob(), groups, args, wait, what="trained")

    def evaluate_runs(self, wait: bool = True, eval_batch_tokens: int | None = None) -> list[submitit.Job]:
        """Evaluate every trained run not yet fully evaluated, through the sweep's executor."""
        todo = [r for r in self.runs if read_status(self.run_dir(r)).get("state") == "done"
                and not self._evaluated(self.run_dir(r))]
        if not todo:
            return []
        return self._run(EvalJob(), self._groups(todo), (self.threads_per_job, eval_batch_tokens), wait,
                         what="evaluated")

    def _run(self, fn, groups: list[list[str]], args: tuple, wait: bool, what: str) -> list[submitit.Job]:
        launcher = self._launcher()
        progress = SweepProgress(self, groups, "running" if what == "trained" else what) if self.progress else None
        try:
            with launcher:  # an interrupt or error in here cancels the jobs
                jobs = launcher.map(fn, groups, *[[a] * len(groups) for a in args],
                                    progress=progress.update if progress else None)
                if wait:
                    launcher.wait(jobs, progress=progress.update if progress else None)
        except JobsFailed as exc:
            raise RuntimeError("some sweep jobs failed (finished runs are kept):\n" + str(exc)) from None
        except KeyboardInterrupt:
            n = self._mark_interrupted([Path(d) for g in groups for d in g])
            raise SweepInterrupted(f"sweep {self.out_dir}: interrupted; {n} run(s) stopped with their state "
                                   f"saved (launch again to resume)") from None
        finally:
            if progress is not None:
                progress.close()
        return jobs

    @staticmethod
    def _mark_interrupted(dirs: list[Path]) -> int:
        """Runs left ``running`` by a stopped job (no live trainer) become ``interrupted``."""
        n = 0
        for d in dirs:
            st = read_status(d)
            if st.get("state") == "interrupted" or (st.get("state") == "running" and not trainer_alive(d)):
                if st.get("state") == "running":
                    write_status(d, "interrupted")
                n += 1
        return n

    def status(self) -> pd.DataFrame:
        """One row per run; a run left ``running`` by a dead process shows ``interrupted``."""
        rows = []
        for r in self.runs:
            st = run_state(self.run_dir(r))
            res = self.run_dir(r) / "results.parquet"
            rows.append({"run_id": r.run_id, "family": r.family, "size": r.size, "slice_flops": r.slice_flops,
                         "steps": r.steps, "state": st.get("state"), "segments_done": len(st.get("segments_done", [])),
                         "evaluated": res.exists(), "error": st.get("error", "") if st.get("state") == "failed"
                         else ""})
        return pd.DataFrame(rows)

    def counts(self) -> dict[str, int]:
        """Runs per state (``status()``'s state column)."""
        return {k: int(v) for k, v in self.status()["state"].value_counts().items()}

    def collect(self) -> pd.DataFrame:
        from interpscale.orchestration.results import collect

        return collect([self.run_dir(r) for r in self.runs], Path(self.out_dir) / "results.parquet")

    @classmethod
    def from_dir(cls, out_dir: str | os.PathLike, **kwargs: Any) -> "Sweep":
        """Re-open a sweep from its manifest (for ``sweep status`` / ``sweep collect``)."""
        from interpscale.orchestration.rundir import sweep_run_ids

        out = Path(out_dir)
        if not (out / "sweep.json").exists():
            raise ValueError(f"{out} is not a sweep directory (no sweep.json)")
        runs = [RunSpec.load(out / "runs" / i) for i in sweep_run_ids(out) if (out / "runs" / i / "spec.json").exists()]
        return cls(runs, out, **kwargs)


class SweepProgress:
    """``runs done / running / failed / interrupted / total`` with an ETA, on stderr (tqdm),
    from the runs' status files."""

    def __init__(self, sweep: Sweep, groups: list[list[str]], what: str):
        self.sweep, self.groups, self.what = sweep, groups, what
        self.dirs = [Path(d) for g in groups for d in g]
        self.bar = tqdm(total=len(self.dirs), desc=f"sweep {Path(sweep.out_dir).name}: runs {what}", unit="run",
                        file=sys.stderr, dynamic_ncols=True, mininterval=1.0, smoothing=0.0)
        self._last = 0.0

    def update(self, jobs_done: int = 0, jobs_total: int = 0) -> None:
        now = time.monotonic()
        if now - self._last < 1.0:
            return
        self._last = now
        states = [read_status(d).get("state") for d in self.dirs]
        done = sum(self.sweep._evaluated(d) for d in self.dirs) if self.what == "evaluated" else \
            sum(s == "done" for s in states)
        counts = {k: sum(s == k for s in states) for k in ("running", "failed", "interrupted")}
        self.bar.n = done
        extra = f", interrupted {counts['interrupted']}" if counts["interrupted"] else ""
        self.bar.set_postfix_str(f"running {counts['running']}, failed {counts['failed']}{extra}, "
                                 f"total {len(self.dirs)}", refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self._last = 0.0
        self.update()
        self.bar.close()
