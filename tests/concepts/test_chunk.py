"""Stage 0: sentence-boundary chunking up to the domain's token threshold (§4.2.1)."""

from __future__ import annotations

import json

import pytest

from interpscale.concepts import chunk_corpus, chunk_text
from interpscale.concepts.text import guess_domain, split_sentences


def words(texts):  # a token counter: one token per whitespace-separated word
    return [len(t.split()) for t in texts]


def sentence(n: int, w: str = "word") -> str:
    return " ".join([w] * (n - 1) + [w + "."])


def test_sentences_are_packed_up_to_the_threshold_and_never_split():
    text = " ".join(sentence(40) for _ in range(10))  # 400 tokens in 40-token sentences
    chunks, total, dropped = chunk_text(text, words, domain="prose")
    assert total == 400 and dropped == 0
    assert [len(c.split()) for c in chunks] == [120, 120, 120, 40]  # 150 prose: three sentences fit, a fourth does not
    code = "\n".join(sentence(40) for _ in range(10))  # code and maths: a statement per line, 256 tokens
    chunks, _, _ = chunk_text(code, words, domain="code")
    assert [len(c.split()) for c in chunks] == [240, 160] and chunks[0].count("\n") == 6  # a line keeps its break
    assert "".join(chunks) == code
    long = sentence(40) + " " + sentence(300) + " " + sentence(40)
    chunks, _, _ = chunk_text(long, words, domain="prose")
    assert [len(c.split()) for c in chunks] == [40, 300, 40]  # a sentence over the threshold stays one chunk


def test_a_sentence_over_the_limit_is_kept_unless_dropping_is_asked_for():
    text = sentence(10) + " " + sentence(60) + " " + sentence(10)
    chunks, total, dropped = chunk_text(text, words, domain="prose")
    assert dropped == 0 and total == 80 and "".join(chunks) == text  # by default nothing is dropped
    chunks, total, dropped = chunk_text(text, words, domain="prose", drop_over=50)  # the paper's rule, opt-in
    assert dropped == 1 and total == 20 and [len(c.split()) for c in chunks] == [20]


def test_domains():
    code = "def f(x):\n    y = x + 1;\n    return y;\n\nfor (i = 0; i < n; i++) {\n  s += i;\n}\n"
    assert guess_domain(code) == "code"
    assert guess_domain(r"Let $x = 2$ and $y = 3$; then $\frac{x}{y} = 0.66$ since x = 2.") == "maths"
    assert guess_domain("The ship left the harbour. It rained.") == "prose"
    assert split_sentences("One. Two!  Three?\n\nFour") == ["One. ", "Two!  ", "Three?\n\n", "Four"]
    lines = split_sentences(code, "code")  # a statement per line, a blank line with the line above
    assert len(lines) == 6 and lines[2] == "    return y;\n\n" and "".join(lines) == code


def test_chunk_corpus_streams_files_keeps_given_chunks_and_counts(tmp_path):
    docs = tmp_path / "docs.jsonl"
    long = " ".join(sentence(30, "alpha") for _ in range(12))  # 360 words of prose
    docs.write_text(json.dumps({"text": long}) + "\n"
                    + json.dumps({"chunks": [{"text": "kept one."}, {"text": "kept two."}]}) + "\n")
    books = tmp_path / "b.txt"
    books.write_text("First doc. It is short.\n\nSecond doc here.\n")
    man = chunk_corpus([docs, books], tmp_path / "out")
    assert [f["docs"] for f in man["files"]] == [2, 2] and man["files"][0]["kept_docs"] == 1
    lines = [json.loads(x) for x in (tmp_path / "out/chunks/00000.jsonl").read_text().splitlines()]
    assert [c["text"] for c in lines[1]["chunks"]] == ["kept one.", "kept two."]
    assert len(lines[0]["chunks"]) >= 3  # 360 words are more than two 150-token chunks in any tokenizer
    assert "".join(c["text"] for c in lines[0]["chunks"]) == long  # the chunks concatenate to the document
    assert (tmp_path / "out/tokenizer.json").exists()  # the sizes can be recounted
    assert man["totals"]["chunks"] == sum(f["chunks"] for f in man["files"])


def test_chunk_bad_input(tmp_path):
    from interpscale.errors import UserError

    with pytest.raises(ValueError, match="no input file matches"):
        chunk_corpus([tmp_path / "missing-*.jsonl"], tmp_path / "out")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine."}\n{"nope": 1}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl: line 2"):
        chunk_corpus([bad], tmp_path / "out")
    with pytest.raises(UserError, match="unknown domain"):
        chunk_corpus([bad], tmp_path / "out", domain="poetry")
