"""What a sweep's launch came to, said in one line (issue 37.4), and its progress off a
terminal: a plain line per change or per minute instead of carriage-return redraws."""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence, TextIO

from tqdm.auto import tqdm

from interpscale.errors import FailedWork
from interpscale.orchestration.rundir import read_status, run_state

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


@dataclass
class SweepOutcome:
    """Each run's state after a launch, and what went wrong with the jobs (one clause each)."""

    name: str
    states: dict[Path, str]
    problems: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, name: str, run_dirs: Sequence[Path], problems: Sequence[str] = ()) -> "SweepOutcome":
        return cls(name, {Path(d): run_state(Path(d)).get("state", "pending") for d in run_dirs}, list(problems))

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
                  stream: TextIO | None = None):
    """(update, close) of the ``runs done, running, failed, interrupted, total`` progress of a
    launch from the runs' status files: tqdm redrawn at most once a second on a terminal,
    else a plain line when the counts change or once a minute."""
    stream = stream or sys.stderr
    tty = bool(getattr(stream, "isatty", lambda: False)())
    bar = tqdm(total=len(dirs), desc=f"sweep {name}: runs {what}", unit="run", file=stream, dynamic_ncols=True,
               mininterval=1.0, smoothing=0.0) if tty else None
    last, shown = [0.0, 0.0], [None]

    def update(*_: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - last[0] < 1.0:
            return
        last[0] = now
        states = [read_status(d).get("state") for d in dirs]
        n = {k: states.count(k) for k in ("done", "running", "failed", "interrupted")}
        done = sum(map(evaluated, dirs)) if what == "evaluated" else n["done"]
        extra = f", interrupted {n['interrupted']}" if n["interrupted"] else ""
        post = f"running {n['running']}, failed {n['failed']}{extra}, total {len(dirs)}"
        if bar is not None:
            bar.n = done
            bar.set_postfix_str(post, refresh=False)
            bar.refresh()
        elif (done, post) != shown[0] or now - last[1] >= PLAIN_EVERY_S:
            shown[0], last[1] = (done, post), now
            stream.write(f"sweep {name}: runs {what} {done}/{len(dirs)} ({post})\n")
            stream.flush()

    def close() -> None:
        update(force=True)
        if bar is not None:
            bar.close()

    return update, close
