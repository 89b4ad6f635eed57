"""Issue 37.1, the text invariant: chunking never changes a character of a document — its
chunks concatenate to it exactly — for every domain and chunk size, on hostile generated text
(Hypothesis) and on the running interpreter's own standard library (generated here, not
committed)."""

from __future__ import annotations

import json
import random
import sysconfig
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interpscale.concepts import chunk_corpus, chunk_text
from interpscale.concepts.text import DOMAINS, domain_of_path, split_sentences

# brackets and quotes after . ? ! …, abbreviations, unicode, CRLF, tabs, blank-line runs, code
HOSTILE = ["Prices rose (as expected...) and fell.", 'We said "Go." and left.', "(sure.)", "[ok?]", "“Yes!”",
           "‘No…’", "Dr. Smith", "e.g. this", "U.S.A.", "at 3 p.m. on Jan. 5.", "Mr. Jones", "i.e.", "...", "…",
           ".", "?", "!", ")", "]", "}", '"', "'", "»", "é", "日本語。", "Ünïcödé", "🙂", "\u00a0", "\u2028", "\x0b",
           "\x0c", " ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", "\n\n\n\n", " \n \t\n", "def f(x):\n    return x\n",
           "    if x:\n\n        pass\n", "};", "{", "$x = 2$", r"\frac{a}{b}", "word", "The", "end"]
texts = st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=6)), max_size=40).map("".join)


def words(pieces):  # a token counter: one token per whitespace-separated word
    return [len(p.split()) for p in pieces]


def chars(pieces):  # a finer one: every character a token
    return [len(p) for p in pieces]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_hostile_text_round_trips_for_every_domain_and_chunk_size(text):
    for domain in DOMAINS:
        pieces = split_sentences(text, domain)
        assert "".join(pieces) == text and all(pieces)
        for count in (words, chars):
            for threshold in (1, 3, 16, 150, 10_000):
                chunks, _, dropped = chunk_text(text, count, domain=domain, threshold=threshold)
                assert dropped == 0 and "".join(chunks) == text and all(chunks), (domain, threshold)
    guessed, _, _ = chunk_text(text, words)  # the domain guessed from the text
    assert "".join(guessed) == text


def test_the_reported_cases_keep_their_brackets_quotes_and_line_breaks():
    text = ('Prices rose (as expected...) and fell sharply in the spring.\n'
            'We said "Go." and left the harbour at dawn with the crew.\n')
    for threshold in (1, 150):
        chunks, _, _ = chunk_text(text, words, domain="prose", threshold=threshold)
        assert "".join(chunks) == text
    one_each, _, _ = chunk_text(text, words, domain="prose", threshold=1)
    assert one_each[0] == "Prices rose (as expected...) and fell sharply in the spring.\n"  # a real splitter
    code = "import os\n\n\ndef f(x):\n\tif x:\r\n        return x\n\n\n# end\n"
    for threshold in (1, 2, 256):
        chunks, _, _ = chunk_text(code, words, domain="code", threshold=threshold)
        assert "".join(chunks) == code  # blank lines, tabs, CRLF and indentation kept


def _stdlib_sample(n_files: int | None, cap: int | None, seed: int = 0) -> list[Path]:
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    if not files:
        pytest.skip("this interpreter has no standard library sources")
    picked = files if n_files is None else sorted(random.Random(seed).sample(files, min(n_files, len(files))))
    return [f for f in picked if cap is None or f.stat().st_size <= cap]


def _round_trip(files: list[Path], out: Path, **options) -> tuple[int, int, int]:
    """(files changed, characters changed in length, newlines lost) of a chunked corpus."""
    man = chunk_corpus(files, out, **options)
    assert man["normalisation"] == {}  # nothing asked for, nothing recorded
    changed = chars_off = newlines_off = 0
    for f, rec in zip(files, man["files"]):
        docs = [json.loads(x) for x in (out / "chunks" / rec["output"]).read_text(encoding="utf-8").splitlines()]
        back = "".join(c["text"] for d in docs for c in d["chunks"])
        want = f.read_bytes().decode("utf-8")  # the bytes on disk: CRLF and the final newline count
        changed += back != want
        chars_off += abs(len(want) - len(back))
        newlines_off += want.count("\n") - back.count("\n")
    return changed, chars_off, newlines_off


def test_the_standard_library_round_trips_with_no_character_changed(tmp_path):
    """A sample of the interpreter's own Lib/*.py: whole-file documents, the domain from the
    extension (code), and the same files forced through the prose splitter."""
    files = _stdlib_sample(24, cap=40_000)
    assert len(files) >= 10 and all(domain_of_path(f) == "code" for f in files)
    assert _round_trip(files, tmp_path / "code", document_per_file=True) == (0, 0, 0)
    prose = files[:8]  # pysbd is the slow path: a few files
    assert _round_trip(prose, tmp_path / "prose", document_per_file=True, domain="prose",
                       tokenizer=tmp_path / "code" / "tokenizer.json") == (0, 0, 0)


@pytest.mark.slow
def test_the_whole_standard_library_round_trips_in_every_domain(tmp_path):
    files = _stdlib_sample(None, cap=None)
    assert _round_trip(files, tmp_path / "guess", document_per_file=True) == (0, 0, 0)
    tok = tmp_path / "guess" / "tokenizer.json"
    for domain in DOMAINS:
        assert _round_trip(files, tmp_path / domain, document_per_file=True, domain=domain, tokenizer=tok) == (0, 0, 0)


def test_concepts_build_document_per_file_labels_every_character(tmp_path, capsys):
    """`concepts build --document-per-file` on source files: the labelled chunks that `data
    prepare` trains on concatenate to each file exactly; the manifest records the mode."""
    from interpscale.cli import main

    files = [f for f in _stdlib_sample(40, cap=12_000, seed=1)][:8]
    assert main(["concepts", "build", *map(str, files), "--document-per-file", "--out", str(tmp_path / "c"),
                 "--sample", "100", "--n-validate", "10"]) == 0
    man = json.loads((tmp_path / "c/chunks/manifest.json").read_text())
    assert man["document_per_file"] is True and man["normalisation"] == {}
    for rec in man["files"]:
        docs = [json.loads(x) for x in (tmp_path / "c/labelled" / rec["output"]).read_text().splitlines()]
        assert "".join(c["text"] for d in docs for c in d["chunks"]) == Path(rec["input"]).read_bytes().decode()
