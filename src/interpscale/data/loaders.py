"""A sweep's ``[data]`` source (``DATA_KINDS``, ``docs/data.md``) -> a prepared data directory,
and prepared data opened for training (``open_data``) or described (``describe``).  An opened
split (``Split``) is read through memory maps a batch's rows and chunks at a time (rows, chunks and
the binary search in ``chunk_end``: ``docs/data.md``); its batches are a pure function of (seed,
step) (``RowSplit``): a resumed run's data position is its step, so resume is bit-exact.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from interpscale.data.corpus import corpus_config, read_concepts
from interpscale.data.prepare import FORMAT, comparable, corpus_sha, file_sha, make_request, prepare
from interpscale.data.tokenizer import load_tokenizer
from interpscale.errors import UserError
from interpscale.models.types import Batch

log = logging.getLogger(__name__)

DATA_KINDS = ("synthetic", "jsonl", "parquet", "text", "prepared")
# the keys of a file source (kinds jsonl, parquet, text, prepared) -> (types, description), which
# the preset validator checks; "path" may be a list (of files or globs) for every kind but prepared
FILE_SOURCE_KEYS = {
    "kind": ((str,), "a data kind"), "path": ((str, list), "a file path, glob or list of them"),
    "concepts": ((str,), "a concepts.json path"), "tokenizer": ((str,), "a tokenizer.json path"),
    "tokenizer_sample_bytes": ((int,), "an integer"), "document_per_file": ((bool,), "true or false"),
}


def resolve_data_paths(source: dict, base_dir: str | os.PathLike | None) -> dict:
    """A data source with its relative paths (``path`` — a path, glob or list of them —
    ``concepts``, ``tokenizer``) made absolute against ``base_dir`` (a TOML's directory)."""
    out = dict(source)
    for k in ("path", "concepts", "tokenizer") if base_dir is not None else ():
        v = out.get(k)
        if isinstance(v, (list, tuple)):
            out[k] = [str(Path(base_dir) / x) if not Path(x).is_absolute() else str(x) for x in v]
        elif isinstance(v, str) and not Path(os.path.expanduser(v)).is_absolute():
            out[k] = str(Path(base_dir) / v)
    return out


def _prepare_options(source: dict, vocab_size: int, val_fraction: float, seed: int) -> tuple[str | list, dict]:
    kind = source.get("kind", "synthetic")
    if kind not in DATA_KINDS:
        raise UserError(f"unknown data kind {kind!r}; expected one of {DATA_KINDS}")
    common = {"vocab_size": vocab_size, "val_fraction": val_fraction, "seed": seed}
    if kind == "synthetic":
        corpus_config(source)  # a bad option fails here, before any work
        return [dict(source, kind="synthetic")], common
    unknown = set(source) - set(FILE_SOURCE_KEYS)
    if unknown:
        raise UserError(f"unknown data option(s) {sorted(unknown)} for kind {kind!r}; "
                        f"allowed: {sorted(FILE_SOURCE_KEYS)}")
    if not source.get("path"):
        raise UserError(f"data kind {kind!r} needs a 'path'")
    opts = {"fmt": kind, "tokenizer": source.get("tokenizer"), "concepts": source.get("concepts"), **common}
    if source.get("tokenizer_sample_bytes"):
        opts["sample_bytes"] = int(source["tokenizer_sample_bytes"])
    if source.get("document_per_file"):
        opts["document_per_file"] = True
    return source["path"], opts  # a path, glob or list of them


def prepare_data(source: dict, cache_dir: str | os.PathLike, *, seq_len: int, vocab_size: int = 512,
                 val_fraction: float = 0.05, seed: int = 0) -> Path:
    """Prepare (once) and return the data directory of a data source: memory-mapped shards,
    tokenizer.json, concepts.json and meta.json under ``cache_dir/<content key>``.
    ``{"kind": "prepared", "path": DIR}`` is a directory ``interpscale data prepare`` made.
    Resumable and safe when several jobs race (a lock per directory).  ``source["split_seed"]``
    (set by the adaptive sweep's replicate runs) keys the validation split instead of ``seed``:
    a replicate trains with another seed on the same prepared data."""
    if "split_seed" in source:
        seed = int(source["split_seed"])
        source = {k: v for k, v in source.items() if k != "split_seed"}
    if source.get("kind") == "prepared":
        read_meta(source.get("path") or "")
        return Path(source.get("path") or "")
    sources, opts = _prepare_options(source, vocab_size, val_fraction, seed)
    key = json.dumps({**comparable(make_request(sources, **opts)), "seq_len": seq_len}, sort_keys=True,
                     default=str)  # the content key of the shared cache
    out = Path(cache_dir) / hashlib.sha256(key.encode()).hexdigest()[:16]
    prepare(sources, out, extra={"seq_len": seq_len, "source": source}, **opts)
    log.info("data %s ready", out)
    return out


def read_meta(path: str | os.PathLike) -> dict:
    """meta.json of prepared data of this format; anything else is refused, and a directory
    packed in memory before the shards (``train.npz``) with the command that remakes it."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"prepared data directory {path} does not exist (a [data] path relative to a preset "
                        f"resolves against the preset's directory); prepare it with `interpscale data prepare "
                        f"SOURCE --out {path}` or fix the path")
    if not path.is_dir():
        raise UserError(f"{path}: a file, not a prepared data directory (made by `interpscale data prepare`)")
    meta = json.loads((path / "meta.json").read_text()) if (path / "meta.json").is_file() else {}
    if meta.get("format") == FORMAT:
        return meta
    if (path / "train.npz").exists():
        raise UserError(f"{path}: data prepared by an older interpscale (train.npz), which is no "
                        f"longer read; rerun `interpscale data prepare` on its sources (a sweep "
                        f"prepares its data again in a new run directory)")
    raise UserError(f"{path}: not prepared data of this version (no meta.json of format {FORMAT!r}); "
                    f"rerun `interpscale data prepare`")


class RowSplit:
    """Rows served as batches; subclasses give ``n_rows`` and ``rows_to_batch``."""

    n_rows: int

    def rows_to_batch(self, rows: np.ndarray, concepts: bool = True) -> Batch:  # pragma: no cover
        raise NotImplementedError

    def step_rows(self, step: int, batch_size: int, *, seed: int, rank: int = 0, world: int = 1) -> np.ndarray:
        """Row indices of ``rank``'s share of training ``step``: a seeded per-epoch permutation."""
        idx = np.arange(step * batch_size, (step + 1) * batch_size)[rank::world]
        epochs, pos = np.divmod(idx, self.n_rows)
        return np.array([_perm(seed, int(e), self.n_rows)[p] for e, p in zip(epochs, pos)], dtype=np.int64)

    def batch(self, step: int, batch_size: int, *, seed: int, rank: int = 0, world: int = 1,
              concepts: bool = True) -> Batch:
        return self.rows_to_batch(self.step_rows(step, batch_size, seed=seed, rank=rank, world=world), concepts)

    def eval_batches(self, batch_size: int, max_batches: int | None = None, concepts: bool = True) -> list[Batch]:
        """Deterministic, in-order validation batches (a re-iterable list)."""
        starts = range(0, self.n_rows, batch_size)[:max_batches]
        return [self.rows_to_batch(np.arange(s, min(s + batch_size, self.n_rows)), concepts) for s in starts]


def local_chunks(gid: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per-row local chunk ids (-1 stays -1) and each row's global chunk ids in local order.

    One ``np.unique`` over (row, chunk) codes instead of one per row: the per-row calls were
    ~85% of a +Concept batch's build (issue 45); the same ids."""
    gid = np.asarray(gid, dtype=np.int64)
    local = np.full(gid.shape, -1, dtype=np.int64)
    inside = gid >= 0
    span = int(gid.max(initial=0)) + 1  # code = row * span + chunk sorts by row, then chunk
    row = np.nonzero(inside)[0]
    codes, inv = np.unique(row * span + gid[inside], return_inverse=True)
    first = np.searchsorted(codes // span, np.arange(gid.shape[0] + 1))  # each row's first code
    local[inside] = inv.reshape(-1) - first[row]
    return local, [codes[i:j] % span for i, j in zip(first[:-1], first[1:])]


@functools.lru_cache(maxsize=8)
def _perm(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch, 7]).permutation(n)


class Split(RowSplit):
    """One split of prepared data read through memory maps, cut into rows of ``seq_len``."""

    def __init__(self, path: str | os.PathLike, name: str, meta: dict, seq_len: int | None):
        path = Path(path)
        self.name, self.seq_len = name, seq_len
        info = meta["splits"][name]
        self.n_tokens, self.n_chunks = int(info["tokens"]), int(info["chunks"])
        self.n_concepts = int(meta["n_concepts"])
        ids = meta["special_ids"]
        self.pad_id, self.eos_id, self.eoc_id = ids["pad"], ids["eos"], ids["eoc"]
        dtype = np.dtype(meta["token_dtype"])
        # np.memmap cannot map an empty file; an empty split is an empty array
        self.tokens = (np.memmap(path / f"{name}.tokens.bin", dtype=dtype, mode="r", shape=(self.n_tokens,))
                       if self.n_tokens else np.zeros(0, dtype=dtype))
        self.chunk_end, self.label_offsets, self.label_ids = (
            np.load(path / f"{name}.{f}.npy", mmap_mode="r", allow_pickle=False)
            for f in ("chunk_end", "label_offsets", "label_ids"))

    @property
    def n_rows(self) -> int:
        if not self.seq_len:
            raise ValueError("this data was opened without a sequence length: open_data(DIR, seq_len=T)")
        return max(1, -(-self.n_tokens // self.seq_len))

    def row_tokens(self, rows: np.ndarray) -> np.ndarray:
        """[len(rows), T] int64 tokens of ``rows`` (positions past the end are [PAD])."""
        T = self.seq_len
        pos = np.asarray(rows, dtype=np.int64)[:, None] * T + np.arange(T)
        inside = pos < self.n_tokens
        out = np.full(pos.shape, self.pad_id, dtype=np.int64)
        if self.n_tokens:
            out[inside] = self.tokens[pos[inside]]
        return out

    def chunk_ids(self, rows: np.ndarray, tok: np.ndarray) -> np.ndarray:
        """Global chunk id of every token of ``rows`` (-1 on [EOS] / [PAD])."""
        first = np.searchsorted(self.chunk_end, np.asarray(rows, dtype=np.int64) * self.seq_len, side="left")
        is_eoc = tok == self.eoc_id
        gid = first[:, None] + np.cumsum(is_eoc, axis=1) - is_eoc
        gid[(tok == self.eos_id) | (tok == self.pad_id)] = -1
        return gid

    def chunk_labels(self, chunks: np.ndarray) -> list[np.ndarray]:
        """Concept ids of each global chunk in ``chunks`` (reads only those labels)."""
        chunks = np.asarray(chunks, dtype=np.int64)
        flat, counts = self._labels_flat(chunks)
        return np.split(flat, np.cumsum(counts)[:-1])

    def _labels_flat(self, chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(concept ids of ``chunks`` concatenated, how many each chunk has): one gather, no
        per-chunk ``arange``."""
        lo, hi = self.label_offsets[chunks], self.label_offsets[chunks + 1]
        counts = np.asarray(hi - lo, dtype=np.int64)
        pos = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(lo - (np.cumsum(counts) - counts), counts)
        return np.asarray(self.label_ids[pos], dtype=np.int64), counts

    def rows_to_batch(self, rows: np.ndarray, concepts: bool = True) -> Batch:
        """Rows -> Batch: tokens, plus local chunk ids and multi-hot labels [B, C, n] if concepts."""
        rows = np.asarray(rows, dtype=np.int64)
        tok = torch.from_numpy(tok_np := self.row_tokens(rows))
        valid = tok != self.pad_id
        if self.n_concepts == 0 or not concepts:
            return Batch(tokens=tok, valid=valid)
        local, per_row = local_chunks(self.chunk_ids(rows, tok_np))
        c_max = max(1, max(len(p) for p in per_row))
        lab = np.zeros((len(rows), c_max, self.n_concepts), dtype=np.float32)
        counts = np.array([len(p) for p in per_row], dtype=np.int64)
        if counts.sum():
            flat, n_labels = self._labels_flat(np.concatenate(per_row))  # concept ids of every (row, chunk)
            r = np.repeat(np.arange(len(rows)), counts)  # each chunk's row and local slot
            j = np.arange(len(r)) - np.repeat(np.cumsum(counts) - counts, counts)
            lab[np.repeat(r, n_labels), np.repeat(j, n_labels), flat] = 1.0
        return Batch(tok, torch.from_numpy(local), torch.from_numpy(lab), valid)


class PreparedData:
    """A prepared data directory opened: memory-mapped ``train`` / ``val`` in rows of ``seq_len``."""

    def __init__(self, path: str | os.PathLike, seq_len: int | None = None):
        self.path = Path(path)
        self.meta = read_meta(self.path)
        self.concepts = read_concepts(self.path / "concepts.json")
        self.tokenizer = load_tokenizer(self.path / "tokenizer.json")
        self.vocab_size, self.n_concepts = self.tokenizer.get_vocab_size(), len(self.concepts)
        self.special_ids: dict[str, int] = dict(self.meta["special_ids"])
        self.seq_len = seq_len or self.meta.get("seq_len")
        self.train = Split(self.path, "train", self.meta, self.seq_len)
        self.val = Split(self.path, "val", self.meta, self.seq_len)


def _data_dir(path: str | os.PathLike) -> tuple[Path, int | None]:
    """A data directory, or the one a run directory links to (its data.json) and its seq_len."""
    path = Path(path)
    link = path / "data.json"
    if link.exists() and not (path / "meta.json").exists():
        d = json.loads(link.read_text())
        return Path(d["path"]), d.get("seq_len")
    return path, None


def open_data(path: str | os.PathLike, seq_len: int | None = None) -> PreparedData:
    """Open prepared data: a data directory, or a run directory (follows its data.json)."""
    data_dir, run_seq_len = _data_dir(path)
    return PreparedData(data_dir, seq_len or run_seq_len)


@dataclass(frozen=True)
class DataSummary:
    """What a sweep needs to know of prepared data without opening it (see ``describe``)."""

    path: str
    vocab_size: int
    n_concepts: int
    tokenizer_sha: str  # SHA-256 of tokenizer.json, 16 hex digits
    corpus_sha: str  # SHA-256 of the shards and concepts.json, 16 hex digits
    special_ids: dict

    def to_dict(self) -> dict:
        return asdict(self)


def describe(path: str | os.PathLike) -> DataSummary:
    """Vocabulary, concept count and fingerprints of prepared data, read without loading anything."""
    data_dir, _ = _data_dir(path)
    meta = read_meta(data_dir)
    return DataSummary(path=str(data_dir), vocab_size=int(meta["vocab_size"]), n_concepts=int(meta["n_concepts"]),
                       tokenizer_sha=file_sha(data_dir / "tokenizer.json"),
                       corpus_sha=meta.get("corpus_sha") or corpus_sha(data_dir),
                       special_ids=dict(meta["special_ids"]))
