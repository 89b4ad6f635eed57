"""Streaming data preparation in the four steps of ``docs/data.md`` ("What `data prepare`
does"), each resumable and atomic; tasks run in this process or as jobs of ``interpscale.executors``.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import multiprocessing
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from interpscale._atomic import atomic_path, atomic_write_text
from interpscale._jsonl import jsonable
from interpscale.data.corpus import corpus_config, generate_documents, make_concepts, read_concepts, write_concepts
from interpscale.data.sources import RawDoc, check_inputs, expand_sources, iter_documents
from interpscale.data.tokenizer import encode_texts, load_tokenizer, special_ids, train_tokenizer
from interpscale.errors import UserError
from interpscale.executors import EXECUTORS, JobsFailed, make_executor

log = logging.getLogger(__name__)

FORMAT = "interpscale-shards/1"
PARTS = ".parts"
SPLITS = ("train", "val")
MODES = ("inline", *EXECUTORS)  # where the tasks run: this process, or one of the launcher's executors

__all__ = ["MODES", "make_request", "prepare"]


def prepare(sources, out: str | os.PathLike, *, executor: str = "inline", slurm: dict | None = None,
            max_parallel: int = 2, workers: int = 1, progress: bool = False, **options: Any) -> Path:
    """Prepare ``sources`` into the data directory ``out`` and return it (``options``: see
    ``make_request``); a rerun after a crash or a kill resumes, keeping finished parts.
    ``inline`` works in this process (``workers`` processes, each with a single-threaded encoder);
    ``local`` / ``slurm`` run one submitit task per input file, at most ``max_parallel`` at once."""
    if executor not in MODES:
        raise UserError(f"unknown executor {executor!r}; expected one of {MODES}")
    out = Path(out)
    req = make_request(sources, **options)
    with locked(out):
        if start(out, req):
            return out
        req = read_request(out)
        if req["fixed_concepts"] and not (out / "concepts.json").exists():
            if req["concepts"]:
                cards = read_concepts(req["concepts"])  # checked by make_request
            else:
                cfg = corpus_config(req["inputs"][0])
                cards = make_concepts(cfg.n_concepts, entities_per_concept=cfg.entities_per_concept,
                                      seed=cfg.seed)
            write_concepts(cards, out / "concepts.json")
        n = len(req["inputs"])
        if executor == "inline":
            build_tokenizer(out)
            _inline_parts(out, n, workers, progress)
            finalize(out)
        else:
            _as_jobs(out, n, executor, slurm or {}, max_parallel)
    return out


def _single_threaded_encoder() -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the workers are the parallelism


def _inline_parts(out: Path, n: int, workers: int, progress: bool) -> None:
    from tqdm.auto import tqdm

    errors: dict[int, BaseException] = {}
    with tqdm(total=n, desc="prepare", disable=not progress or n < 2) as bar:
        if workers <= 1 or n < 2:
            for i in range(n):
                tokenize_part(out, i)
                bar.update(1)
            return
        ctx = multiprocessing.get_context("fork")  # workers start in milliseconds, nothing re-imported
        with ProcessPoolExecutor(min(workers, n), mp_context=ctx, initializer=_single_threaded_encoder) as pool:
            futures = {pool.submit(tokenize_part, str(out), i): i for i in range(n)}
            for f in as_completed(futures):
                if f.exception() is not None:  # the other files go on; their parts are kept
                    errors[futures[f]] = f.exception()
                bar.update(1)
    if errors:
        raise errors[min(errors)]


def _as_jobs(out: Path, n: int, executor: str, slurm: dict, max_parallel: int) -> None:
    """Step 3 as jobs, one task per input file.  On SLURM steps 2 and 4 (the tokenizer, the
    finalization) are jobs too, so nothing heavy runs on the login node; ``local`` and
    ``debug`` run them in this process."""
    launcher = make_executor(executor, out / ".submitit", name="data-prepare", slurm=slurm,
                             max_parallel=max_parallel)
    here = executor != "slurm"

    def wait(jobs, what: str) -> None:
        try:
            launcher.wait(jobs)
        except JobsFailed as exc:  # the finished parts are kept; every failure is reported
            raise UserError(f"{what} failed (finished parts are kept; rerun to resume):\n{exc}") from None

    with launcher:
        build_tokenizer(out) if here else wait([launcher.submit(build_tokenizer, str(out))], "tokenizer job")
        req = read_request(out)
        todo = [i for i in range(n) if not done_marker(out, i, req)]
        if todo:
            wait(launcher.map(tokenize_part, [str(out)] * len(todo), todo), f"{len(todo)} tokenization task(s)")
        finalize(out) if here else wait([launcher.submit(finalize, str(out))], "finalization job")
    shutil.rmtree(out / ".submitit", ignore_errors=True)


# -- step 1: the request, DIR/.parts/request.json while preparation runs (its ``comparable`` part
# kept in meta.json), checked on every rerun: other data is refused, an input whose size or mtime
# changed is prepared again.
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


# -- step 2: the validation split and the tokenizer ----------------------------------------------
def is_validation(texts: Sequence[str], val_fraction: float, seed: int) -> bool:
    """The validation split, one rule for every corpus (``docs/data.md``, step 2): a seeded
    BLAKE2b hash of a whole document's chunk texts, read as a number in [0, 1), < ``val_fraction``."""
    if val_fraction <= 0:
        return False
    key = int(seed).to_bytes(8, "little", signed=True)
    data = "\x1e".join(texts).encode("utf-8", "surrogatepass") + b"\x1e"  # each text then a separator
    h = hashlib.blake2b(data, digest_size=8, key=key)
    return int.from_bytes(h.digest(), "little") / 2.0**64 < val_fraction


def _sample_texts(req: dict) -> Iterator[str]:
    """Training-side chunk texts, about ``sample_bytes`` in all, spread over the inputs."""
    budget = max(1, int(req["sample_bytes"]) // len(req["inputs"]))
    for inp in req["inputs"]:
        used = 0
        for doc in input_docs(req, inp):
            texts = [t for t, _ in doc.chunks]
            if is_validation(texts, req["val_fraction"], req["seed"]):
                continue
            for t in texts:
                yield t
                used += len(t.encode("utf-8", "surrogatepass"))
            if used >= budget:
                break


def build_tokenizer(out: str | os.PathLike) -> None:
    """Step 2 (idempotent): DIR/tokenizer.json, then the token dtype (uint16 when every id fits)."""
    out = Path(out)
    req = read_request(out)
    if not (out / "tokenizer.json").exists():
        if req["tokenizer"]:
            tok = load_tokenizer(req["tokenizer"])
        else:
            t0 = time.perf_counter()
            # the synthetic corpus has a closed alphabet: the character-level BPE it always had
            closed = all(i.get("kind") == "synthetic" for i in req["inputs"])
            tok = train_tokenizer(_sample_texts(req), req["vocab_size"], byte_level=False if closed else None)
            log.info("trained a %d-token BPE in %.1f s", tok.get_vocab_size(), time.perf_counter() - t0)
        special_ids(tok)  # all four present and distinct
        with atomic_path(out / "tokenizer.json") as tmp:
            tok.save(str(tmp))
    if not req["token_dtype"]:
        v = load_tokenizer(out / "tokenizer.json", add_specials=False).get_vocab_size()
        req["token_dtype"] = "uint16" if v <= 1 << 16 else "uint32"
        atomic_write_text(out / PARTS / "request.json", json.dumps(req, indent=1))


# -- step 3: one append-only token part per input file, DIR/.parts/NNNNN.*, done when its marker
# NNNNN.json (written last) still matches the input file (size, mtime) and the tokenizer.
class PartWriter:
    """Append-only files of one split of one part: tokens, [EOC] positions, label counts and ids."""

    def __init__(self, prefix: str, dtype):
        self.dtype = dtype
        self.files = {k: open(f"{prefix}.{k}", "wb") for k in ("tokens", "eoc", "count", "labels")}
        self.n = {"tokens": 0, "chunks": 0, "docs": 0, "labels": 0}
        self.flat, self.eoc, self.count, self.labels = [], [], [], []  # the buffered batch

    def add(self, chunks: list[list[int]], labels: list[list[int]], eoc: int, eos: int) -> None:
        """One document: each chunk's tokens then [EOC], then [EOS]."""
        for ids, lab in zip(chunks, labels):
            self.flat.extend(ids)
            self.flat.append(eoc)
            self.eoc.append(len(self.flat) - 1)
            self.count.append(len(lab))
            self.labels.extend(lab)
        self.flat.append(eos)
        self.n["docs"] += 1

    def flush(self):
        if not self.flat:
            return
        self.files["tokens"].write(np.asarray(self.flat, dtype=self.dtype).tobytes())
        self.files["eoc"].write((np.asarray(self.eoc, dtype=np.int64) + self.n["tokens"]).tobytes())
        self.files["count"].write(np.asarray(self.count, dtype=np.uint32).tobytes())
        self.files["labels"].write(np.asarray(self.labels, dtype=np.uint32).tobytes())
        self.n["tokens"] += len(self.flat)
        self.n["chunks"] += len(self.eoc)
        self.n["labels"] += len(self.labels)
        self.flat, self.eoc, self.count, self.labels = [], [], [], []

    def close(self):
        self.flush()
        for f in self.files.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()


class ChunkLabels:
    """Concept ids of chunk labels: a fixed concepts.json's order, or first appearance in this
    part (``finalize`` maps those onto the sorted label names)."""

    def __init__(self, fixed: dict[str, int] | None):
        self.fixed, self.local = fixed, {}
        self._seen: dict[tuple, list[int]] = {}  # label combinations recur: map each one once

    def ids(self, labs, where: str) -> list[int]:
        if (ids := self._seen.get(key := tuple(labs))) is not None:
            return ids
        if self.fixed is not None:
            unknown = [lab for lab in labs if lab not in self.fixed]
            if unknown:
                raise UserError(f"{where}: unknown concept label(s) {unknown} (not in concepts.json)")
            ids = sorted({self.fixed[lab] for lab in labs})
        else:
            ids = sorted({self.local.setdefault(lab, len(self.local)) for lab in labs})
        if len(self._seen) < 1 << 20:
            self._seen[key] = ids
        return ids

    def parse(self, doc: RawDoc) -> list[list[int]]:
        """Each chunk's concept ids; an empty text is an error naming the document (and chunk)."""
        out = []
        for j, (text, labs) in enumerate(doc.chunks):
            where = f"{doc.where}, chunk {j}" if len(doc.chunks) > 1 else doc.where
            if not text:
                raise UserError(f"{where}: empty 'text'")
            out.append(self.ids(labs, where) if labs else [])
        return out


def part_prefix(out: Path, i: int) -> Path:
    return Path(out) / PARTS / f"{i:05d}"


def done_marker(out: Path, i: int, req: dict) -> dict | None:
    """The marker of part ``i`` if it is finished and still matches its input file and the tokenizer."""
    path = part_prefix(out, i).with_suffix(".json")
    m = json.loads(path.read_text()) if path.exists() else {}
    fresh = m and m.get("stat") == stat_of(req["inputs"][i])
    return m if fresh and m.get("tokenizer") == file_sha(Path(out) / "tokenizer.json") else None


def _encode_in_batches(docs, batch_bytes: int, tok, parse, write) -> None:
    """Parse documents and encode their chunks in batches of about ``batch_bytes`` of text;
    reading / parsing the next batch overlaps the encoding of the last one (the tokenizers
    encoder releases the GIL)."""
    pending = None
    gc_was = gc.isenabled()
    gc.disable()  # millions of acyclic token lists: the cyclic collector only costs time here
    try:
        with ThreadPoolExecutor(1) as pool:
            texts, parsed, size = [], [], 0
            for doc in docs:
                parsed.append(parse(doc))
                texts += [t for t, _ in doc.chunks]
                size += sum(len(t) for t, _ in doc.chunks)
                if size >= batch_bytes:
                    if pending is not None:
                        write(pending[0], pending[1].result())
                    pending = (parsed, pool.submit(encode_texts, tok, texts))
                    texts, parsed, size = [], [], 0
            if pending is not None:
                write(pending[0], pending[1].result())
            write(parsed, encode_texts(tok, texts))
    finally:
        if gc_was:
            gc.enable()


def tokenize_part(out: str | os.PathLike, i: int) -> dict:
    """Step 3 for input ``i`` (idempotent; a submitit array task); returns its marker."""
    out = Path(out)
    req = read_request(out)
    if marker := done_marker(out, i, req):
        return marker
    prefix = part_prefix(out, i)
    inp, tok_path = req["inputs"][i], out / "tokenizer.json"
    stat = stat_of(inp)
    tok = load_tokenizer(tok_path, add_specials=False)
    sid = special_ids(tok)
    fixed = ({c["label"]: k for k, c in enumerate(read_concepts(out / "concepts.json"))}
             if req["fixed_concepts"] else None)
    labels = ChunkLabels(fixed)
    for p in prefix.parent.glob(f"{prefix.name}.*"):  # leftovers of a killed attempt
        p.unlink()
    writers = {s: PartWriter(f"{prefix}.{s}", np.dtype(req["token_dtype"])) for s in SPLITS}
    val_fraction, seed = req["val_fraction"], req["seed"]

    def parse(doc: RawDoc) -> tuple[str, list[list[int]]]:
        held = is_validation([t for t, _ in doc.chunks], val_fraction, seed)
        return ("val" if held else "train"), labels.parse(doc)

    def write(parsed: list[tuple[str, list[list[int]]]], enc: list[list[int]]) -> None:
        k = 0
        for split, labs in parsed:
            writers[split].add(enc[k: k + len(labs)], labs, sid["eoc"], sid["eos"])
            k += len(labs)
        for w in writers.values():
            w.flush()

    try:
        _encode_in_batches(input_docs(req, inp), req["batch_bytes"], tok, parse, write)
    finally:
        for w in writers.values():
            w.close()
    marker = {"input": inp, "stat": stat, "tokenizer": file_sha(tok_path),
              "labels": None if fixed is not None else list(labels.local), **{s: writers[s].n for s in SPLITS}}
    atomic_write_text(prefix.with_suffix(".json"), json.dumps(marker))
    log.info("part %d (%s): %d train / %d val tokens", i, inp.get("path", "synthetic"),
             writers["train"].n["tokens"], writers["val"].n["tokens"])
    return marker


# -- step 4: the parts into one shard per split (the files of "The prepared directory"), then
# meta.json; memory stays bounded by a block.
_BLOCK = 1 << 22  # elements per block when concatenating parts
SHARD_FILES = ("tokens.bin", "chunk_end.npy", "label_offsets.npy", "label_ids.npy")


def corpus_sha(path: str | os.PathLike) -> str:
    """Fingerprint of a prepared corpus: SHA-256 (16 hex digits) of every split's shard files
    and concepts.json, in a fixed order (the tokenizer has its own, ``file_sha``)."""
    names = [f"{s}.{f}" for s in SPLITS for f in SHARD_FILES] + ["concepts.json"]
    return file_sha(*(Path(path) / n for n in names), named=True)


def _blocks(path: str, dtype, start: int) -> Iterator[tuple[slice, np.ndarray]]:
    """The array in ``path`` block by block, each with its slice of the output from ``start``."""
    with open(path, "rb") as f:
        while (a := np.fromfile(f, dtype=dtype, count=_BLOCK)).size:
            yield slice(start, start + a.size), a
            start += a.size


@contextlib.contextmanager
def _npy_out(path: Path, dtype, n: int):
    with atomic_path(path, suffix=".npy") as tmp:
        if n == 0:
            np.save(tmp, np.zeros(0, dtype=dtype))
            yield None
        else:
            arr = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=(n,))
            yield arr
            arr.flush()
            del arr


def _cards(out: Path, req: dict, markers: list[dict]) -> tuple[list[dict], list[np.ndarray | None]]:
    """The concept cards and, per part, the map of its local label ids onto them."""
    if req["fixed_concepts"]:
        return read_concepts(out / "concepts.json"), [None] * len(markers)
    names = sorted({lab for m in markers for lab in m["labels"]})
    cards = [{"label": n, "description": "", "words": []} for n in names]
    index = {n: k for k, n in enumerate(names)}
    write_concepts(cards, out / "concepts.json")
    return cards, [np.array([index[lab] for lab in m["labels"]], dtype=np.uint32) for m in markers]


def _write_split(out: Path, s: str, markers: list[dict], remaps: list, tot: dict, lab_dtype) -> None:
    """Concatenate split ``s`` of the parts ([EOC] positions shifted, label offsets summed, ids remapped)."""
    with atomic_path(out / f"{s}.tokens.bin", suffix=".bin") as tmp:
        with open(tmp, "wb") as f:
            for i in range(len(markers)):
                with open(f"{part_prefix(out, i)}.{s}.tokens", "rb") as src:
                    shutil.copyfileobj(src, f, 1 << 24)
    with _npy_out(out / f"{s}.chunk_end.npy", np.int64, tot["chunks"]) as ends, \
            _npy_out(out / f"{s}.label_offsets.npy", np.int64, tot["chunks"] + 1) as offs, \
            _npy_out(out / f"{s}.label_ids.npy", lab_dtype, tot["labels"]) as labs:
        t0 = c0 = l0 = 0
        if offs is not None:
            offs[0] = 0
        for i, m in enumerate(markers):
            pre, run = f"{part_prefix(out, i)}.{s}", l0
            for sl, a in _blocks(f"{pre}.eoc", np.int64, c0):
                ends[sl] = a + t0
            for sl, a in _blocks(f"{pre}.count", np.uint32, c0 + 1):
                offs[sl] = cum = np.cumsum(a, dtype=np.int64) + run
                run = int(cum[-1])
            for sl, a in _blocks(f"{pre}.labels", np.uint32, l0):
                labs[sl] = a if remaps[i] is None else remaps[i][a]
            t0, c0, l0 = t0 + m[s]["tokens"], c0 + m[s]["chunks"], l0 + m[s]["labels"]


def finalize(out: str | os.PathLike) -> dict:
    """Step 4: concatenate the parts into the shards and write meta.json (last)."""
    out = Path(out)
    req = read_request(out)
    markers = [done_marker(out, i, req) for i in range(len(req["inputs"]))]
    if None in markers:
        i = markers.index(None)
        raise RuntimeError(f"{out}: input {i} ({req['inputs'][i].get('path')}) is not prepared yet")
    cards, remaps = _cards(out, req, markers)
    lab_dtype = np.uint16 if len(cards) <= 1 << 16 else np.uint32
    tok = load_tokenizer(out / "tokenizer.json", add_specials=False)
    splits: dict[str, dict] = {}
    for s in SPLITS:
        tot = {k: sum(m[s][k] for m in markers) for k in ("tokens", "chunks", "docs", "labels")}
        if s == "train" and tot["tokens"] == 0:
            raise UserError(f"{out}: every document fell into the validation split; lower val_fraction")
        if s == "val" and tot["tokens"] == 0 and req["val_fraction"] > 0:
            raise UserError(f"{out}: no document fell into the validation split (val_fraction="
                            f"{req['val_fraction']} of {tot['docs'] + splits['train']['docs']} documents); "
                            f"raise val_fraction or add documents")
        _write_split(out, s, markers, remaps, tot, lab_dtype)
        splits[s] = tot
    meta = {"format": FORMAT, "token_dtype": np.dtype(req["token_dtype"]).name,
            "label_dtype": np.dtype(lab_dtype).name, "vocab_size": tok.get_vocab_size(),
            "special_ids": special_ids(tok), "n_concepts": len(cards), "corpus_sha": corpus_sha(out),
            "splits": splits, "inputs": [{**m["input"], "stat": m["stat"]} for m in markers],
            **{k: req[k] for k in ("val_fraction", "seed", "tokenizer", "vocab_size_requested", "sample_bytes")},
            **req.get("extra", {}), "request": comparable(req)}
    atomic_write_text(out / "meta.json", json.dumps(meta, indent=1, default=str))
    shutil.rmtree(out / PARTS, ignore_errors=True)
    log.info("prepared %s: %d train / %d val tokens, %d concepts", out, splits["train"]["tokens"],
             splits["val"]["tokens"], len(cards))
    return meta
