"""One account of a sweep's state (:class:`SweepState`: runs per state, steps trained and
planned, the ETA), read by the progress line, ``sweep status`` and what a launch came to, said
in one line (issue 37.4); off a terminal the progress is a plain line per change or per minute."""

from __future__ import annotations

import os
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

from tqdm.auto import tqdm

from interpscale.errors import FailedWork
from interpscale.orchestration.rundir import read_status, run_state
from interpscale.orchestration.runtime import fmt_seconds, measured_seconds
from interpscale.orchestration.spec import RunSpec, segments

NOT_DONE = ("failed", "interrupted", "running", "pending")
PLAIN_EVERY_S = 60.0  # off a terminal: a line when the counts change, else once a minute


def own_code_error(family: str, plugins: Sequence[str], exc: BaseException) -> str | None:
    """``family X raised E in its own code (file:line, in fn): message`` when the innermost
    frame of ``exc`` in a plugin module (or package) of ``plugins`` is where it was raised,
    so that an error in a user's family does not read as a toolkit bug; else None."""
    files = [f for m in plugins if (f := getattr(sys.modules.get(m), "__file__", None))]
    roots = tuple(str(Path(f).parent) + os.sep if Path(f).name == "__init__.py" else f for f in files)
    where = next((f for f in reversed(traceback.extract_tb(exc.__traceback__))
                  if roots and f.filename.startswith(roots)), None)
    if where is None:
        return None
    return (f"family {family} raised {type(exc).__name__} in its own code "
            f"({Path(where.filename).name}:{where.lineno}, in {where.name}): {exc}")


def _names(dirs: Sequence[Path], limit: int = 6) -> str:
    names = [Path(d).name for d in dirs]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def planned_steps(spec: RunSpec) -> int:
    """Optimizer steps a run trains: every segment's (its anneal branches included)."""
    return sum(s.length for s in segments(spec))


def spec_planned_steps(run_dir: str | Path) -> int:
    """:func:`planned_steps` of the run in ``run_dir`` (0 when it holds no readable spec)."""
    try:
        return planned_steps(RunSpec.load(run_dir))
    except (OSError, ValueError, TypeError, KeyError):
        return 0


@dataclass(frozen=True)
class RunProgress:
    """One run as the account sees it: its state, steps trained (every segment) and planned."""

    run_dir: Path
    state: str
    steps_done: int
    steps_planned: int
    status: dict[str, Any]


@dataclass
class SweepState:
    """One account of a sweep's state, read from its runs' status files: runs done / running /
    failed / interrupted / pending, each run's steps trained and planned, and the ETA from the
    plan's runtime estimate (``estimate``: ``Plan.estimate`` as stored in SWEEP/sweep.json).
    The progress line, ``sweep status``, and the launch's last line all read it."""

    runs: list[RunProgress]
    estimate: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, run_dirs: Sequence[str | Path], estimate: dict[str, Any] | None = None, *,
             planned: dict[Path, int] | None = None, probe: bool = True) -> "SweepState":
        """``probe``: a ``running`` run whose trainer died shows ``interrupted`` (a lock probe;
        off for the live progress line, which must not race a trainer taking its lock)."""
        runs = []
        for d in map(Path, run_dirs):
            st = run_state(d) if probe else read_status(d)
            n = int(st.get("steps_planned") or (planned or {}).get(d) or spec_planned_steps(d))
            state = st.get("state", "pending")
            done = n if state == "done" else min(n, int(st.get("steps_done", 0)))
            runs.append(RunProgress(d, state, done, n, st))
        return cls(runs, dict(estimate or {}))

    def by_state(self) -> dict[str, list[Path]]:
        return {s: [r.run_dir for r in self.runs if r.state == s] for s in ("done", *NOT_DONE)}

    def summary(self) -> str:
        """``done 17, running 2, failed 0, interrupted 0, pending 5; steps 41000/52000; ETA 3.2 min``."""
        n = {k: len(v) for k, v in self.by_state().items()}
        return ", ".join(f"{k} {n[k]}" for k in ("done", "running", "failed", "interrupted", "pending")) + \
            self.steps_text()

    def counts_text(self) -> str:
        """``running 2, failed 0[, interrupted 1], pending 5, total 24``."""
        n = {k: len(v) for k, v in self.by_state().items()}
        extra = f", interrupted {n['interrupted']}" if n["interrupted"] else ""
        return f"running {n['running']}, failed {n['failed']}{extra}, pending {n['pending']}, total {len(self.runs)}"

    def steps_text(self) -> str:
        """``; steps 41000/52000; ETA 3.2 min`` (the parts known)."""
        planned = sum(r.steps_planned for r in self.runs)
        text = f"; steps {sum(r.steps_done for r in self.runs)}/{planned}" if planned else ""
        eta = self.eta_s()
        return text + (f"; ETA {fmt_seconds(eta)}" if eta is not None else "")

    def eta_s(self) -> float | None:
        """Seconds until every run not failed is done: each one's estimated seconds (the
        plan's) for the share of its steps still to train, scaled by the median measured /
        estimated of the runs done, packed ``max_parallel`` at a time; None without an estimate."""
        est = self.estimate.get("runs", {})
        left = [r for r in self.runs if r.state not in ("done", "failed")]
        if not left:
            return 0.0
        if not all(r.run_dir.name in est for r in left):
            return None
        ratios = [m / est[r.run_dir.name] for r in self.runs if r.state == "done" and r.run_dir.name in est
                  and (m := measured_seconds(r.run_dir)) is not None and est[r.run_dir.name] > 0]
        k = statistics.median(ratios) if ratios else 1.0
        start = float(self.estimate.get("job_start_s", 0.0)) / max(1, int(self.estimate.get("runs_per_job", 1)))
        rem = [k * (est[r.run_dir.name] * (1 - r.steps_done / max(1, r.steps_planned))
                    + (start if r.state == "pending" else 0.0)) for r in left]
        return max(sum(rem) / min(int(self.estimate.get("max_parallel", 1)), len(rem)), max(rem))


@dataclass
class SweepOutcome:
    """Each run's state after a launch, and what went wrong with the jobs (one clause each)."""

    name: str
    states: dict[Path, str]
    problems: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, name: str, run_dirs: Sequence[Path], problems: Sequence[str] = ()) -> "SweepOutcome":
        return cls(name, {r.run_dir: r.state for r in SweepState.read(run_dirs).runs}, list(problems))

    @property
    def complete(self) -> bool:
        return all(s == "done" for s in self.states.values())

    def line(self) -> str:
        """``sweep X: 22 of 24 runs done, 1 failed, 1 interrupted, 0 pending; not done: ...``,
        then the job problems and what to do."""
        by = {s: [d for d, st in self.states.items() if st == s] for s in ("done", *NOT_DONE)}
        n = len(self.states)
        text = (f"sweep {self.name}: {len(by['done'])} of {n} runs done, {len(by['failed'])} failed, "
                f"{len(by['interrupted']) + len(by['running'])} interrupted, {len(by['pending'])} pending")
        if self.complete:
            return text
        named = lambda d: any(d.name in p for p in self.problems)  # noqa: E731 -- a job clause names it
        parts = list(self.problems)
        parts += [f"run {d.name} failed: {read_status(d).get('error', 'no error recorded')}"
                  for d in by["failed"][:3] if not named(d)]
        stopped: dict[str, list[Path]] = {}
        for d in by["interrupted"] + by["running"]:
            if not named(d):
                stopped.setdefault(str(read_status(d).get("stopped_by") or "a stop"), []).append(d)
        parts += [f"interrupted by {how}: {_names(ds)}" for how, ds in stopped.items()]
        if pending := [d for d in by["pending"] if not named(d)]:
            parts.append(f"pending: {_names(pending)}")
        resumable = len(by["failed"]) < n - len(by["done"])
        return text + "; " + "; ".join(parts) + ("; launch again to resume" if resumable else
                                                 "; launch again to retry the failed runs once fixed")


class SweepIncomplete(FailedWork):
    """A launch ended with runs not done (exit 1); ``outcome`` says which and why."""

    def __init__(self, outcome: SweepOutcome):
        self.outcome = outcome
        super().__init__(outcome.line())


def progress_line(name: str, what: str, dirs: Sequence[Path], evaluated: Callable[[Path], bool],
                  stream: TextIO | None = None, estimate: dict[str, Any] | None = None):
    """(update, close) of a launch's progress, read from the runs' status files as
    :class:`SweepState` says it: ``sweep X: runs done 17/24 (running 2, failed 0, pending 5,
    total 24; steps 41000/52000; ETA 3.2 min)`` (``runs evaluated`` for an evaluation). tqdm
    redrawn at most once a second on a terminal, else a plain line when the counts change or
    once a minute."""
    stream = stream or sys.stderr
    tty = bool(getattr(stream, "isatty", lambda: False)())
    bar = tqdm(total=len(dirs), desc=f"sweep {name}: runs {what}", unit="run", file=stream, dynamic_ncols=True,
               mininterval=1.0, smoothing=0.0) if tty else None
    planned = {Path(d): spec_planned_steps(d) for d in dirs}
    last, shown = [0.0, 0.0], [None]

    def update(*_: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - last[0] < 1.0:
            return
        last[0] = now
        state = SweepState.read(dirs, estimate, planned=planned, probe=False)
        done = sum(map(evaluated, dirs)) if what == "evaluated" else len(state.by_state()["done"])
        counts, detail = state.counts_text(), state.steps_text()
        if bar is not None:
            bar.n = done
            bar.set_postfix_str(counts + detail, refresh=False)
            bar.refresh()
        elif (done, counts) != shown[0] or now - last[1] >= PLAIN_EVERY_S:
            shown[0], last[1] = (done, counts), now
            stream.write(f"sweep {name}: runs {what} {done}/{len(dirs)} ({counts}{detail})\n")
            stream.flush()

    def close() -> None:
        update(force=True)
        if bar is not None:
            bar.close()

    return update, close
