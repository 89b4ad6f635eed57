"""Streaming preparation into memory-mapped shards: equality with the in-memory packing,
resume after a kill, unicode, pretrained tokenizers, rank slices, bad input, CLI, submitit."""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from reference_packing import pack

from interpscale.cli import main
from interpscale.data import (CorpusConfig, Split, generate_documents, is_validation, open_data, prepare,
                              prepare_data, resolve_data_paths, write_concepts)
from interpscale.errors import UserError

CFG = {"kind": "synthetic", "n_concepts": 7, "n_docs": 150, "entities_per_concept": 5, "seed": 2}
SRC = Path(__file__).resolve().parents[2] / "src"


def _same(a, b):
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.valid, b.valid)
    if a.chunk_ids is None:
        assert b.chunk_ids is None and b.chunk_labels is None
    else:
        assert torch.equal(a.chunk_ids, b.chunk_ids) and torch.equal(a.chunk_labels, b.chunk_labels)


@pytest.mark.parametrize("via", ["synthetic", "jsonl"])  # character-level BPE; byte-level BPE from a file
def test_shards_give_the_batches_of_the_in_memory_packing(tmp_path, via):
    T = 24
    concepts, docs = generate_documents(CorpusConfig(**{k: v for k, v in CFG.items() if k != "kind"}))
    if via == "synthetic":
        data = open_data(prepare_data(CFG, tmp_path, seq_len=T, vocab_size=100))
    else:
        src = _jsonl(tmp_path / "syn.jsonl", [{"chunks": [{"text": t, "concepts": [concepts[c].label for c in labs]}
                                                          for t, labs in d]} for d in docs])
        data = open_data(prepare(src, tmp_path / "d", vocab_size=300), seq_len=T)
        assert data.tokenizer.get_vocab_size() == 300 and data.tokenizer.token_to_id("Ġ") is not None  # byte-level
        order = {c["label"]: k for k, c in enumerate(data.concepts)}  # labels sorted by name
        docs = [[(t, tuple(sorted(order[concepts[c].label] for c in labs))) for t, labs in d] for d in docs]
    assert isinstance(data.train.tokens, np.memmap) and isinstance(data.val.tokens, np.memmap)
    held = [is_validation([t for t, _ in d], 0.05, 0) for d in docs]
    assert 0 < sum(held) < len(docs)
    # the reference: today's packing of the same documents with the same tokenizer
    ref_train = pack([d for d, h in zip(docs, held) if not h], data.tokenizer, len(concepts), T)
    ref_val = pack([d for d, h in zip(docs, held) if h], data.tokenizer, len(concepts), T)
    n = data.train.n_tokens
    flat = ref_train.tokens.reshape(-1)
    assert np.array_equal(np.asarray(data.train.tokens), flat[:n]) and (flat[n:] == 0).all()
    assert data.train.n_rows == ref_train.n_rows and data.val.n_rows == ref_val.n_rows
    for step in (0, 3, 2 * ref_train.n_rows // 8 + 1):  # the last one wraps into the next epoch
        for concepts_on in (True, False):
            _same(data.train.batch(step, 8, seed=5, concepts=concepts_on),
                  ref_train.batch(step, 8, seed=5, concepts=concepts_on))
    _same(data.train.batch(4, 8, seed=5, rank=1, world=2), ref_train.batch(4, 8, seed=5, rank=1, world=2))
    for a, b in zip(data.val.eval_batches(4), ref_val.eval_batches(4), strict=True):
        _same(a, b)
    # CSR labels: ~2 bytes per label id, far below a dense chunks x concepts array
    assert data.train.label_ids.dtype == np.uint16 and data.train.n_chunks == ref_train.labels.shape[0]


def test_two_ranks_read_disjoint_rows(tmp_path):
    data = open_data(prepare_data(CFG, tmp_path, seq_len=16, vocab_size=100))
    read: dict[int, list] = {0: [], 1: []}
    for rank in (0, 1):
        orig = Split.row_tokens

        def spy(self, rows, rank=rank):
            read[rank].extend(np.asarray(rows).tolist())
            return orig(self, rows)

        Split.row_tokens = spy
        try:
            part = data.train.batch(6, 8, seed=1, rank=rank, world=2)
        finally:
            Split.row_tokens = orig
        assert part.tokens.shape == (4, 16)
    assert len(read[0]) == len(read[1]) == 4 and not set(read[0]) & set(read[1])
    whole = data.train.step_rows(6, 8, seed=1)
    assert sorted(read[0] + read[1]) == sorted(whole.tolist())


def _jsonl(path: Path, docs) -> Path:
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    return path


def _docs(n, tag="x", labels=("fruit", "rain")):
    return [{"chunks": [{"text": f"{tag} document {i} about apples and pears", "concepts": [labels[i % 2]]},
                        {"text": f"then {tag} weather {i} turns to rain", "concepts": list(labels)}]}
            for i in range(n)]


def test_unicode_round_trips_through_a_byte_level_tokenizer(tmp_path):
    odd = "世界 naïve café — 🙂 Ω≈ç"
    src = _jsonl(tmp_path / "u.jsonl", _docs(40) + [{"text": odd}])
    # the tokenizer sample is ASCII only: byte fallback must still cover every character
    out = prepare(src, tmp_path / "d", vocab_size=300, sample_bytes=2000, val_fraction=0.1, seed=1)
    data = open_data(out, seq_len=32)
    tok = data.tokenizer
    assert tok.decode(tok.encode(odd).ids) == odd
    split = data.val if is_validation([odd], 0.1, 1) else data.train
    stream = np.asarray(split.tokens)
    ends = np.flatnonzero(stream == data.special_ids["eoc"])
    texts = [tok.decode(stream[a + 1: b].tolist()) for a, b in zip(np.r_[-1, ends[:-1]], ends)]
    texts = [t.lstrip(" ") for t in texts]  # after an [EOS] no space; decoding skips specials
    assert odd in texts


def test_pretrained_tokenizer_json_with_special_ids_anywhere(tmp_path, make_spec):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([d["chunks"][0]["text"] for d in _docs(50)],
                            trainers.BpeTrainer(vocab_size=90, special_tokens=["<unk>", "<s>", "</s>"],
                                                show_progress=False))
    tok.save(str(tmp_path / "tokenizer.json"))
    v = tok.get_vocab_size()
    src = _jsonl(tmp_path / "p.jsonl", _docs(60))
    out = prepare(src, tmp_path / "d", tokenizer=tmp_path / "tokenizer.json", val_fraction=0.2)
    data = open_data(out, seq_len=20)
    ids = data.special_ids
    assert sorted(ids.values()) == list(range(v, v + 4)) and data.vocab_size == v + 4
    assert data.tokenizer.token_to_id("<s>") == 1  # the pretrained vocabulary is untouched
    b = data.train.batch(0, 4, seed=0)
    assert torch.equal(b.valid, b.tokens != ids["pad"])
    eoc = b.tokens == ids["eoc"]
    assert eoc.any() and (b.chunk_ids[eoc] >= 0).all() and (b.chunk_ids[b.tokens == ids["eos"]] == -1).all()
    assert b.chunk_labels.shape[-1] == 2 and (b.chunk_labels.sum(-1)[b.chunk_labels.sum(-1) > 0] >= 1).all()
    # the model is told where the specials are (only ids that differ from the defaults)
    from interpscale.orchestration.trainer import model_kwargs

    spec = make_spec(vocab_size=128, data={"kind": "prepared", "path": str(out)}, model_overrides={"n_concepts": 2})
    kw = model_kwargs(spec, data)
    assert {kw["data"].special_ids[k] for k in ("pad", "eos", "eoc", "mask")} == set(ids.values())


def test_resume_after_a_killed_prepare(tmp_path, caplog):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["apples pears rain weather document then turns"],
                            trainers.BpeTrainer(vocab_size=80, show_progress=False))
    tok.save(str(tmp_path / "tok.json"))
    files = [_jsonl(tmp_path / f"in{i}.jsonl", _docs(30, tag=f"f{i}")) for i in range(3)]
    blocked = tmp_path / "in3.jsonl"
    os.mkfifo(blocked)  # the 4th input never arrives: the process is killed while waiting on it
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "interpscale.cli", "data", "prepare", *map(str, files), str(blocked),
           "--out", str(out), "--tokenizer", str(tmp_path / "tok.json"), "--val-fraction", "0.2"]
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(SRC)}, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not (out / ".parts" / "00002.json").exists():
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read() if proc.poll() else "timeout"
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "meta.json").exists()
    blocked.unlink()
    _jsonl(blocked, _docs(30, tag="f3"))
    with caplog.at_level(logging.INFO, logger="interpscale.data"):
        prepare([*files, blocked], out, tokenizer=tmp_path / "tok.json", val_fraction=0.2)
    redone = [r.getMessage() for r in caplog.records if r.getMessage().startswith("part ")]
    assert len(redone) == 1 and redone[0].startswith("part 3 ")  # the three finished parts were kept
    fresh = prepare([*files, blocked], tmp_path / "fresh", tokenizer=tmp_path / "tok.json", val_fraction=0.2)
    for s in ("train", "val"):
        for f in ("tokens.bin", "chunk_end.npy", "label_offsets.npy", "label_ids.npy"):
            assert (out / f"{s}.{f}").read_bytes() == (fresh / f"{s}.{f}").read_bytes()
    assert not (out / ".parts").exists()


@pytest.mark.parametrize("bad,match", [
    ('{"text": "fine"}\n{not json\n', r"bad\.jsonl: line 2 is not valid JSON"),
    ('{"text": "fine"}\n{"chunks": [{"text": "a"}, {"concepts": ["fruit"]}]}\n',
     r"bad\.jsonl: line 2, chunk 1: needs a string 'text'"),
    ('{"text": "fine"}\n\n{"text": "b", "concepts": ["nope"]}\n',
     r"bad\.jsonl: line 3: unknown concept label\(s\) \['nope'\]"),
    ("", r"bad\.jsonl: empty file"),
])
def test_bad_input_names_file_and_line_and_keeps_finished_parts(tmp_path, bad, match, caplog):
    good = _jsonl(tmp_path / "good.jsonl", _docs(20))
    bad_file = tmp_path / "bad.jsonl"
    bad_file.write_text(bad)
    cards = tmp_path / "concepts.json"
    write_concepts([{"label": lab, "description": "", "words": []} for lab in ("fruit", "rain")], cards)
    out = prepare(good, tmp_path / "tok", vocab_size=100, val_fraction=0.2)  # a tokenizer to reuse
    opts = dict(tokenizer=out / "tokenizer.json", val_fraction=0.2, concepts=cards)
    with pytest.raises(ValueError, match=match):
        prepare([good, bad_file], tmp_path / "out", **opts)
    assert (tmp_path / "out" / ".parts" / "00000.json").exists() and not (tmp_path / "out" / "meta.json").exists()
    bad_file.write_text('{"text": "now fine", "concepts": ["rain"]}\n')  # fixed: the rerun resumes
    with caplog.at_level(logging.INFO, logger="interpscale.data"):
        out = prepare([good, bad_file], tmp_path / "out", **opts)
    assert [r.getMessage()[:7] for r in caplog.records if r.getMessage().startswith("part ")] == ["part 1 "]
    assert open_data(out).meta["splits"]["train"]["docs"] + open_data(out).meta["splits"]["val"]["docs"] == 21


def test_a_changed_input_is_prepared_again(tmp_path):
    src = _jsonl(tmp_path / "c.jsonl", _docs(30))
    out = prepare(src, tmp_path / "d", vocab_size=100, val_fraction=0.2)
    assert prepare(src, out, vocab_size=100, val_fraction=0.2) == out  # unchanged: nothing to do
    with src.open("a") as f:
        f.write(json.dumps({"text": "one more document"}) + "\n")
    meta = open_data(prepare(src, out, vocab_size=100, val_fraction=0.2)).meta
    assert meta["splits"]["train"]["docs"] + meta["splits"]["val"]["docs"] == 31


def test_cli_prepare_info_help_and_errors(tmp_path, capsys):
    txt = tmp_path / "a.txt.gz"
    import gzip

    with gzip.open(txt, "wt", encoding="utf-8") as f:
        f.write("\n\n".join(f"plain document number {i}.\nsecond line {i}." for i in range(40)) + "\n")
    out = tmp_path / "d"
    assert main(["data", "prepare", str(tmp_path / "*.txt.gz"), "--out", str(out), "--vocab-size", "100",
                 "--val-fraction", "0.2"]) == 0
    data = open_data(out, seq_len=16)
    assert data.n_concepts == 0 and data.train.batch(0, 2, seed=0).chunk_ids is None
    assert data.meta["splits"]["train"]["docs"] + data.meta["splits"]["val"]["docs"] == 40
    assert main(["data", "info", str(out)]) == 0 and "train:" in capsys.readouterr().out
    assert main(["data", "prepare", str(tmp_path / "none*.jsonl"), "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert "no input file matches" in err and "Traceback" not in err
    # the same directory with other inputs is refused, nothing is overwritten
    other = _jsonl(tmp_path / "o.jsonl", _docs(5))
    assert main(["data", "prepare", str(other), "--out", str(out)]) == 2
    assert "already holds other prepared data" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["data", "prepare", "--help"])
    assert ".parquet" in capsys.readouterr().out


def test_submitit_local_executor_one_task_per_file(tmp_path):
    files = [_jsonl(tmp_path / f"s{i}.jsonl", _docs(25, tag=f"s{i}")) for i in range(2)]
    a = prepare(files, tmp_path / "a", executor="local", vocab_size=100, val_fraction=0.2)
    b = prepare(files, tmp_path / "b", vocab_size=100, val_fraction=0.2)
    c = prepare(files, tmp_path / "c", vocab_size=100, val_fraction=0.2, workers=2)  # worker processes
    d = prepare(files, tmp_path / "e", executor="debug", vocab_size=100, val_fraction=0.2)  # the launcher's arrays
    for f in ("tokenizer.json", "train.tokens.bin", "val.label_ids.npy", "concepts.json"):
        assert (a / f).read_bytes() == (b / f).read_bytes() == (c / f).read_bytes() == (d / f).read_bytes()
    assert not (a / ".submitit").exists() and not (d / ".parts").exists()
    files[1].write_text('{"text": "ok"}\n{broken\n')  # a failing task names file and line; the other part is kept
    with pytest.raises(UserError, match=r"s1\.jsonl: line 2 is not valid JSON"):
        prepare(files, tmp_path / "f", executor="local", tokenizer=a / "tokenizer.json", val_fraction=0.2)
    assert (tmp_path / "f" / ".parts" / "00000.json").exists()


def test_toml_relative_paths_and_prepared_kind_in_a_run(tmp_path, make_spec):
    src = {"kind": "jsonl", "path": ["c/*.jsonl"], "concepts": "cards.json", "tokenizer": "/abs/tok.json"}
    res = resolve_data_paths(src, tmp_path)
    assert res["path"] == [str(tmp_path / "c/*.jsonl")] and res["concepts"] == str(tmp_path / "cards.json")
    assert res["tokenizer"] == "/abs/tok.json" and resolve_data_paths(src, None) == src
    (tmp_path / "c").mkdir()
    _jsonl(tmp_path / "c" / "one.jsonl", _docs(40))
    out = prepare(tmp_path / "c" / "*.jsonl", tmp_path / "prep", vocab_size=100, val_fraction=0.2)
    from interpscale.orchestration.trainer import init_run_dir, open_run_data

    spec = make_spec(data={"kind": "prepared", "path": str(out)}, model_overrides={"n_concepts": 2})
    run = init_run_dir(spec, tmp_path / "runs" / "r")
    data = open_run_data(run)
    assert data.path == out and data.seq_len == spec.seq_len and data.train.batch(1, 4, seed=0).tokens.shape == (4, 32)
    assert open_data(run).train.n_rows == data.train.n_rows


def test_parquet_documents_span_row_batches_and_prepare_streams_them(tmp_path):
    import pandas as pd

    from interpscale.data.sources import iter_parquet_docs

    pq = tmp_path / "c.parquet"
    pd.DataFrame({"doc_id": [7, 7, 7, 8, 9, 9], "text": [f"chunk {i} of rain" for i in range(6)],
                  "concepts": ["rain", "", "rain,sun", "sun", "", "rain"]}).to_parquet(pq, row_group_size=2)
    docs = list(iter_parquet_docs(pq, batch_rows=2))  # a document split over row batches stays whole
    assert [len(d.chunks) for d in docs] == [3, 1, 2] and docs[1].where.endswith("row 3")
    assert docs[0].chunks[2] == ("chunk 2 of rain", ["rain", "sun"])
    data = open_data(prepare([pq, pq], tmp_path / "d", vocab_size=100, val_fraction=0.0), seq_len=8)
    assert data.n_concepts == 2 and data.meta["splits"]["train"]["docs"] == 6
    assert data.train.label_offsets[-1] == 2 * 5 and data.train.n_chunks == 12
