"""Issue 37.1 / 37.6: text that is not UTF-8 is refused by `data prepare` and `concepts chunk`
with one line naming the file and what was found, before anything is written; a missing
`[data] path` is named as missing with the path it resolved to."""

from __future__ import annotations

import re

import pytest

from interpscale.cli import main

TEXT = "The ship left the harbour at dawn. It rained all day.\n\nA second document here.\n"
BAD = {  # file name -> (bytes, what the message says)
    "bom16.txt": (TEXT.encode("utf-16"), r"UTF-16-LE text \(byte-order mark FF FE\), not UTF-8; convert it: iconv"),
    "be16.txt": (b"\xfe\xff" + TEXT.encode("utf-16-be"), r"UTF-16-BE text \(byte-order mark FE FF\)"),
    "nobom16.txt": (TEXT.encode("utf-16-le"), r"UTF-16-LE text without a byte-order mark \(every second byte is NUL\)"),
    "nobom16be.txt": (TEXT.encode("utf-16-be"), r"UTF-16-BE text without a byte-order mark"),
    "bom32.txt": (TEXT.encode("utf-32"), r"UTF-32-LE text \(byte-order mark FF FE 00 00\)"),
    "nul.txt": (b"abc def\x00\x01\x02 ghi\n", r"binary data, not text \(a NUL byte at byte 7\)"),
    "png.txt": (b"\x89PNG\r\n\x1a\n" + bytes(range(256)), r"binary data \(a PNG image\), not text"),
    "latin1.txt": ("Café au lait. Très bien.\n".encode("latin-1"),
                   r"not UTF-8 text \(byte 0xE9 at byte 3: invalid continuation byte\); Latin-1 / cp1252 text\?"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_text_that_is_not_utf8_is_refused_before_anything_is_written(tmp_path, capsys, name):
    data, message = BAD[name]
    (tmp_path / name).write_bytes(data)
    for argv, out in ((["data", "prepare"], tmp_path / "prepared"), (["concepts", "chunk"], tmp_path / "chunks")):
        assert main([*argv, str(tmp_path / name), "--out", str(out)]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"interpscale {argv[0]} {argv[1]}: {tmp_path / name}: "), err
        assert re.search(message, err[0]), err[0]
        assert not out.exists(), f"{argv} wrote {out} before refusing"


def test_a_nul_beyond_the_checked_head_is_still_refused(tmp_path):
    from interpscale.data import sources
    from interpscale.errors import UserError

    big = tmp_path / "late.txt"
    big.write_bytes(b"word " * (sources.SNIFF_BYTES // 5 + 10) + b"\x00 tail\n")
    sources.check_text_input(big)  # the head is clean
    with pytest.raises(UserError, match=r"late\.txt: line 1: a NUL character at character \d+: binary data or UTF-16"):
        list(sources.iter_documents(big))


def test_source_code_without_document_per_file_says_so(tmp_path, capsys):
    (tmp_path / "m.py").write_text("import os\n\n\ndef f():\n    return os.sep\n")
    assert main(["concepts", "chunk", str(tmp_path / "m.py"), "--out", str(tmp_path / "c")]) == 2
    assert "m.py: .py is source code; pass --document-per-file" in capsys.readouterr().err
    assert main(["concepts", "chunk", str(tmp_path / "m.py"), "--document-per-file", "--out", str(tmp_path / "c")]) == 0
    import json

    (doc,) = [json.loads(x) for x in (tmp_path / "c/chunks/00000.jsonl").read_text().splitlines()]
    assert "".join(c["text"] for c in doc["chunks"]) == (tmp_path / "m.py").read_text()  # blank lines kept


def test_crlf_text_keeps_its_line_breaks(tmp_path):
    from interpscale.data.sources import iter_documents

    f = tmp_path / "w.txt"
    f.write_bytes(b"One line.\r\nTwo lines.\r\n\r\nNext doc.\r\n")
    assert [d.chunks[0][0] for d in iter_documents(f)] == ["One line.\r\nTwo lines.", "Next doc."]
    assert [d.chunks[0][0] for d in iter_documents(f, document_per_file=True)] == [f.read_bytes().decode()]


def test_a_missing_prepared_data_path_is_named_as_missing(tmp_path):
    from interpscale.data.loaders import prepare_data, resolve_data_paths
    from interpscale.errors import UserError

    src = resolve_data_paths({"kind": "prepared", "path": "data/corpus"}, tmp_path / "presets")
    with pytest.raises(UserError, match=rf"prepared data directory {tmp_path / 'presets/data/corpus'} does not "
                                        rf"exist \(a \[data\] path relative to a preset resolves against the "
                                        rf"preset's directory\)"):
        prepare_data(src, tmp_path / "cache", seq_len=16)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="not prepared data of this version"):
        prepare_data({"kind": "prepared", "path": str(tmp_path / "empty")}, tmp_path / "cache", seq_len=16)


def test_a_replicate_seed_trains_on_the_same_prepared_data(tmp_path):
    """The adaptive sweep's replicates change the training seed, not the validation split:
    ``split_seed`` in the source keys the split, so both find one prepared directory."""
    from interpscale.data.loaders import prepare_data

    (tmp_path / "t.txt").write_text("\n\n".join(f"Document {i} says something about topic {i % 7}." for i in range(60)))
    src = {"kind": "text", "path": str(tmp_path / "t.txt")}
    first = prepare_data(src, tmp_path / "cache", seq_len=16, vocab_size=300, val_fraction=0.2, seed=0)
    again = prepare_data({**src, "split_seed": 0}, tmp_path / "cache", seq_len=16, vocab_size=300, val_fraction=0.2,
                         seed=1)
    other = prepare_data(src, tmp_path / "cache", seq_len=16, vocab_size=300, val_fraction=0.2, seed=1)
    assert again == first and other != first
