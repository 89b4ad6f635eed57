"""Steps 2 and 3 of preparation: the tokenizer, then one append-only token part per input file
``DIR/.parts/NNNNN.*``, done when its marker ``NNNNN.json`` (written last) still matches the
input file (size, mtime) and the tokenizer.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import numpy as np

from interpscale._atomic import atomic_path, atomic_write_text
from interpscale.data.corpus import read_concepts
from interpscale.data.request import PARTS, SPLITS, file_sha, input_docs, read_request, stat_of
from interpscale.data.sources import RawDoc
from interpscale.data.split import is_validation
from interpscale.data.tokenizer import encode_texts, load_tokenizer, special_ids, train_tokenizer
from interpscale.errors import UserError

log = logging.getLogger(__name__)


# -- step 2: tokenizer ------------------------------------------------------------------------
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


# -- step 3: one part per input ---------------------------------------------------------------
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


def part_done(out: Path, i: int, req: dict | None = None) -> bool:
    """Part ``i`` is finished and still matches its input file and the tokenizer."""
    marker = part_prefix(out, i).with_suffix(".json")
    if not marker.exists():
        return False
    req = req or read_request(out)
    m = json.loads(marker.read_text())
    return m.get("stat") == stat_of(req["inputs"][i]) and m.get("tokenizer") == file_sha(Path(out) / "tokenizer.json")


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
    prefix = part_prefix(out, i)
    if part_done(out, i, req):
        return json.loads(prefix.with_suffix(".json").read_text())
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
