"""A sweep directory's identity (docs/launching.md): SWEEP/sweep.json binds it to its runs
and to the fingerprints of their data, ``{"runs": [run_id, ...], "data": [{"tokenizer_sha",
"corpus_sha", "vocab_size", "n_concepts"}, ...]}``; the checks run before anything is written.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from interpscale._atomic import atomic_write_text
from interpscale.errors import UserError

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
    """The manifest (``runs``, ``data``; an old plain list of run ids is read too), empty
    lists for a new directory; a corrupt one is a ``UserError``."""
    p = Path(sweep_dir) / "sweep.json"
    if not p.exists():
        return {"runs": [], "data": []}
    try:
        m = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{p} is corrupt ({exc}); restore it or launch into a new directory") from exc
    m = m if isinstance(m, dict) else {"runs": m}
    if not isinstance(m.get("runs"), list) or not all(isinstance(i, str) for i in m["runs"]):
        raise UserError(f"{p}: expected a sweep manifest with a list of run ids under \"runs\"")
    return {"runs": m["runs"], "data": list(m.get("data", []))}


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
        raise UserError(f"{path}: the plan has {len(added)} run(s) this sweep does not list (e.g. {added[0]}): "
                        f"another preset or grid; pass --extend to add them, or launch into a new directory")
    return {"runs": old["runs"] + added, "data": old["data"] + new}


def write_manifest(sweep_dir: str | Path, manifest: dict[str, Any]) -> None:
    atomic_write_text(Path(sweep_dir) / "sweep.json", json.dumps(manifest, indent=1))
