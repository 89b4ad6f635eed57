"""Run-directory layout, run status, finding run directories, and a sweep directory's manifest.

RUN_DIR/spec.json          the RunSpec
RUN_DIR/tokenizer.json     HF `tokenizers` JSON (special ids 0..3)
RUN_DIR/concepts.json      concept cards {label, description, words}
RUN_DIR/data.json          where the prepared data lives and the seq_len its rows are cut at
RUN_DIR/status.json        {state: pending|running|done|failed|interrupted, step, segment, steps_done,
                           steps_planned, ...}
RUN_DIR/metrics.jsonl      one JSON line per logged training step
RUN_DIR/checkpoints/*/     evaluation checkpoints (safetensors directories, models.checkpoint)
RUN_DIR/state/*/           resume states (DCP directories, orchestration.checkpointer)
RUN_DIR/results.parquet    this run's evaluated rows (+ results.csv)
SWEEP/sweep.json           the sweep's identity: its runs and the fingerprints of their data,
                           {"runs": [run_id, ...], "data": [{"tokenizer_sha", "corpus_sha", "vocab_size",
                           "n_concepts"}, ...], "estimate": the plan's runtime estimate}, checked before a
                           launch writes anything (docs/launching.md)
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

from interpscale._atomic import atomic_write_text
from interpscale.errors import UserError

STATES = ("pending", "running", "done", "failed", "interrupted")


def ensure_writable(directory: str | os.PathLike) -> Path:
    """Create ``directory`` and check we can write into it; raise a clear error otherwise."""
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=d, prefix=".write-probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise PermissionError(f"output directory {d} is not writable: {exc.strerror or exc}") from exc
    return d


def check_writable(directory: str | os.PathLike) -> Path:
    """Check, creating nothing, that ``directory`` could be made and written: its nearest
    existing ancestor is a directory a probe file can be written into (``--out`` is checked
    before any planning, not after)."""
    d = p = Path(directory)
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        raise NotADirectoryError(20, "Not a directory", str(p))
    try:
        fd, probe = tempfile.mkstemp(dir=p, prefix=".write-probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
        raise PermissionError(f"output directory {d} is not writable (cannot create a file in {p}: {why}); "
                              f"pick another --out") from exc
    return d


def read_status(run_dir: Path) -> dict[str, Any]:
    p = Path(run_dir) / "status.json"
    if not p.exists():
        return {"state": "pending", "step": 0}
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{p} is corrupt ({exc}); delete it to restart this run") from exc


def write_status(run_dir: Path, state: str, **fields: Any) -> dict[str, Any]:
    if state not in STATES:
        raise ValueError(f"unknown run state {state!r}; expected one of {STATES}")
    status = {**read_status(run_dir), **fields, "state": state, "updated": time.time()}
    atomic_write_text(Path(run_dir) / "status.json", json.dumps(status, indent=1))
    return status


def trainer_alive(run_dir: Path) -> bool:
    """Whether a trainer holds the run's flock on RUN_DIR/.lock (the kernel releases it when
    its process dies, even on SIGKILL)."""
    lock = Path(run_dir) / ".lock"
    if not lock.exists():
        return False
    with open(lock) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def run_state(run_dir: Path) -> dict[str, Any]:
    """The run's status with a stale ``running`` (its trainer died: ``kill -9``, a lost node)
    shown as ``interrupted``; the file itself is left as it is."""
    status = read_status(run_dir)
    if status.get("state") == "running" and not trainer_alive(run_dir):
        status = {**status, "state": "interrupted", "stale": True}
    return status


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def find_run_dirs(path: str | os.PathLike) -> list[Path]:
    """The run directories under ``path``: itself when it holds a spec.json, a sweep's
    SWEEP/runs/* (in manifest order when SWEEP/sweep.json exists), else any child run
    directories; raises ``ValueError`` naming ``path`` when there are none."""
    p = Path(path)
    if (p / "spec.json").exists():
        return [p]
    if (p / "sweep.json").exists():
        found = [p / "runs" / i for i in read_manifest(p)["runs"] if (p / "runs" / i / "spec.json").exists()]
    else:
        base = p / "runs" if (p / "runs").is_dir() else p
        found = sorted(d for d in base.iterdir() if (d / "spec.json").exists()) if base.is_dir() else []
    if not found:
        raise UserError(f"{p}: no run directories (no spec.json here, in runs/*, or in its subdirectories)")
    return found


# -- the sweep directory's manifest (SWEEP/sweep.json) -----------------------------------------
# the fields of interpscale.data.describe that identify a corpus as a sweep sees it
FINGERPRINT = ("tokenizer_sha", "corpus_sha")


def data_fingerprint(data_dir: str | Path) -> dict[str, Any]:
    """Tokenizer and corpus hashes, vocabulary size and concept count of prepared data."""
    from interpscale.data import describe

    info = describe(data_dir).to_dict()
    return {k: info[k] for k in (*FINGERPRINT, "vocab_size", "n_concepts")}


def fingerprint_label(fp: dict[str, Any]) -> str:
    """The short form stored in the results' ``data_fingerprint`` column."""
    return f"{fp['corpus_sha'][:12]}-{fp['tokenizer_sha'][:8]}"


def _key(fp: dict[str, Any]) -> tuple:
    return tuple(fp.get(k) for k in FINGERPRINT)


def read_manifest(sweep_dir: str | Path) -> dict[str, Any]:
    """The manifest (``runs``, ``data``, ``estimate``; an old plain list of run ids is read
    too), empty for a new directory; a corrupt one is a ``UserError``."""
    p = Path(sweep_dir) / "sweep.json"
    if not p.exists():
        return {"runs": [], "data": [], "estimate": {}}
    try:
        m = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{p} is corrupt ({exc}); restore it or launch into a new directory") from exc
    m = m if isinstance(m, dict) else {"runs": m}
    if not isinstance(m.get("runs"), list) or not all(isinstance(i, str) for i in m["runs"]):
        raise UserError(f"{p}: expected a sweep manifest with a list of run ids under \"runs\"")
    estimate = m.get("estimate")
    return {"runs": m["runs"], "data": list(m.get("data", [])), "estimate": estimate if isinstance(estimate, dict) else {}}


def check_manifest(sweep_dir: str | Path, run_ids: Iterable[str], data: Iterable[dict[str, Any]],
                   *, extend: bool = False) -> dict[str, Any]:
    """The manifest this launch will write, or a ``UserError`` naming why the directory
    refuses it (another corpus / tokenizer; new runs without ``extend``)."""
    old = read_manifest(sweep_dir)
    path = Path(sweep_dir) / "sweep.json"
    known = {_key(d) for d in old["data"]}
    new = list({_key(d): d for d in data if _key(d) not in known}.values())
    if old["runs"] and old["data"] and new:
        was = ", ".join(fingerprint_label(d) for d in old["data"])
        raise UserError(f"{path}: this sweep trains on data {was}; the plan's data is "
                        f"{fingerprint_label(new[0])} (another corpus or tokenizer): launch it into a "
                        f"new directory")
    added = [i for i in run_ids if i not in set(old["runs"])]
    if old["runs"] and added and not extend:
        raise UserError(f"{path}: the plan has {len(added)} run(s) this sweep does not list "
                        f"(e.g. {added[0]}): another preset or grid; pass --extend to add them, or launch "
                        f"into a new directory")
    return {"runs": old["runs"] + added, "data": old["data"] + new, "estimate": old["estimate"]}


def write_manifest(sweep_dir: str | Path, manifest: dict[str, Any]) -> None:
    atomic_write_text(Path(sweep_dir) / "sweep.json", json.dumps(manifest, indent=1))
