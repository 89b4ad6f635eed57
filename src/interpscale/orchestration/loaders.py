"""Data sources (a TOML ``[data]`` section / ``RunSpec.data``) -> a prepared data directory.

Sources:
- ``{"kind": "synthetic", **CorpusConfig fields}``: the bundled concept corpus;
- ``{"kind": "jsonl" | "parquet" | "text", "path": file, glob or list}``: user files, read
  as ``orchestration.sources`` describes (JSONL chunks with concept labels, Parquet rows,
  plain text); optional ``"concepts"`` (a concepts.json fixing the concept order and
  cards), ``"tokenizer"`` (a Hugging Face tokenizer.json to use instead of training a BPE)
  and ``"tokenizer_sample_bytes"``;
- ``{"kind": "prepared", "path": DIR}``: a directory made by ``interpscale data prepare``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from interpscale.orchestration.corpus import CorpusConfig, Document, generate_documents, read_concepts
from interpscale.orchestration.data import Packed, data_key, load_tokenizer
from interpscale.orchestration.prepare import FORMAT, _comparable, make_request, prepare
from interpscale.orchestration.shards import Split, is_prepared
from interpscale.orchestration.sources import iter_documents
from interpscale.orchestration.tokenizer import load_tokenizer as load_any_tokenizer

DEFAULT_SPECIAL_IDS = {"pad": 0, "eos": 1, "eoc": 2, "mask": 3}  # models.types' constants

log = logging.getLogger(__name__)


def read_jsonl_documents(path: str | os.PathLike) -> list[list[tuple[str, list[str]]]]:
    """All documents of a JSONL file in memory (small files; ``prepare`` streams)."""
    return [doc.chunks for doc in iter_documents(path, "jsonl")]


def read_parquet_documents(path: str | os.PathLike) -> list[list[tuple[str, list[str]]]]:
    """All documents of a Parquet file in memory (small files; ``prepare`` streams)."""
    return [doc.chunks for doc in iter_documents(path, "parquet")]


def _index_labels(raw_docs, cards: list[dict] | None) -> tuple[list[dict], list[Document]]:
    if cards is None:
        names = sorted({lab for doc in raw_docs for _, labs in doc for lab in labs})
        cards = [{"label": n, "description": "", "words": []} for n in names]
    index = {c["label"]: i for i, c in enumerate(cards)}
    docs: list[Document] = []
    for d, doc in enumerate(raw_docs):
        out = []
        for j, (text, labs) in enumerate(doc):
            unknown = [lab for lab in labs if lab not in index]
            if unknown:
                raise ValueError(f"document {d}, chunk {j}: unknown concept label(s) {unknown}")
            out.append((text, tuple(sorted(index[lab] for lab in labs))))
        docs.append(out)
    return cards, docs


def load_source(source: dict) -> tuple[list[dict], list[Document]]:
    """Concept cards and documents (concept indices) of a data source."""
    kind = source.get("kind", "synthetic")
    if kind == "synthetic":
        fields = {k: (tuple(v) if isinstance(v, list) else v) for k, v in source.items() if k != "kind"}
        try:
            cfg = CorpusConfig(**fields)
        except TypeError as exc:
            raise ValueError(f"bad synthetic corpus option: {exc}") from exc
        concepts, docs = generate_documents(cfg)
        return [c.card() for c in concepts], docs
    if kind not in ("jsonl", "parquet", "text"):
        raise ValueError(f"unknown data kind {kind!r}; expected synthetic, jsonl, parquet, text or prepared")
    path = source.get("path")
    if not path or not Path(path).exists():
        raise ValueError(f"{kind} data file not found: {path!r}")
    raw = [doc.chunks for doc in iter_documents(path, kind)]
    cards = read_concepts(source["concepts"]) if source.get("concepts") else None
    return _index_labels(raw, cards)


DATA_KINDS = ("synthetic", "jsonl", "parquet", "text", "prepared")
_PATH_KEYS = ("path", "concepts", "tokenizer")


def resolve_data_paths(source: dict, base_dir: str | os.PathLike | None) -> dict:
    """A data source with its relative paths (``path`` — a path, glob or list of them —
    ``concepts``, ``tokenizer``) made absolute against ``base_dir`` (a TOML's directory)."""
    if base_dir is None:
        return dict(source)
    out = dict(source)
    for k in _PATH_KEYS:
        v = out.get(k)
        if isinstance(v, (list, tuple)):
            out[k] = [str(Path(base_dir) / x) if not Path(x).is_absolute() else str(x) for x in v]
        elif isinstance(v, str) and not Path(os.path.expanduser(v)).is_absolute():
            out[k] = str(Path(base_dir) / v)
    return out


def _prepare_options(source: dict, vocab_size: int, val_fraction: float, seed: int) -> tuple[list, dict]:
    kind = source.get("kind", "synthetic")
    if kind not in DATA_KINDS:
        raise ValueError(f"unknown data kind {kind!r}; expected one of {DATA_KINDS}")
    known = {"kind", "path", "concepts", "tokenizer", "tokenizer_sample_bytes"}
    if kind == "synthetic":
        fields = {k: (tuple(v) if isinstance(v, list) else v) for k, v in source.items() if k != "kind"}
        try:
            CorpusConfig(**fields)
        except TypeError as exc:
            raise ValueError(f"bad synthetic corpus option: {exc}") from exc
        return [dict(source, kind="synthetic")], {"vocab_size": vocab_size, "val_fraction": val_fraction,
                                                  "seed": seed}
    unknown = set(source) - known
    if unknown:
        raise ValueError(f"unknown data option(s) {sorted(unknown)} for kind {kind!r}; allowed: {sorted(known)}")
    if not source.get("path"):
        raise ValueError(f"data kind {kind!r} needs a 'path'")
    opts = {"fmt": kind, "tokenizer": source.get("tokenizer"), "concepts": source.get("concepts"),
            "vocab_size": vocab_size, "val_fraction": val_fraction, "seed": seed}
    if source.get("tokenizer_sample_bytes"):
        opts["sample_bytes"] = int(source["tokenizer_sample_bytes"])
    paths = source["path"] if isinstance(source["path"], (list, tuple)) else [source["path"]]
    return list(paths), opts


def prepare_data(source: dict, cache_dir: str | os.PathLike, *, seq_len: int, vocab_size: int = 512,
                 val_fraction: float = 0.05, seed: int = 0) -> Path:
    """Prepare (once) and return the data directory of a data source: memory-mapped shards,
    tokenizer.json, concepts.json and meta.json under ``cache_dir/<content key>``.
    ``{"kind": "prepared", "path": DIR}`` is a directory ``interpscale data prepare`` made.
    Resumable and safe when several jobs race (a lock per directory)."""
    if source.get("kind") == "prepared":
        path = Path(source.get("path") or "")
        if not is_prepared(path):
            raise ValueError(f"prepared data not found (no meta.json of this version): {str(path)!r}")
        return path
    sources, opts = _prepare_options(source, vocab_size, val_fraction, seed)
    req = _comparable(make_request(sources, **opts))
    out = Path(cache_dir) / data_key({**req, "seq_len": seq_len})
    prepare(sources, out, extra={"seq_len": seq_len, "source": source}, **opts)
    log.info("data %s ready", out)
    return out


class PreparedData:
    """A prepared data directory opened for training / evaluation.

    ``train`` / ``val`` are splits whose ``.tokens`` is an ``np.memmap`` (nothing is loaded);
    ``seq_len`` cuts them into rows (default: the one recorded at preparation, if any).
    Directories from before the shards (``train.npz``) open as in-memory ``Packed``.
    """

    def __init__(self, path: str | os.PathLike, seq_len: int | None = None):
        self.path = Path(path)
        if not (self.path / "meta.json").exists():
            raise ValueError(f"{self.path}: not a prepared data directory (no meta.json)")
        self.meta = json.loads((self.path / "meta.json").read_text())
        self.concepts = read_concepts(self.path / "concepts.json")
        if self.meta.get("format") == FORMAT:
            self.tokenizer = load_any_tokenizer(self.path / "tokenizer.json")
            self.special_ids: dict[str, int] = dict(self.meta["special_ids"])
            self.seq_len = seq_len or self.meta.get("seq_len")
            self.train = Split(self.path, "train", self.meta, self.seq_len)
            self.val = Split(self.path, "val", self.meta, self.seq_len)
        else:  # legacy: packed in memory at a fixed seq_len, specials at 0..3
            self.tokenizer = load_tokenizer(self.path / "tokenizer.json")
            self.special_ids = dict(DEFAULT_SPECIAL_IDS)
            self.seq_len = self.meta.get("seq_len")
            self.train = Packed.load(self.path / "train.npz")
            self.val = Packed.load(self.path / "val.npz")

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    @property
    def n_concepts(self) -> int:
        return len(self.concepts)


def open_data(path: str | os.PathLike, seq_len: int | None = None) -> PreparedData:
    """Open prepared data: a data directory, or a run directory (follows its data.json)."""
    path = Path(path)
    link = path / "data.json"
    if link.exists() and not (path / "meta.json").exists():
        d = json.loads(link.read_text())
        return PreparedData(d["path"], seq_len or d.get("seq_len"))
    return PreparedData(path, seq_len)
