"""Issue 29's data options: code corpora one document per file, the validation split keeping
each document whole, `[data] path` lists, and ``describe`` (vocabulary, concepts, fingerprints)."""

import json
import tomllib

import numpy as np
import pytest

from interpscale.cli import main
from interpscale.data import describe, open_data, prepare, prepare_data
from interpscale.errors import ConfigError, UserError
from interpscale.orchestration.config import validate_config

CODE = '''def f{i}(x):
    """Function number {i}."""
    y = x + {i}

    return y * 2


class C{i}:

    def g(self):
        return f{i}(self)
'''


def _code_files(tmp_path, n=30):
    d = tmp_path / "src"
    d.mkdir()
    for i in range(n):
        (d / f"m{i:02d}.py").write_text(CODE.format(i=i))
    return d


def _doc_texts(data) -> dict[str, list[str]]:
    """Each split's documents decoded (tokens between [EOS]), chunk markers dropped."""
    out = {}
    eos, eoc = data.special_ids["eos"], data.special_ids["eoc"]
    for name, split in (("train", data.train), ("val", data.val)):
        stream = np.asarray(split.tokens)
        ends = np.flatnonzero(stream == eos)
        out[name] = [data.tokenizer.decode([t for t in stream[a + 1: b].tolist() if t != eoc])
                     for a, b in zip(np.r_[-1, ends[:-1]], ends)]
    return out


def test_document_per_file_keeps_each_code_file_whole_in_one_split(tmp_path, capsys):
    src = _code_files(tmp_path)
    out = tmp_path / "d"
    assert main(["data", "prepare", str(src / "*.py"), "--document-per-file", "--out", str(out),
                 "--vocab-size", "300", "--val-fraction", "0.2"]) == 0
    data = open_data(out, seq_len=32)
    texts = _doc_texts(data)
    files = {p.read_text() for p in src.glob("*.py")}  # every character, the final newline too
    assert len(texts["train"]) + len(texts["val"]) == 30 and texts["val"]  # one document per file
    assert set(texts["train"]) | set(texts["val"]) == files  # whole, blank lines inside
    assert not set(texts["train"]) & set(texts["val"])  # no file's tokens in both splits
    # without the option a blank line ends a document: each file would be 4 fragments
    frag = prepare(sorted(src.glob("*.py")), tmp_path / "f", fmt="text", vocab_size=300, val_fraction=0.2)
    sp = open_data(frag).meta["splits"]
    assert sp["train"]["docs"] + sp["val"]["docs"] == 4 * 30
    # the same from a sweep's [data] table
    toml = prepare_data({"kind": "text", "path": [str(src / "*.py")], "document_per_file": True}, tmp_path / "cache",
                        seq_len=32, vocab_size=300, val_fraction=0.2)
    assert (toml / "train.tokens.bin").read_bytes() == (out / "train.tokens.bin").read_bytes()


def test_document_per_file_refuses_structured_formats(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    with pytest.raises(UserError, match=r"a\.jsonl: --document-per-file reads each file as one plain-text "
                                        r"document, not jsonl"):
        prepare(tmp_path / "a.jsonl", tmp_path / "d", document_per_file=True)
    assert main(["data", "prepare", str(tmp_path / "a.jsonl"), "--format", "parquet", "--document-per-file",
                 "--out", str(tmp_path / "e")]) == 2
    assert "not parquet" in capsys.readouterr().err


def test_validation_split_never_cuts_a_document(tmp_path):
    """Documents of many chunks: every chunk of a held-out document is held out with it."""
    docs = [{"chunks": [{"text": f"document {d} part {j} about rain", "concepts": ["rain"]} for j in range(5)]}
            for d in range(40)]
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps(d) + "\n" for d in docs))
    data = open_data(prepare(src, tmp_path / "d", vocab_size=100, val_fraction=0.3), seq_len=16)
    texts = _doc_texts(data)
    assert texts["val"] and texts["train"]
    for name, other in (("train", "val"), ("val", "train")):
        for t in texts[name]:
            d = int(t.split()[1])
            assert all(f"document {d} part {j}" in t for j in range(5))  # whole
            assert not any(f"document {d} part" in u for u in texts[other])  # and only here
    assert data.train.n_chunks + data.val.n_chunks == 200


BASE = """
[plan]
families = ["ar"]
sizes = ["nano"]
seq_len = 32
batch_tokens = 256
[plan.slices]
"ar" = [1e9]
[data]
"""


def test_data_path_lists_in_presets(tmp_path):
    validate_config(tomllib.loads(BASE + 'kind = "jsonl"\npath = ["a/*.jsonl", "b.jsonl"]\n'), "p.toml")
    validate_config(tomllib.loads(BASE + 'kind = "text"\npath = ["src/*.py"]\ndocument_per_file = true\n'), "p.toml")
    for body, match in [('kind = "prepared"\npath = ["a", "b"]\n', r"\[data\] path = \['a', 'b'\]: expected one"),
                        ('kind = "jsonl"\npath = ["a", 3]\n', r"\[data\] path = 3: expected a file path"),
                        ('kind = "jsonl"\npath = []\n', "at least one path"),
                        ('kind = "jsonl"\npaths = "a"\n', r"unknown key 'paths'; did you mean 'path'"),
                        ('kind = "jsnl"\npath = "a"\n', r"kind = 'jsnl'.*did you mean 'jsonl'")]:
        with pytest.raises(ConfigError, match=match):
            validate_config(tomllib.loads(BASE + body), "p.toml")
    for i in range(2):  # a list of files is one corpus
        (tmp_path / f"p{i}.jsonl").write_text("".join(json.dumps({"text": f"file {i} doc {d}"}) + "\n"
                                                      for d in range(20)))
    out = prepare_data({"kind": "jsonl", "path": [str(tmp_path / "p0.jsonl"), str(tmp_path / "p1.jsonl")]},
                       tmp_path / "cache", seq_len=16, vocab_size=100, val_fraction=0.2)
    sp = open_data(out).meta["splits"]
    assert sp["train"]["docs"] + sp["val"]["docs"] == 40


def test_describe_reports_vocab_concepts_and_fingerprints(tmp_path):
    docs = [{"chunks": [{"text": f"doc {d} apples", "concepts": ["fruit"]}, {"text": "rain", "concepts": []}]}
            for d in range(30)]
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps(d) + "\n" for d in docs))
    a = prepare(src, tmp_path / "a", vocab_size=100, val_fraction=0.2)
    b = prepare(src, tmp_path / "b", vocab_size=100, val_fraction=0.2)
    c = prepare(src, tmp_path / "c", vocab_size=100, val_fraction=0.2, seed=1)  # another split
    da, db, dc = describe(a), describe(b), describe(c)
    meta = open_data(a).meta
    assert (da.vocab_size, da.n_concepts) == (meta["vocab_size"], 1) and da.special_ids == meta["special_ids"]
    assert da.corpus_sha == db.corpus_sha == meta["corpus_sha"] and da.tokenizer_sha == db.tokenizer_sha
    assert dc.corpus_sha != da.corpus_sha and len(da.corpus_sha) == len(da.tokenizer_sha) == 16
    assert da.to_dict()["path"] == str(a)
    del meta["corpus_sha"]  # prepared before the fingerprint was recorded: computed from the files
    (a / "meta.json").write_text(json.dumps(meta))
    assert describe(a).corpus_sha == db.corpus_sha
    with pytest.raises(UserError, match="not prepared data"):
        describe(tmp_path)
