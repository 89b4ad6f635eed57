"""Step 4 of preparation: the parts become one shard per split (the files of ``docs/data.md``,
"The prepared directory"), then ``meta.json``; memory stays bounded by a block.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Iterator

import numpy as np

from interpscale._atomic import atomic_path, atomic_write_text
from interpscale.data.corpus import read_concepts, write_concepts
from interpscale.data.parts import part_done, part_prefix
from interpscale.data.request import FORMAT, PARTS, SPLITS, comparable, file_sha, read_request
from interpscale.data.tokenizer import load_tokenizer, special_ids
from interpscale.errors import UserError

log = logging.getLogger(__name__)

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


def _markers(out: Path, req: dict) -> list[dict]:
    markers = []
    for i in range(len(req["inputs"])):
        if not part_done(out, i, req):
            raise RuntimeError(f"{out}: input {i} ({req['inputs'][i].get('path')}) is not prepared yet")
        markers.append(json.loads(part_prefix(out, i).with_suffix(".json").read_text()))
    return markers


def _cards(out: Path, req: dict, markers: list[dict]) -> tuple[list[dict], list[np.ndarray | None]]:
    """The concept cards and, per part, the map of its local label ids onto them."""
    if req["fixed_concepts"]:
        return read_concepts(out / "concepts.json"), [None] * len(markers)
    names = sorted({lab for m in markers for lab in m["labels"]})
    cards = [{"label": n, "description": "", "words": []} for n in names]
    index = {n: k for k, n in enumerate(names)}
    write_concepts(cards, out / "concepts.json")
    return cards, [np.array([index[lab] for lab in m["labels"]], dtype=np.uint32) for m in markers]


def _check_totals(out: Path, req: dict, s: str, tot: dict, n_train_docs: int) -> None:
    if s == "train" and tot["tokens"] == 0:
        raise UserError(f"{out}: every document fell into the validation split; lower val_fraction")
    if s == "val" and tot["tokens"] == 0 and req["val_fraction"] > 0:
        raise UserError(f"{out}: no document fell into the validation split (val_fraction="
                        f"{req['val_fraction']} of {tot['docs'] + n_train_docs} documents); "
                        f"raise val_fraction or add documents")


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
    markers = _markers(out, req)
    cards, remaps = _cards(out, req, markers)
    lab_dtype = np.uint16 if len(cards) <= 1 << 16 else np.uint32
    tok = load_tokenizer(out / "tokenizer.json", add_specials=False)
    splits: dict[str, dict] = {}
    for s in SPLITS:
        tot = {k: sum(m[s][k] for m in markers) for k in ("tokens", "chunks", "docs", "labels")}
        _check_totals(out, req, s, tot, splits.get("train", {}).get("docs", 0))
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
