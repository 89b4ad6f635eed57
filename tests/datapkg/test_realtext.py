"""The real-text fixture (tests/data/realtext: Python documentation prose, PSF licence, with
hand-made concept labels) prepared into shards: concepts, labels, whole documents per split."""

import json

import numpy as np

from interpscale.data import describe, open_data, prepare


def _documents(split, eos: int) -> list[list[int]]:
    """The token ids of each document of a split's stream (up to and without its [EOS])."""
    stream = np.asarray(split.tokens)
    ends = np.flatnonzero(stream == eos)
    return [stream[a + 1: b].tolist() for a, b in zip(np.r_[-1, ends[:-1]], ends)]


def test_realtext_fixture_prepares_into_shards(tmp_path, reference_data):
    src = reference_data("realtext/python-docs.jsonl")
    cards = reference_data("realtext/concepts.json")
    docs = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines()]
    out = prepare(src, tmp_path / "d", concepts=cards, vocab_size=400, sample_bytes=60_000, val_fraction=0.1)
    data = open_data(out, seq_len=64)
    info = describe(out)
    assert info.n_concepts == 8 == data.n_concepts and info.vocab_size == 400 == data.vocab_size
    assert [c["label"] for c in data.concepts] == [c["label"] for c in json.loads(cards.read_text())]
    meta = data.meta["splits"]
    assert meta["train"]["docs"] + meta["val"]["docs"] == len(docs) and meta["val"]["docs"] > 0
    n_chunks = sum(len(d["chunks"]) for d in docs)
    n_labels = sum(len(c["concepts"]) for d in docs for c in d["chunks"])
    assert data.train.n_chunks + data.val.n_chunks == n_chunks
    assert int(data.train.label_offsets[-1] + data.val.label_offsets[-1]) == n_labels
    # every document is whole in one split: its decoded chunks are the source's, in order
    tok, ids = data.tokenizer, data.special_ids
    texts = {}
    for name, split in (("train", data.train), ("val", data.val)):
        for doc in _documents(split, ids["eos"]):
            chunk_ids = np.split(np.asarray(doc), np.flatnonzero(np.asarray(doc) == ids["eoc"]) + 1)[:-1]
            texts.setdefault(name, []).append(tuple(tok.decode(c[:-1].tolist()) for c in chunk_ids))
    source = [tuple(c["text"] for c in d["chunks"]) for d in docs]
    assert sorted(texts["train"] + texts["val"]) == sorted(source)
    assert not set(texts["train"]) & set(texts["val"])
    # a batch of the concept families carries the labels
    b = data.train.batch(0, 8, seed=0)
    assert b.chunk_labels.shape[-1] == 8 and b.chunk_labels.sum() > 0
