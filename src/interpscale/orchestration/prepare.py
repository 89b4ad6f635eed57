"""Streaming data preparation: input files -> tokenizer -> one token part per input file ->
one memory-mapped shard per split plus a JSON index (``meta.json``).

Steps, each resumable and atomic:

1. ``DIR/.parts/request.json`` records what is being prepared; ``concepts.json`` is
   written first when the concept set is fixed (``--concepts`` or the synthetic corpus);
2. ``DIR/tokenizer.json``: a pretrained one (special tokens added where missing) or a BPE
   trained on a bounded sample of the training documents;
3. one task per input file streams its documents in batches of about ``batch_bytes`` of
   text through the ``tokenizers`` batch encoder and appends to ``DIR/.parts/NNNNN.*``;
   a marker ``NNNNN.json`` written last makes the part count as done (a rerun skips it);
4. ``finalize`` concatenates the parts into ``{train,val}.tokens.bin`` (uint16 / uint32,
   ``np.memmap``), ``{split}.chunk_end.npy`` (stream position of each chunk's [EOC]) and
   the CSR concept labels ``{split}.label_offsets.npy`` / ``{split}.label_ids.npy``, then
   ``meta.json`` last.  Memory stays bounded by a batch, whatever the corpus size.

The token stream of a split: each chunk's tokens then [EOC]; each document closed by
[EOS]; documents in input order.  A document goes to validation when a keyed hash of its
text falls below ``val_fraction`` (deterministic, independent of order and of other files;
exact duplicates always land on the same side).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from interpscale._atomic import atomic_path, atomic_write_text
from interpscale.orchestration.sources import RawDoc, expand_sources, format_of, iter_documents
from interpscale.orchestration.tokenizer import encode_texts, load_tokenizer, special_ids, train_tokenizer

log = logging.getLogger(__name__)

FORMAT = "interpscale-shards/1"
PARTS = ".parts"
SPLITS = ("train", "val")
EXECUTORS = ("inline", "local", "slurm")
_BLOCK = 1 << 22  # elements per block when concatenating parts


# -- the split rule ---------------------------------------------------------------------------
def is_validation(texts, val_fraction: float, seed: int) -> bool:
    """A document is held out when a seeded BLAKE2b hash of its chunk texts, read as a
    number in [0, 1), is below ``val_fraction``."""
    if val_fraction <= 0:
        return False
    key = int(seed).to_bytes(8, "little", signed=True)
    data = "\x1e".join(texts).encode("utf-8", "surrogatepass") + b"\x1e"  # each text then a separator
    h = hashlib.blake2b(data, digest_size=8, key=key)
    return int.from_bytes(h.digest(), "little") / 2.0**64 < val_fraction


# -- inputs -----------------------------------------------------------------------------------
def _input_docs(inp: dict, fmt: str | None) -> Iterator[RawDoc]:
    if inp.get("kind") == "synthetic":
        from interpscale.orchestration.corpus import CorpusConfig, generate_documents

        concepts, docs = generate_documents(CorpusConfig(**_corpus_fields(inp)))
        for d, doc in enumerate(docs):
            yield RawDoc([(text, [concepts[c].label for c in labs]) for text, labs in doc], f"synthetic document {d}")
        return
    yield from iter_documents(inp["path"], fmt)


def _corpus_fields(inp: dict) -> dict:
    return {k: (tuple(v) if isinstance(v, list) else v) for k, v in inp.items() if k != "kind"}


def _stat(inp: dict) -> list[int] | None:
    if "path" not in inp:
        return None
    st = Path(inp["path"]).stat()
    return [st.st_size, st.st_mtime_ns]


def _file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


# -- step 2: tokenizer ------------------------------------------------------------------------
def _sample_texts(req: dict) -> Iterator[str]:
    """Training-side chunk texts, about ``sample_bytes`` in all, spread over the inputs."""
    inputs = req["inputs"]
    budget = max(1, int(req["sample_bytes"]) // len(inputs))
    for inp in inputs:
        used = 0
        for doc in _input_docs(inp, req["format"]):
            texts = [t for t, _ in doc.chunks]
            if is_validation(texts, req["val_fraction"], req["seed"]):
                continue
            for t in texts:
                yield t
                used += len(t.encode("utf-8", "surrogatepass"))
            if used >= budget:
                break


def build_tokenizer(out: str | os.PathLike) -> None:
    """Step 2 (idempotent): DIR/tokenizer.json."""
    out = Path(out)
    if (out / "tokenizer.json").exists():
        return
    req = read_request(out)
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


# -- step 3: one part per input ---------------------------------------------------------------
class _PartWriter:
    """Append-only files of one split of one part: tokens, [EOC] positions, label counts and ids."""

    def __init__(self, prefix: str, dtype):
        self.dtype = dtype
        self.files = {k: open(f"{prefix}.{k}", "wb") for k in ("tokens", "eoc", "count", "labels")}
        self.n = {"tokens": 0, "chunks": 0, "docs": 0, "labels": 0}
        self._clear()

    def _clear(self):
        self.flat, self.eoc, self.count, self.labels = [], [], [], []

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
        self._clear()

    def close(self):
        self.flush()
        for f in self.files.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()


def _part_prefix(out: Path, i: int) -> Path:
    return out / PARTS / f"{i:05d}"


def part_done(out: Path, i: int, req: dict | None = None) -> bool:
    """Part ``i`` is finished and still matches its input file and the tokenizer."""
    marker = _part_prefix(out, i).with_suffix(".json")
    if not marker.exists():
        return False
    req = req or read_request(out)
    m = json.loads(marker.read_text())
    return m.get("stat") == _stat(req["inputs"][i]) and m.get("tokenizer") == _file_sha(out / "tokenizer.json")


def tokenize_part(out: str | os.PathLike, i: int) -> dict:
    """Step 3 for input ``i`` (idempotent; a submitit array task)."""
    out = Path(out)
    req = read_request(out)
    if part_done(out, i, req):
        return json.loads(_part_prefix(out, i).with_suffix(".json").read_text())
    inp = req["inputs"][i]
    stat = _stat(inp)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    ids = special_ids(tok)
    eoc, eos = ids["eoc"], ids["eos"]
    dtype = np.dtype(req["token_dtype"])
    fixed = None
    if req["fixed_concepts"]:
        from interpscale.orchestration.corpus import read_concepts

        fixed = {c["label"]: k for k, c in enumerate(read_concepts(out / "concepts.json"))}
    local: dict[str, int] = {}
    prefix = _part_prefix(out, i)
    for p in prefix.parent.glob(f"{prefix.name}.*"):  # leftovers of a killed attempt
        p.unlink()
    writers = {s: _PartWriter(f"{prefix}.{s}", dtype) for s in SPLITS}

    seen: dict[tuple, list[int]] = {}  # label combinations recur: map each one once

    def label_ids(labs, doc: RawDoc, j: int) -> list[int]:
        key = tuple(labs)
        ids = seen.get(key)
        if ids is not None:
            return ids
        where = f"{doc.where}, chunk {j}" if len(doc.chunks) > 1 else doc.where
        if fixed is not None:
            unknown = [lab for lab in labs if lab not in fixed]
            if unknown:
                raise ValueError(f"{where}: unknown concept label(s) {unknown} (not in concepts.json)")
            ids = sorted({fixed[lab] for lab in labs})
        else:
            ids = sorted({local.setdefault(lab, len(local)) for lab in labs})
        if len(seen) < 1 << 20:
            seen[key] = ids
        return ids

    val_fraction, seed = req["val_fraction"], req["seed"]

    def parse(doc: RawDoc) -> tuple[str, list[list[int]]]:
        """Validate a document; its split and each chunk's concept ids (in the reading thread)."""
        labels = []
        for j, (text, labs) in enumerate(doc.chunks):
            if not text:
                raise ValueError(f"{doc.where}" + (f", chunk {j}" if len(doc.chunks) > 1 else "") + ": empty 'text'")
            labels.append(label_ids(labs, doc, j) if labs else [])
        held = is_validation([t for t, _ in doc.chunks], val_fraction, seed)
        return ("val" if held else "train"), labels

    def write(parsed: list[tuple[str, list[list[int]]]], enc: list[list[int]]):
        k = 0
        for split, labels in parsed:
            w = writers[split]
            for lab in labels:
                w.flat.extend(enc[k])
                w.flat.append(eoc)
                w.eoc.append(len(w.flat) - 1)
                w.count.append(len(lab))
                w.labels.extend(lab)
                k += 1
            w.flat.append(eos)
            w.n["docs"] += 1
        for w in writers.values():
            w.flush()

    # reading / parsing the next batch overlaps the encoding of the last one (the
    # tokenizers encoder releases the GIL)
    from concurrent.futures import ThreadPoolExecutor

    import gc

    pending = None
    gc_was = gc.isenabled()
    gc.disable()  # millions of acyclic token lists: the cyclic collector only costs time here
    try:
        with ThreadPoolExecutor(1) as pool:
            texts, parsed, size = [], [], 0
            for doc in _input_docs(inp, req["format"]):
                parsed.append(parse(doc))
                texts += [t for t, _ in doc.chunks]
                size += sum(len(t) for t, _ in doc.chunks)
                if size >= req["batch_bytes"]:
                    if pending is not None:
                        write(*pending[0], pending[1].result())
                    pending = ((parsed,), pool.submit(encode_texts, tok, texts))
                    texts, parsed, size = [], [], 0
            if pending is not None:
                write(*pending[0], pending[1].result())
            write(parsed, encode_texts(tok, texts))
    finally:
        if gc_was:
            gc.enable()
        for w in writers.values():
            w.close()
    marker = {"input": inp, "stat": stat, "tokenizer": _file_sha(out / "tokenizer.json"),
              "labels": None if fixed is not None else list(local), **{s: writers[s].n for s in SPLITS}}
    atomic_write_text(prefix.with_suffix(".json"), json.dumps(marker))
    log.info("part %d (%s): %d train / %d val tokens", i, inp.get("path", "synthetic"),
             writers["train"].n["tokens"], writers["val"].n["tokens"])
    return marker


# -- step 4: finalize -------------------------------------------------------------------------
def _read_blocks(path: Path, dtype) -> Iterator[np.ndarray]:
    with open(path, "rb") as f:
        while True:
            a = np.fromfile(f, dtype=dtype, count=_BLOCK)
            if not a.size:
                return
            yield a


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


def finalize(out: str | os.PathLike) -> dict:
    """Step 4: concatenate the parts into the shards and write meta.json (last)."""
    from interpscale.orchestration.corpus import read_concepts, write_concepts

    out = Path(out)
    req = read_request(out)
    markers = []
    for i in range(len(req["inputs"])):
        if not part_done(out, i, req):
            raise RuntimeError(f"{out}: input {i} ({req['inputs'][i].get('path')}) is not prepared yet")
        markers.append(json.loads(_part_prefix(out, i).with_suffix(".json").read_text()))
    if req["fixed_concepts"]:
        cards = read_concepts(out / "concepts.json")
        remaps = [None] * len(markers)
    else:
        names = sorted({lab for m in markers for lab in m["labels"]})
        cards = [{"label": n, "description": "", "words": []} for n in names]
        index = {n: k for k, n in enumerate(names)}
        remaps = [np.array([index[lab] for lab in m["labels"]], dtype=np.uint32) for m in markers]
        write_concepts(cards, out / "concepts.json")
    lab_dtype = np.uint16 if len(cards) <= 1 << 16 else np.uint32
    tok_dtype = np.dtype(req["token_dtype"])
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    splits = {}
    for s in SPLITS:
        tot = {k: sum(m[s][k] for m in markers) for k in ("tokens", "chunks", "docs", "labels")}
        if s == "train" and tot["tokens"] == 0:
            raise ValueError(f"{out}: every document fell into the validation split; lower val_fraction")
        if s == "val" and tot["tokens"] == 0 and req["val_fraction"] > 0:
            raise ValueError(f"{out}: no document fell into the validation split (val_fraction="
                             f"{req['val_fraction']} of {tot['docs'] + splits['train']['docs']} documents); "
                             f"raise val_fraction or add documents")
        with atomic_path(out / f"{s}.tokens.bin", suffix=".bin") as tmp:
            with open(tmp, "wb") as f:
                for i in range(len(markers)):
                    with open(f"{_part_prefix(out, i)}.{s}.tokens", "rb") as src:
                        shutil.copyfileobj(src, f, 1 << 24)
        with _npy_out(out / f"{s}.chunk_end.npy", np.int64, tot["chunks"]) as ends, \
                _npy_out(out / f"{s}.label_offsets.npy", np.int64, tot["chunks"] + 1) as offs, \
                _npy_out(out / f"{s}.label_ids.npy", lab_dtype, tot["labels"]) as labs:
            t0 = c0 = l0 = 0
            if offs is not None:
                offs[0] = 0
            for i, m in enumerate(markers):
                pre = f"{_part_prefix(out, i)}.{s}"
                c = c0
                for a in _read_blocks(Path(f"{pre}.eoc"), np.int64):
                    ends[c: c + a.size] = a + t0
                    c += a.size
                c = c0
                run = l0
                for a in _read_blocks(Path(f"{pre}.count"), np.uint32):
                    cum = np.cumsum(a, dtype=np.int64) + run
                    offs[c + 1: c + 1 + a.size] = cum
                    run = int(cum[-1])
                    c += a.size
                li = l0
                for a in _read_blocks(Path(f"{pre}.labels"), np.uint32):
                    labs[li: li + a.size] = a if remaps[i] is None else remaps[i][a]
                    li += a.size
                t0 += m[s]["tokens"]
                c0 += m[s]["chunks"]
                l0 += m[s]["labels"]
        splits[s] = tot
    meta = {"format": FORMAT, "token_dtype": tok_dtype.name, "label_dtype": np.dtype(lab_dtype).name,
            "vocab_size": tok.get_vocab_size(), "special_ids": special_ids(tok), "n_concepts": len(cards),
            "splits": splits, "inputs": [{**m["input"], "stat": m["stat"]} for m in markers],
            **{k: req[k] for k in ("val_fraction", "seed", "tokenizer", "vocab_size_requested", "sample_bytes")},
            **req.get("extra", {}), "request": _comparable(req)}
    atomic_write_text(out / "meta.json", json.dumps(meta, indent=1, default=str))
    shutil.rmtree(out / PARTS, ignore_errors=True)
    log.info("prepared %s: %d train / %d val tokens, %d concepts", out, splits["train"]["tokens"],
             splits["val"]["tokens"], len(cards))
    return meta


# -- the request and the driver ---------------------------------------------------------------
def read_request(out: Path) -> dict:
    return json.loads((Path(out) / PARTS / "request.json").read_text())


def _input_file(path: str | os.PathLike, base_dir: str | os.PathLike | None, what: str) -> Path:
    """``path`` (relative ones against ``base_dir``), which must be an existing file."""
    p = Path(path)
    if base_dir is not None and not p.is_absolute():
        p = Path(base_dir) / p
    if not p.is_file():
        raise ValueError(f"{what} file not found: {path}")
    return p


def make_request(sources, *, fmt: str | None = None, tokenizer: str | os.PathLike | None = None,
                 vocab_size: int = 512, sample_bytes: int = 100_000_000, val_fraction: float = 0.05,
                 seed: int = 0, concepts: str | os.PathLike | None = None, batch_bytes: int = 1 << 18,
                 base_dir: str | os.PathLike | None = None, extra: dict | None = None) -> dict:
    """What ``prepare`` builds, as a JSON-able dict.  ``sources``: paths / globs, or
    ``{"kind": "synthetic", ...}`` dicts (the bundled corpus)."""
    if isinstance(sources, (str, os.PathLike, dict)):
        sources = [sources]
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    inputs: list[dict] = []
    for s in sources:
        if isinstance(s, dict):
            if s.get("kind") != "synthetic":
                raise ValueError(f"a source dict must be the synthetic corpus, got {s!r}")
            inputs.append(dict(s))
        else:
            for p in expand_sources([s], base_dir):
                format_of(p, fmt)  # an unknown extension fails before any work
                inputs.append({"path": str(p.resolve())})
    if not inputs:
        raise ValueError("no input files")
    tok_path = str(_input_file(tokenizer, base_dir, "tokenizer").resolve()) if tokenizer else None
    conc = _input_file(concepts, base_dir, "concepts") if concepts else None
    synthetic = [s for s in inputs if s.get("kind") == "synthetic"]
    if synthetic and (len(inputs) > 1 or conc):
        raise ValueError("the synthetic corpus cannot be mixed with other inputs or a concepts file")
    if not tok_path and not sample_bytes > 0:
        raise ValueError(f"tokenizer sample must be > 0 bytes, got {sample_bytes}")
    return _json_roundtrip({"format_version": FORMAT, "inputs": inputs, "format": fmt, "tokenizer": tok_path,
            "vocab_size": None if tok_path else int(vocab_size),
            "vocab_size_requested": None if tok_path else int(vocab_size),
            "sample_bytes": None if tok_path else int(sample_bytes), "val_fraction": float(val_fraction),
            "seed": int(seed),
            "concepts": str(conc.resolve()) if conc else None,
            "concepts_sha": _file_sha(conc) if conc else None, "fixed_concepts": bool(conc or synthetic),
            "batch_bytes": int(batch_bytes), "token_dtype": None, "extra": extra or {}})


def _json_roundtrip(obj):
    return json.loads(json.dumps(obj, default=str))


def _stale(out: Path, req: dict) -> bool:
    meta = json.loads((out / "meta.json").read_text())
    return [i.get("stat") for i in meta.get("inputs", [])] != [_stat(i) for i in req["inputs"]]


def _start(out: Path, req: dict) -> bool:
    """Record the request (or check it matches a resumed one); True when already finished."""
    old_path = out / PARTS / "request.json"
    if (out / "meta.json").exists():
        meta = json.loads((out / "meta.json").read_text())
        if meta.get("request") == _comparable(req) and not _stale(out, req):
            return True
        if meta.get("request") != _comparable(req):
            raise ValueError(f"{out} already holds other prepared data; choose another --out or delete it")
        log.warning("%s: an input changed since it was prepared; preparing it again", out)
        (out / "meta.json").unlink()  # first: a kill during the cleanup leaves no half directory
        for p in out.iterdir():
            if p.name != ".lock":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    if old_path.exists():
        if _comparable(json.loads(old_path.read_text())) != _comparable(req):
            raise ValueError(f"{out} holds an unfinished preparation of other data; choose another --out "
                             f"or delete it")
        return False
    if out.exists() and any(p.name not in (PARTS, ".lock", ".submitit") for p in out.iterdir()):
        raise ValueError(f"{out} is not empty and holds no preparation; choose another --out")
    (out / PARTS).mkdir(parents=True, exist_ok=True)
    atomic_write_text(old_path, json.dumps(req, indent=1))
    return False


def _comparable(req: dict) -> dict:
    return {k: v for k, v in req.items() if k not in ("token_dtype", "batch_bytes")}


@contextlib.contextmanager
def _locked(out: Path):
    import fcntl

    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # a second preparer of the same DIR waits, then finds it done
        yield


def prepare(sources, out: str | os.PathLike, *, executor: str = "inline", slurm: dict | None = None,
            max_parallel: int = 2, workers: int = 1, progress: bool = False, **options: Any) -> Path:
    """Prepare ``sources`` into the data directory ``out`` and return it (see ``make_request``
    for ``options``).  Rerunning after a crash or a kill resumes: finished parts are kept.

    ``executor="inline"`` works in this process, with ``workers`` processes tokenizing
    input files side by side (each with a single-threaded encoder); ``local`` / ``slurm``
    run one submitit task per input file, at most ``max_parallel`` at once."""
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; expected one of {EXECUTORS}")
    out = Path(out)
    req = make_request(sources, **options)
    with _locked(out):
        if _start(out, req):
            return out
        req = read_request(out)
        if req["fixed_concepts"] and not (out / "concepts.json").exists():
            _write_fixed_concepts(out, req)
        n = len(req["inputs"])
        if executor == "inline":
            build_tokenizer(out)
            _set_dtype(out)
            _inline_parts(out, n, workers, progress)
            finalize(out)
        else:
            _run_submitit(out, n, executor, slurm or {}, max_parallel)
    return out


def _single_threaded_encoder() -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the workers are the parallelism


def _inline_parts(out: Path, n: int, workers: int, progress: bool) -> None:
    from tqdm.auto import tqdm

    bar = tqdm(total=n, desc="prepare", disable=not progress or n < 2)
    if workers <= 1 or n < 2:
        for i in range(n):
            tokenize_part(out, i)
            bar.update(1)
        bar.close()
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    errors: dict[int, BaseException] = {}
    ctx = multiprocessing.get_context("fork")  # workers start in milliseconds, nothing re-imported
    with ProcessPoolExecutor(min(workers, n), mp_context=ctx, initializer=_single_threaded_encoder) as pool:
        futures = {pool.submit(tokenize_part, str(out), i): i for i in range(n)}
        for f in as_completed(futures):
            if f.exception() is not None:  # the other files go on; their parts are kept
                errors[futures[f]] = f.exception()
            bar.update(1)
    bar.close()
    if errors:
        raise errors[min(errors)]


def _write_fixed_concepts(out: Path, req: dict) -> None:
    from interpscale.orchestration.corpus import make_concepts, read_concepts, write_concepts

    if req["concepts"]:
        cards = read_concepts(req["concepts"])
        labels = [c["label"] for c in cards]
        if len(set(labels)) != len(labels):
            raise ValueError(f"{req['concepts']}: duplicate concept labels")
    else:
        f = _corpus_fields(req["inputs"][0])
        cards = [c.card() for c in make_concepts(f.get("n_concepts", 16),
                                                 entities_per_concept=f.get("entities_per_concept", 24),
                                                 seed=f.get("seed", 0))]
    write_concepts(cards, out / "concepts.json")


def _set_dtype(out: Path) -> None:
    """Fix the token dtype from the tokenizer (uint16 when every id fits)."""
    req = read_request(out)
    if req["token_dtype"]:
        return
    from tokenizers import Tokenizer

    v = Tokenizer.from_file(str(out / "tokenizer.json")).get_vocab_size()
    req["token_dtype"] = "uint16" if v <= 1 << 16 else "uint32"
    atomic_write_text(out / PARTS / "request.json", json.dumps(req, indent=1))


def _prepare_head(out: str) -> None:
    build_tokenizer(out)
    _set_dtype(Path(out))


def _run_submitit(out: Path, n: int, executor: str, slurm: dict, max_parallel: int) -> None:
    """Step 3 as submitit jobs, one task per input file.  On SLURM steps 2 and 4 (the
    tokenizer, the finalization) are jobs too, so nothing heavy runs on the login node;
    ``local`` runs them in this process."""
    import submitit

    folder = out / ".submitit" / "%j"
    if executor == "local":
        ex = submitit.LocalExecutor(folder=folder)
        ex.update_parameters(timeout_min=int(slurm.get("timeout_min", 24 * 60)))
    else:
        ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
        params = {k: v for k, v in slurm.items() if k != "max_array_size"}
        ex.update_parameters(**{"timeout_min": 60, "slurm_array_parallelism": max_parallel, **params})

    def wait(jobs, what):
        errors = []
        for j in jobs:
            try:
                j.result()
            except Exception as exc:  # keep the finished parts; report every failure
                errors.append(_job_error(exc))
        if errors:
            raise ValueError(f"{what} failed (finished parts are kept; rerun to resume):\n" + "\n".join(errors))

    if executor == "local":
        _prepare_head(str(out))
    else:
        wait([ex.submit(_prepare_head, str(out))], "tokenizer job")
    req = read_request(out)
    todo = [i for i in range(n) if not part_done(out, i, req)]
    if todo:
        if executor == "local":  # LocalExecutor starts everything at once: bound it
            jobs, pending, running = [], list(todo), []
            while pending or running:
                while pending and len(running) < max_parallel:
                    running.append(ex.submit(tokenize_part, str(out), pending.pop(0)))
                time.sleep(0.2)
                jobs += [j for j in running if j.done()]
                running = [j for j in running if not j.done()]
        else:  # one array per MaxArraySize indices
            step = int(slurm.get("max_array_size") or 1000)
            jobs = []
            for k in range(0, len(todo), step):
                chunk = todo[k: k + step]
                jobs += ex.map_array(tokenize_part, [str(out)] * len(chunk), chunk)
        wait(jobs, f"{len(todo)} tokenization task(s)")
    if executor == "local":
        finalize(out)
    else:
        wait([ex.submit(finalize, str(out))], "finalization job")
    shutil.rmtree(out / ".submitit", ignore_errors=True)


def _job_error(exc: Exception) -> str:
    """The last line of a failed job's traceback (the error message itself)."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error:" in ln:
            return ln.split("Error:", 1)[1].strip()
    return lines[-1] if lines else repr(exc)
