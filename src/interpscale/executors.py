"""The one launcher: submitit jobs on this machine (``local``), on SLURM (``slurm``) or in
this process (``debug``); usage and signal handling in docs/launching.md.  A bottom module:
it imports the standard library, submitit and the registry class only.  Inside a job function call
:func:`handle_stop_signals` once, then poll :func:`stop_requested` at safe points.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import submitit

from interpscale._registry import Registry
from interpscale.errors import UserError

# kind -> how to configure submitit's AutoExecutor for it (one registry entry per executor kind)
EXECUTORS: Registry = Registry("executor")
LAUNCHER_PID_ENV = "INTERPSCALE_LAUNCHER_PID"
# AutoExecutor's shared parameters (the rest of a [launch.slurm] table is SLURM-specific)
_SHARED = ("timeout_min", "mem_gb", "gpus_per_node", "cpus_per_task", "nodes", "tasks_per_node", "name",
           "stderr_to_stdout")
_STOP = threading.Event()
_STOPPED_BY: list[str] = []


class JobsFailed(RuntimeError):
    """Some jobs failed; ``errors`` holds one line per failed job (its last error line),
    ``failures`` (index of the job in the waited list, job id, the signal that killed it or
    None, the error line) the same, structured."""

    def __init__(self, errors: list[str], failures: list[tuple[int, str, str | None, str]] | None = None):
        self.errors, self.failures = errors, failures or []
        super().__init__("\n".join(errors))


def make_executor(kind: str | submitit.Executor, folder: str | os.PathLike, *, name: str = "interpscale",
                  timeout_min: float | None = None, slurm: dict[str, Any] | None = None, max_parallel: int,
                  tasks_per_node: int = 1, nodes: int = 1) -> "Launcher":
    """A :class:`Launcher` on ``submitit.AutoExecutor(cluster=kind)`` writing under ``folder``
    (``%j`` added), or on ``kind`` itself when it is a configured ``submitit.Executor``.
    ``slurm`` is the ``[launch]`` cluster table (see ``_slurm``); ``max_array_size`` caps the
    array size (else ``scontrol show config``'s MaxArraySize)."""
    slurm = dict(slurm or {})
    if max_parallel < 1:
        raise UserError(f"max_parallel must be >= 1, got {max_parallel}")
    if isinstance(kind, submitit.Executor):
        return Launcher(kind, type(kind).__name__, max_parallel, slurm.get("max_array_size"))
    if kind not in EXECUTORS:
        raise UserError(f"unknown executor {kind!r}; expected one of {', '.join(EXECUTORS)}")
    ex = submitit.AutoExecutor(folder=Path(folder) / "%j", cluster=kind)
    timeout = slurm.pop("timeout_min", timeout_min)
    EXECUTORS.lookup(kind)(ex, name=name, timeout=timeout, slurm=slurm, max_parallel=max_parallel,
                           tasks_per_node=tasks_per_node, nodes=nodes)
    return Launcher(ex, kind, max_parallel, slurm.get("max_array_size"))


def _slurm(ex: submitit.AutoExecutor, *, name: str, timeout: float | None, slurm: dict[str, Any], max_parallel: int,
           tasks_per_node: int, nodes: int) -> None:
    """SLURM: the shared parameters as they are, any other ``[launch]`` cluster key as ``slurm_<key>``."""
    params = {k if k in _SHARED or k.startswith("slurm_") else f"slurm_{k}": v
              for k, v in slurm.items() if k != "max_array_size"}
    defaults = {"nodes": nodes, "tasks_per_node": tasks_per_node, "slurm_array_parallelism": max_parallel}
    ex.update_parameters(name=name, timeout_min=int(timeout or 60), **{**defaults, **params})


def _local(ex: submitit.AutoExecutor, *, name: str, timeout: float | None, nodes: int, tasks_per_node: int,
           **_: Any) -> None:
    """This machine: one node, ``tasks_per_node`` tasks (a day's time limit unless given)."""
    if nodes != 1 and tasks_per_node != 1:
        raise UserError("the local executor runs one node; use tasks_per_node for several tasks")
    ex.update_parameters(name=name, timeout_min=int(timeout or 24 * 60), tasks_per_node=tasks_per_node * nodes)


def _debug(ex: submitit.AutoExecutor, **_: Any) -> None:
    """In this process, one job after another (submitit's debug mode)."""


EXECUTORS.register("local", _local)
EXECUTORS.register("slurm", _slurm)
EXECUTORS.register("debug", _debug)


class Launcher:
    """Submits, waits for and cancels the jobs of one submitit executor (see the module doc)."""

    def __init__(self, executor: submitit.Executor, kind: str, max_parallel: int, max_array_size: int | None):
        self.executor, self.kind, self.max_parallel = executor, kind, max_parallel
        self.max_array_size = max_array_size
        self.jobs: list[submitit.Job] = []  # every job submitted, for cancel()

    @property
    def local(self) -> bool:
        return self.kind == "local" or isinstance(self.executor, submitit.LocalExecutor)

    def submit(self, fn: Callable, *args: Any) -> submitit.Job:
        with _controllers_ignore_sigint(self.local):
            job = self.executor.submit(fn, *args)
        self.jobs.append(job)
        return job

    def map(self, fn: Callable, *iterables: Iterable, progress: Callable[[int, int], None] | None = None,
            poll_s: float = 0.2) -> list[submitit.Job]:
        """One job per item; the jobs in item order.  Local: at most ``max_parallel`` at once
        (returns when the last has started).  SLURM: arrays of at most MaxArraySize."""
        items = list(zip(*iterables))
        if not self.local:
            return self._arrays(fn, items)
        jobs: list[submitit.Job] = []
        while len(jobs) < len(items):
            while len(jobs) < len(items) and sum(not j.done() for j in jobs) < self.max_parallel:
                jobs.append(self.submit(fn, *items[len(jobs)]))
            if len(jobs) < len(items):
                if progress is not None:
                    progress(sum(j.done() for j in jobs), len(items))
                time.sleep(poll_s)
        return jobs

    def _arrays(self, fn: Callable, items: list[tuple]) -> list[submitit.Job]:
        slurm = self.kind == "slurm" or isinstance(self.executor, submitit.SlurmExecutor)
        size = int(self.max_array_size or (max_array_size() if slurm else None) or 1000)
        jobs: list[submitit.Job] = []
        for i in range(0, len(items), size):  # submitit's map_array makes one array per call
            new = self.executor.map_array(fn, *zip(*items[i: i + size]))
            self.jobs += new
            jobs += new
        return jobs

    def wait(self, jobs: Sequence[submitit.Job] | None = None, progress: Callable[[int, int], None] | None = None,
             poll_s: float = 1.0) -> list[Any]:
        """Every job's result (a list of the tasks' results for a job of several tasks), in
        order, once all have ended, calling ``progress(done, total)`` about once per ``poll_s``;
        :class:`JobsFailed` lists every failed job's last error line at the end."""
        jobs = list(self.jobs if jobs is None else jobs)
        if self.kind != "debug" and not isinstance(self.executor, submitit.DebugExecutor):
            while not all(j.done() for j in jobs):
                if progress is not None:
                    progress(sum(j.done() for j in jobs), len(jobs))
                time.sleep(poll_s)
        results, failures = [], []
        for i, j in enumerate(jobs):
            try:
                out = j.results()  # one per task
                results.append(out[0] if len(out) == 1 else out)
            except Exception as exc:  # keep collecting; report every failure at the end
                results.append(None)
                failures.append((i, str(j.job_id), job_signal(j, exc), job_error(exc)))
        if progress is not None:
            progress(len(jobs), len(jobs))
        if failures:
            raise JobsFailed([f"job {job_id}: {error}" for _, job_id, _, error in failures], failures)
        return results

    def cancel(self, jobs: Sequence[submitit.Job] | None = None, grace_s: float = 60.0) -> None:
        """Stop every unfinished job: local ones by SIGTERM (they save and return), killed
        after ``grace_s``; SLURM ones by ``scancel``.  Waits until local ones have ended."""
        live = [j for j in (self.jobs if jobs is None else jobs) if not _ended(j)]
        if not self.local:
            for j in live:
                j.cancel(check=False)
            return
        for j in live:
            _signal(int(j.job_id), signal.SIGTERM)  # the controller forwards it to its tasks
        deadline = time.monotonic() + grace_s
        while any(not _ended(j) for j in live) and time.monotonic() < deadline:
            time.sleep(0.1)
        for j in [j for j in live if not _ended(j)]:
            for pid in [*_children(int(j.job_id)), int(j.job_id)]:  # the controller's tasks, then it
                _signal(pid, signal.SIGKILL)
            _ended(j)

    def __enter__(self) -> "Launcher":
        """In here SIGTERM raises KeyboardInterrupt, so it cancels the jobs as Ctrl-C does."""
        self._main = threading.current_thread() is threading.main_thread()
        if self._main:
            self._old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._main:  # restored first: a second SIGTERM while cancelling ends the launcher
            signal.signal(signal.SIGTERM, self._old_term)
        if exc_type is not None:
            self.cancel()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _ended(job: submitit.Job) -> bool:
    try:
        return job.done()
    except Exception:  # noqa: BLE001 -- a job whose state cannot be read is not ours to wait on
        return True


def _signal(pid: int, sig: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc; empty elsewhere)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with suppress(OSError):
            out += [int(c) for c in task.read_text().split()]
    return out


@contextmanager
def _controllers_ignore_sigint(local: bool) -> Iterator[None]:
    """Start local controllers with SIGINT ignored (inherited through exec; Python keeps an
    ignored SIGINT ignored), so a terminal's Ctrl-C reaches only the launcher."""
    main = threading.current_thread() is threading.main_thread()
    if not (local and main):
        yield
        return
    env = os.environ.get(LAUNCHER_PID_ENV)
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())  # the jobs watch this process (kill -9)
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if env is None:
            os.environ.pop(LAUNCHER_PID_ENV, None)
        else:
            os.environ[LAUNCHER_PID_ENV] = env


# -- inside a job ---------------------------------------------------------------------------
def handle_stop_signals(watch_s: float = 1.0) -> None:
    """Call first in a job function.  In a local submitit job SIGTERM sets the flag
    :func:`stop_requested` reads (instead of submitit ignoring SIGTERM), and a watcher thread
    sets it when the launcher process has gone; elsewhere (SLURM, debug, no job) nothing changes."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "local" or threading.current_thread() is not threading.main_thread():
        return
    _STOP.clear()
    _STOPPED_BY.clear()
    faulthandler.enable()  # a fatal signal leaves its name in the job's log (job_signal reads it)
    # SIGTERM (the launcher's cancel, `kill`) stops the job at the next step; SIGINT stays as
    # the launcher started it: ignored, so a terminal's Ctrl-C reaches the launcher only
    signal.signal(signal.SIGTERM, _stop)
    launcher = int(os.environ.get(LAUNCHER_PID_ENV, "0"))
    controller = os.getppid()

    def watch() -> None:
        while not _STOP.is_set():
            if os.getppid() != controller or (launcher and not _alive(launcher)):
                _STOP.set()
            time.sleep(watch_s)

    threading.Thread(target=watch, name="interpscale-launcher-watch", daemon=True).start()


def _stop(signum, frame) -> None:
    _STOPPED_BY[:] = [signal.Signals(signum).name]
    _STOP.set()


def stop_signal() -> str | None:
    """The signal that asked this job to stop (None: not a signal, or no stop asked)."""
    return _STOPPED_BY[0] if _STOPPED_BY else None


def stop_requested() -> bool:
    """True once this job has been asked to stop (see :func:`handle_stop_signals`)."""
    return _STOP.is_set()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped) is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


# -- helpers --------------------------------------------------------------------------------
def job_error(exc: BaseException) -> str:
    """The last line of a failed job's traceback that names the error (the message itself)."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error:" in ln:
            return ln.split("Error:", 1)[1].strip()
    return lines[-1] if lines else repr(exc)


# faulthandler's names of the fatal signals (a job enables it: handle_stop_signals)
_FATAL = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
          "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL"}


def job_signal(job: submitit.Job, exc: BaseException) -> str | None:
    """The signal that ended a job without a result, where it can be told: the job process's
    own (a local controller killed), a fatal signal faulthandler reported, else SIGKILL for a
    task that left no result and no Python error (SIGTERM is caught and SIGINT ignored, which end a
    job normally, so the uncatchable kill is what remains: ``kill -9``, the OOM killer)."""
    proc = getattr(job, "_process", None)
    rc = proc.poll() if proc is not None else None
    if rc is not None and rc < 0:
        return signal.Signals(-rc).name
    text = str(exc)
    if "has not produced any output" not in text:
        return None
    for what, name in _FATAL.items():
        if f"Fatal Python error: {what}" in text:
            return name
    return "SIGKILL" if "Traceback" not in text else None


def max_array_size() -> int | None:
    """MaxArraySize from ``scontrol show config`` (array indices must be < it); None without SLURM."""
    try:
        out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        if line.strip().startswith("MaxArraySize"):
            return max(1, int(line.split("=")[1]) - 1)
    return None
