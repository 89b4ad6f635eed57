"""What a sweep's submitit job runs: train (then evaluate) its runs, or evaluate them.  Jobs are
``Checkpointable`` (requeued unchanged on preemption; every run resumes from its saved state)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import submitit
import torch

from interpscale.executors import handle_stop_signals, stop_requested, stop_signal
from interpscale.orchestration.config import ObserveConfig, TrainConfig
from interpscale.orchestration.evaluate import evaluate_run, evaluate_runs
from interpscale.orchestration.outcome import own_code_error
from interpscale.orchestration.rundir import write_status
from interpscale.orchestration.spec import RunSpec
from interpscale.orchestration.trainer import train_run


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
                    status = train_run(spec, d, config=job.train, observe=job.observe, data_root=job.data_root,
                                       progress=False, device=device)
                    if status.get("state") != "done":  # stopped part-way, state saved
                        if rank == 0:
                            write_status(Path(d), "interrupted", stopped_by=stop_signal() or "the launcher's exit")
                        break
                    if job.evaluate and rank == 0:
                        evaluate_run(d, device=device)
                except Exception as exc:
                    if rank == 0:
                        write_status(Path(d), "failed", error=run_error(spec, exc))
                    if distributed:
                        raise
                    failed.append(f"{Path(d).name}: {run_error(spec, exc)}")
                    continue
                out.append(status)
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
        torch.set_num_threads(max(1, threads))
        device = "cuda" if torch.cuda.is_available() else None
        return len(evaluate_runs(run_dirs, progress=False, device=device,
                                 eval_batch_tokens=eval_batch_tokens))
