"""Data sources -> a prepared data directory (tokenizer, concept cards, packed splits).

Sources:
- ``{"kind": "synthetic", **CorpusConfig fields}``: the bundled concept corpus;
- ``{"kind": "jsonl", "path": ...}``: one document per line, either
  ``{"chunks": [{"text": ..., "concepts": [label, ...]}, ...]}`` or ``{"text": ...}``;
- ``{"kind": "parquet", "path": ...}``: one chunk per row with columns
  ``doc_id, text, concepts`` (a list of labels, or a comma-separated string), in order.
Optional ``"concepts": path`` to a concepts.json fixing the concept order and cards.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from interpscale._jsonl import iter_jsonl
from interpscale.orchestration.corpus import (
    CorpusConfig,
    Document,
    generate_documents,
    read_concepts,
    write_concepts,
)
from interpscale.orchestration.data import (
    Packed,
    data_key,
    load_tokenizer,
    pack,
    split_docs,
    train_tokenizer,
)

log = logging.getLogger(__name__)


def _labels_of(value, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [s.strip() for s in value.split(",") if s.strip()]
    if isinstance(value, (list, tuple, np.ndarray)):
        return [str(s) for s in value]
    raise ValueError(f"{where}: 'concepts' must be a list of labels or a comma-separated string, got {value!r}")


def read_jsonl_documents(path: str | os.PathLike) -> list[list[tuple[str, list[str]]]]:
    docs = []
    for i, rec in iter_jsonl(path):
        if "chunks" in rec:
            chunks = rec["chunks"]
            if not isinstance(chunks, list) or not chunks:
                raise ValueError(f"{path}: line {i}: 'chunks' must be a non-empty list")
            doc = []
            for j, ch in enumerate(chunks):
                if not isinstance(ch, dict) or not isinstance(ch.get("text"), str):
                    raise ValueError(f"{path}: line {i}, chunk {j}: needs a string 'text'")
                doc.append((ch["text"], _labels_of(ch.get("concepts"), f"{path}: line {i}, chunk {j}")))
        elif isinstance(rec.get("text"), str):
            doc = [(rec["text"], _labels_of(rec.get("concepts"), f"{path}: line {i}"))]
        else:
            raise ValueError(f"{path}: line {i} has neither 'chunks' nor a string 'text'")
        docs.append(doc)
    if not docs:
        raise ValueError(f"{path}: no documents")
    return docs


def read_parquet_documents(path: str | os.PathLike) -> list[list[tuple[str, list[str]]]]:
    import pandas as pd

    df = pd.read_parquet(path)
    missing = {"doc_id", "text"} - set(df.columns)
    if missing:
        raise ValueError(f"{path}: missing column(s) {sorted(missing)}; need doc_id, text[, concepts]")
    docs: dict = {}
    for i, row in enumerate(df.itertuples(index=False)):
        if not isinstance(row.text, str):
            raise ValueError(f"{path}: row {i}: column 'text' must be a string, got {row.text!r}")
        labs = _labels_of(getattr(row, "concepts", None), f"{path}: row {i}")
        docs.setdefault(row.doc_id, []).append((row.text, labs))
    if not docs:
        raise ValueError(f"{path}: no rows")
    return list(docs.values())


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
    if kind not in ("jsonl", "parquet"):
        raise ValueError(f"unknown data kind {kind!r}; expected synthetic, jsonl or parquet")
    path = source.get("path")
    if not path or not Path(path).exists():
        raise ValueError(f"{kind} data file not found: {path!r}")
    raw = read_jsonl_documents(path) if kind == "jsonl" else read_parquet_documents(path)
    cards = read_concepts(source["concepts"]) if source.get("concepts") else None
    return _index_labels(raw, cards)


def prepare_data(source: dict, cache_dir: str | os.PathLike, *, seq_len: int, vocab_size: int = 512,
                 val_fraction: float = 0.05, seed: int = 0) -> Path:
    """Build (once) and return a data directory with tokenizer.json, concepts.json,
    train.npz and val.npz.  Safe when several jobs race: built in a temp dir and renamed."""
    request = {"source": source, "seq_len": seq_len, "vocab_size": vocab_size, "val_fraction": val_fraction,
               "seed": seed}
    for k in ("path", "concepts"):  # a changed user file invalidates the cache
        if source.get(k) and Path(source[k]).exists():
            request[f"{k}_mtime"] = Path(source[k]).stat().st_mtime_ns
    out = Path(cache_dir) / data_key(request)
    if (out / "meta.json").exists():
        return out
    cards, docs = load_source(source)
    train_docs, val_docs = split_docs(docs, val_fraction, seed)
    tok = train_tokenizer((text for doc in train_docs for text, _ in doc), vocab_size)
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache_dir, prefix=".build-"))
    try:
        tok.save(str(tmp / "tokenizer.json"))
        write_concepts(cards, tmp / "concepts.json")
        train, val = pack(train_docs, tok, len(cards), seq_len), pack(val_docs, tok, len(cards), seq_len)
        train.save(tmp / "train.npz")
        val.save(tmp / "val.npz")
        meta = {**request, "n_concepts": len(cards), "vocab_size_actual": tok.get_vocab_size(),
                "train_tokens": int(train.tokens.size), "val_tokens": int(val.tokens.size)}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
        try:
            os.rename(tmp, out)
        except OSError:  # another job finished first; theirs is identical
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("prepared data %s (%d train rows of %d tokens)", out, train.n_rows, seq_len)
    return out


class PreparedData:
    """A prepared data directory opened for training / evaluation."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.meta = json.loads((self.path / "meta.json").read_text())
        self.tokenizer = load_tokenizer(self.path / "tokenizer.json")
        self.concepts = read_concepts(self.path / "concepts.json")
        self.train = Packed.load(self.path / "train.npz")
        self.val = Packed.load(self.path / "val.npz")

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    @property
    def n_concepts(self) -> int:
        return len(self.concepts)
