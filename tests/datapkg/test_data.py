"""Corpus, tokenizer, the reference packing, loaders and the validation split."""

import json

import numpy as np
import pandas as pd
import pytest

from reference_packing import load_source, pack, split_docs

from interpscale.data import (CorpusConfig, PreparedData, generate_documents, prepare, prepare_data, read_concepts,
                              train_tokenizer, write_concepts)
from interpscale.errors import UserError
from interpscale.models.types import EOC_ID, EOS_ID, SPECIAL_TOKENS

CFG = CorpusConfig(n_concepts=20, n_docs=60, seed=3)


def test_corpus_is_deterministic_and_seeded():
    c1, d1 = generate_documents(CFG)
    c2, d2 = generate_documents(CFG)
    assert d1 == d2 and c1 == c2
    _, d3 = generate_documents(CorpusConfig(n_concepts=20, n_docs=60, seed=4))
    assert d3 != d1
    assert len({c.label for c in c1}) == 20  # themed + synthetic concepts, unique labels


def test_chunk_labels_are_exact_ground_truth():
    concepts, docs = generate_documents(CFG)
    filler = {"the", "a", "and", "of", "with", "near", "while", "then", "so", "again", "is", "."}
    for doc in docs:
        for text, labels in doc:
            assert labels and list(labels) == sorted(set(labels))
            vocab = set(filler)
            for c in labels:
                con = concepts[c]
                vocab |= set(con.words) | set(con.entities) | set(con.attributes)
            # every word of a chunk comes from its labelled concepts (or is a function word)
            assert set(text.split()) <= vocab, (text, labels)


def test_tokenizer_reserves_special_ids_and_pack_keeps_chunks():
    concepts, docs = generate_documents(CFG)
    tok = train_tokenizer((t for d in docs for t, _ in d), vocab_size=200)
    assert [tok.token_to_id(s) for s in SPECIAL_TOKENS] == [0, 1, 2, 3]
    packed = pack(docs, tok, len(concepts), seq_len=48)
    flat_tok, flat_chunk = packed.tokens.reshape(-1), packed.chunk.reshape(-1)
    chunks = [c for d in docs for c in d]
    assert packed.labels.shape == (len(chunks), 20)
    for k in (0, 5, len(chunks) - 1):
        ids = flat_tok[flat_chunk == k]
        assert ids[-1] == EOC_ID  # each chunk closes with [EOC]
        assert tok.decode(ids[:-1].tolist()).split() == chunks[k][0].split()
        assert sorted(np.flatnonzero(packed.labels[k])) == list(chunks[k][1])
    assert (flat_tok == EOS_ID).sum() == len(docs)


def test_batches_are_a_function_of_step_with_local_chunk_ids():
    concepts, docs = generate_documents(CFG)
    tok = train_tokenizer((t for d in docs for t, _ in d), vocab_size=200)
    packed = pack(docs, tok, len(concepts), seq_len=32)
    b1, b2 = packed.batch(7, 4, seed=1), packed.batch(7, 4, seed=1)
    assert (b1.tokens == b2.tokens).all() and (b1.chunk_labels == b2.chunk_labels).all()
    assert not (packed.batch(8, 4, seed=1).tokens == b1.tokens).all()
    # chunk_ids index chunk_labels per row and agree with the global labels
    for r in range(4):
        ids = b1.chunk_ids[r]
        assert ids.min() >= -1 and ids.max() < b1.chunk_labels.shape[1]
    # rank slices of a step partition the global batch
    parts = [packed.batch(7, 4, seed=1, rank=i, world=2).tokens for i in range(2)]
    assert sorted(map(tuple, np.concatenate(parts).tolist())) == sorted(map(tuple, b1.tokens.tolist()))
    # beyond one epoch the order wraps onto a new permutation without error
    far = packed.batch(10 * packed.n_rows, 4, seed=1)
    assert far.tokens.shape == (4, 32)


def test_split_is_by_document_and_rejects_bad_fraction(tmp_path):
    _, docs = generate_documents(CFG)
    train, val = split_docs(docs, 0.1, seed=0)  # the package's one rule, a keyed hash of each document
    assert len(train) + len(val) == len(docs) and 0 < len(val) < len(docs) / 4
    assert all(d in docs for d in train + val) and not [d for d in val if d in train]
    assert split_docs(docs, 0.1, seed=1)[1] != val  # the seed keys the hash
    with pytest.raises(ValueError, match="val_fraction"):
        split_docs(docs, 1.5, seed=0)
    with pytest.raises(ValueError, match="val_fraction"):  # the same rule where data is prepared
        prepare_data({"kind": "synthetic", "n_docs": 10}, tmp_path, seq_len=8, val_fraction=1.5)


def test_prepare_data_caches_and_writes_cards(tmp_path):
    src = {"kind": "synthetic", "n_concepts": 5, "n_docs": 40}
    p1 = prepare_data(src, tmp_path, seq_len=32, vocab_size=120)
    p2 = prepare_data(src, tmp_path, seq_len=32, vocab_size=120)
    assert p1 == p2
    data = PreparedData(p1)
    cards = read_concepts(p1 / "concepts.json")
    assert [c["label"] for c in cards] == ["astronomy", "cooking", "music", "ocean", "medicine"]
    assert data.n_concepts == 5 and data.val.n_rows >= 1
    try:  # the judges' ConceptCard is built from a card trivially
        from interpscale.judges.types import ConceptCard
    except ImportError:
        return
    card = ConceptCard(cards[0]["label"], cards[0]["description"], tuple(cards[0]["words"]))
    assert "telescope" in card.words


def test_user_jsonl_and_parquet_loaders(tmp_path):
    jl = tmp_path / "docs.jsonl"
    jl.write_text(json.dumps({"chunks": [{"text": "red apples fall", "concepts": ["fruit"]},
                                         {"text": "rain falls", "concepts": ["weather", "fruit"]}]}) + "\n"
                  + json.dumps({"text": "plain text only"}) + "\n")
    cards, docs = load_source({"kind": "jsonl", "path": str(jl)})
    assert [c["label"] for c in cards] == ["fruit", "weather"]
    assert docs[0] == [("red apples fall", (0,)), ("rain falls", (0, 1))] and docs[1] == [("plain text only", ())]
    pq = tmp_path / "docs.parquet"
    pd.DataFrame({"doc_id": [1, 1, 2], "text": ["a b", "c d", "e"], "concepts": ["x", "x,y", ""]}).to_parquet(pq)
    cards, docs = load_source({"kind": "parquet", "path": str(pq)})
    assert [c["label"] for c in cards] == ["x", "y"] and docs[0][1] == ("c d", (0, 1)) and docs[1] == [("e", ())]
    pd.DataFrame({"text": ["a b", "c d"]}).to_parquet(pq)  # no doc_id: a row is a document
    assert load_source({"kind": "parquet", "path": str(pq)})[1] == [[("a b", ())], [("c d", ())]]
    with jl.open("a") as f:  # enough documents for both sides of the hash split
        for i in range(30):
            f.write(json.dumps({"chunks": [{"text": f"doc {i} apples", "concepts": ["fruit"]}]}) + "\n")
    out = prepare_data({"kind": "jsonl", "path": str(jl)}, tmp_path / "cache", seq_len=16, vocab_size=60,
                       val_fraction=0.3)
    data = PreparedData(out)
    assert data.n_concepts == 2 and data.val.n_tokens > 0 and data.train.n_tokens > 0


@pytest.mark.parametrize("content,match", [
    ("{not json\n", "line 1 is not valid JSON"),
    (json.dumps({"chunks": [{"txt": "x"}]}) + "\n", "line 1, chunk 0: needs a string 'text'"),
    (json.dumps({"title": "x"}) + "\n", "line 1 has neither"),
])
def test_bad_jsonl_names_the_line(tmp_path, content, match):
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(ValueError, match=match):
        load_source({"kind": "jsonl", "path": str(p)})


def test_bad_sources(tmp_path):
    with pytest.raises(ValueError, match="unknown data kind"):
        load_source({"kind": "csv", "path": "x"})
    with pytest.raises(ValueError, match="unknown data kind"):
        prepare_data({"kind": "csv", "path": "x"}, tmp_path, seq_len=8)
    with pytest.raises(ValueError, match="not found"):
        load_source({"kind": "jsonl", "path": str(tmp_path / "missing.jsonl")})
    pq = tmp_path / "nocol.parquet"
    pd.DataFrame({"body": ["a"]}).to_parquet(pq)
    with pytest.raises(ValueError, match=r"missing column\(s\) \['text'\]"):
        load_source({"kind": "parquet", "path": str(pq)})
    cards = tmp_path / "concepts.json"
    write_concepts([{"label": "x", "description": "", "words": []}], cards)
    jl = tmp_path / "d.jsonl"
    jl.write_text(json.dumps({"text": "t", "concepts": ["zzz"]}) + "\n")
    with pytest.raises(ValueError, match="unknown concept label"):
        load_source({"kind": "jsonl", "path": str(jl), "concepts": str(cards)})
    with pytest.raises(ValueError, match="bad synthetic corpus option"):
        load_source({"kind": "synthetic", "n_topics": 3})
    for text, match in [("[{", r"concepts\.json: not valid JSON \(.* at line 1\)"),
                        ('{"label": "x"}', r"concepts\.json: expected a JSON list of concept cards, got dict"),
                        ('["x"]', r"concepts\.json: concept card 0 lacks \['description', 'label', 'words'\]"),
                        ('[{"label": "x", "description": "", "words": []}, {"label": "x", "description": "", '
                         '"words": []}]', r"concepts\.json: duplicate concept labels")]:
        cards.write_text(text)
        with pytest.raises(UserError, match=match):
            prepare(jl, tmp_path / "c", concepts=cards)
        assert not (tmp_path / "c").exists()  # nothing written: the rerun after a fix starts afresh


def test_directories_packed_before_the_shards_are_refused_with_the_fix(tmp_path):
    """A directory of the old in-memory packing (train.npz) is no longer read: opening it
    says to prepare the data again."""
    from interpscale.data import describe, open_data

    concepts, docs = generate_documents(CFG)
    tok = train_tokenizer((t for d in docs for t, _ in d), vocab_size=200)
    train, val = split_docs(docs, 0.1, seed=0)
    old = tmp_path / "old"
    old.mkdir()
    tok.save(str(old / "tokenizer.json"))
    write_concepts(concepts, old / "concepts.json")
    for name, docs_ in (("train", train), ("val", val)):  # the old layout: the packed arrays in .npz
        ref = pack(docs_, tok, len(concepts), seq_len=32)
        np.savez(old / f"{name}.npz", tokens=ref.tokens, chunk=ref.chunk, labels=ref.labels)
    (old / "meta.json").write_text(json.dumps({"seq_len": 32, "n_concepts": len(concepts)}))
    for opener in (open_data, describe, lambda p: prepare_data({"kind": "prepared", "path": str(p)}, tmp_path,
                                                               seq_len=32)):
        with pytest.raises(UserError, match=r"old.*train\.npz.*rerun `interpscale data prepare`"):
            opener(old)
    run = tmp_path / "run"  # a run directory linking to it says the same
    run.mkdir()
    (run / "data.json").write_text(json.dumps({"path": str(old), "seq_len": 32}))
    with pytest.raises(UserError, match="rerun `interpscale data prepare`"):
        open_data(run)
