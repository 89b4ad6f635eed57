"""What a data directory is prepared from: the request (``DIR/.parts/request.json`` while
preparation runs, its ``comparable`` part kept in ``meta.json``), checked on every rerun so that
other data is refused and an input whose size or mtime changed is prepared again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Iterator

from interpscale._atomic import atomic_write_text
from interpscale._jsonl import jsonable
from interpscale.data.corpus import corpus_config, generate_documents, read_concepts
from interpscale.data.sources import RawDoc, check_inputs, expand_sources, iter_documents
from interpscale.errors import UserError

log = logging.getLogger(__name__)

FORMAT = "interpscale-shards/1"
PARTS = ".parts"
SPLITS = ("train", "val")


def input_docs(req: dict, inp: dict) -> Iterator[RawDoc]:
    """The documents of one input of ``req``: a file, or the synthetic corpus (labels by name)."""
    if inp.get("kind") == "synthetic":
        concepts, docs = generate_documents(corpus_config(inp))
        for d, doc in enumerate(docs):
            yield RawDoc([(text, [concepts[c].label for c in labs]) for text, labs in doc], f"synthetic document {d}")
        return
    yield from iter_documents(inp["path"], req["format"], document_per_file=req.get("document_per_file", False))


def stat_of(inp: dict) -> list[int] | None:
    """[size, mtime_ns] of an input file (None for the synthetic corpus)."""
    if "path" not in inp:
        return None
    st = Path(inp["path"]).stat()
    return [st.st_size, st.st_mtime_ns]


def file_sha(*paths: str | os.PathLike, named: bool = False) -> str:
    """The first 16 hex digits of the SHA-256 of the files' bytes (streamed), each file preceded
    by its name and a NUL when ``named``."""
    h = hashlib.sha256()
    for path in paths:
        if named:
            h.update(Path(path).name.encode() + b"\0")
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()[:16]


def read_request(out: str | os.PathLike) -> dict:
    return json.loads((Path(out) / PARTS / "request.json").read_text())


def comparable(req: dict) -> dict:
    """The part of a request that decides the prepared data (not how it was batched)."""
    return {k: v for k, v in req.items() if k not in ("token_dtype", "batch_bytes")}


def _input_file(path: str | os.PathLike, base_dir: str | os.PathLike | None, what: str) -> Path:
    """``path`` (relative ones against ``base_dir``), which must be an existing file."""
    p = Path(base_dir or "") / path  # an absolute path stays as it is
    if not p.is_file():
        raise UserError(f"{what} file not found: {path}")
    return p


def _inputs(sources, fmt: str | None, base_dir, document_per_file: bool) -> list[dict]:
    if isinstance(sources, (str, os.PathLike, dict)):
        sources = [sources]
    inputs: list[dict] = []
    for s in sources:
        if isinstance(s, dict):
            if s.get("kind") != "synthetic":
                raise UserError(f"a source dict must be the synthetic corpus, got {s!r}")
            inputs.append(dict(s))
        else:
            paths = expand_sources([s], base_dir)
            check_inputs(paths, fmt, document_per_file)  # an unknown extension or non-UTF-8 text fails before any work
            inputs += [{"path": str(p.resolve())} for p in paths]
    if not inputs:
        raise UserError("no input files")
    return inputs


def make_request(sources, *, fmt: str | None = None, tokenizer: str | os.PathLike | None = None,
                 vocab_size: int = 512, sample_bytes: int = 100_000_000, val_fraction: float = 0.05,
                 seed: int = 0, concepts: str | os.PathLike | None = None, batch_bytes: int = 1 << 18,
                 document_per_file: bool = False, base_dir: str | os.PathLike | None = None,
                 extra: dict | None = None) -> dict:
    """What ``prepare`` builds, as a JSON-able dict (``sources``: paths / globs or synthetic dicts)."""
    if not 0 <= val_fraction < 1:
        raise UserError(f"val_fraction must be in [0, 1), got {val_fraction}")
    inputs = _inputs(sources, fmt, base_dir, document_per_file)
    tok_path = str(_input_file(tokenizer, base_dir, "tokenizer").resolve()) if tokenizer else None
    conc = _input_file(concepts, base_dir, "concepts") if concepts else None
    if conc:  # a bad concepts file fails before anything is written
        labels = [c["label"] for c in read_concepts(conc)]
        if len(set(labels)) != len(labels):
            raise UserError(f"{conc}: duplicate concept labels")
    synthetic = [s for s in inputs if s.get("kind") == "synthetic"]
    if synthetic and (len(inputs) > 1 or conc):
        raise UserError("the synthetic corpus cannot be mixed with other inputs or a concepts file")
    if not tok_path and not sample_bytes > 0:
        raise UserError(f"tokenizer sample must be > 0 bytes, got {sample_bytes}")
    trained = None if tok_path else int(vocab_size)
    req = {"format_version": FORMAT, "inputs": inputs, "format": fmt, "tokenizer": tok_path,
           "vocab_size": trained, "vocab_size_requested": trained,
           "sample_bytes": None if tok_path else int(sample_bytes), "val_fraction": float(val_fraction),
           "seed": int(seed), "concepts": str(conc.resolve()) if conc else None,
           "concepts_sha": file_sha(conc) if conc else None, "fixed_concepts": bool(conc or synthetic),
           "batch_bytes": int(batch_bytes), "token_dtype": None, "extra": extra or {}}
    if document_per_file:  # only when set: requests (and cache keys) of other data stay as they were
        req["document_per_file"] = True
    return jsonable(req)


def start(out: Path, req: dict) -> bool:
    """Record the request (or check it matches a resumed one); True when already finished."""
    old_path = out / PARTS / "request.json"
    if (out / "meta.json").exists():
        meta = json.loads((out / "meta.json").read_text())
        if meta.get("request") != comparable(req):
            raise UserError(f"{out} already holds other prepared data; choose another --out or delete it")
        if [i.get("stat") for i in meta.get("inputs", [])] == [stat_of(i) for i in req["inputs"]]:
            return True
        log.warning("%s: an input changed since it was prepared; preparing it again", out)
        (out / "meta.json").unlink()  # first: a kill during the cleanup leaves no half directory
        for p in out.iterdir():
            if p.name != ".lock":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    if old_path.exists():
        if comparable(json.loads(old_path.read_text())) != comparable(req):
            raise UserError(f"{out} holds an unfinished preparation of other data; choose another --out "
                            f"or delete it")
        return False
    if out.exists() and any(p.name not in (PARTS, ".lock", ".submitit") for p in out.iterdir()):
        raise UserError(f"{out} is not empty and holds no preparation; choose another --out")
    (out / PARTS).mkdir(parents=True, exist_ok=True)
    atomic_write_text(old_path, json.dumps(req, indent=1))
    return False


@contextlib.contextmanager
def locked(out: Path):
    """Hold DIR/.lock: a second preparer of the same directory waits, then finds it done."""
    import fcntl

    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield
