"""Regenerate the real-text fixture from the Python documentation that ships with CPython.

``python tests/data/realtext/make_realtext.py`` writes, next to this file:

- ``python-docs.jsonl``: one document per section of the ``pydoc_data.topics`` help texts
  (a section runs from one underlined heading to the next), each as chunks of whole
  paragraphs merged up to ``CHUNK_CHARS`` characters, in the concept-labelled JSONL format
  ``interpscale data prepare --concepts`` reads;
- ``concepts.json``: the eight hand-written concept cards below.

Labels are hand-made rules: a chunk carries a concept when at least ``MIN_HITS`` of that
concept's hand-picked keywords occur in it (whole words, any case).  Topics are taken in
sorted order, skipping the few very long ones, until ``BUDGET`` characters of text.
Deterministic for a given Python version (the text differs between releases; the
committed files came from the version in PROVENANCE.md).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pydoc_data.topics

HERE = Path(__file__).resolve().parent
BUDGET = 200_000  # characters of text in all
MAX_TOPIC = 12_000  # longer topics (the data model, string methods, ...) are left out for breadth
CHUNK_CHARS = 700  # paragraphs are merged into chunks of about this size (~150 BPE tokens)
MIN_HITS = 2

# label, description, keywords (whole words, lower case): written by hand
CONCEPTS = [
    ("exceptions", "Raising, catching and cleaning up after errors.",
     ["exception", "exceptions", "raise", "raised", "except", "finally", "traceback", "error", "errors"]),
    ("classes", "Classes, instances, inheritance and special methods.",
     ["class", "classes", "instance", "instances", "inheritance", "subclass", "metaclass", "self", "method",
      "methods"]),
    ("functions", "Defining and calling functions: parameters, arguments, return values.",
     ["function", "functions", "def", "lambda", "argument", "arguments", "parameter", "parameters", "keyword",
      "decorator"]),
    ("loops", "Iteration: for and while loops, iterators and generators.",
     ["loop", "loops", "break", "continue", "iterator", "iterators", "iterable", "iteration", "generator",
      "generators", "yield", "range"]),
    ("strings", "Text: string literals, formatting and characters.",
     ["string", "strings", "str", "character", "characters", "unicode", "format", "literal", "literals",
      "bytes"]),
    ("numbers", "Integers, floating point and complex numbers and arithmetic on them.",
     ["integer", "integers", "int", "float", "floating", "complex", "numeric", "arithmetic", "division",
      "number", "numbers"]),
    ("modules", "Modules, packages, imports and namespaces.",
     ["module", "modules", "import", "imported", "package", "packages", "namespace", "global", "globals"]),
    ("containers", "Sequences and mappings: lists, tuples, dictionaries and sets.",
     ["list", "lists", "tuple", "tuples", "dict", "dictionary", "dictionaries", "sets", "sequence",
      "sequences", "mapping", "slice", "slicing", "append"]),
]
_HEADING = re.compile(r"^[*=\-~^]{3,}$")


def sections(text: str) -> list[list[str]]:
    """The paragraphs of each section (a heading line underlined by * = - ~ ^ starts one)."""
    lines = text.splitlines()
    out: list[list[str]] = [[]]
    para: list[str] = []

    def close():
        if para and "".join(para).strip():
            out[-1].append("\n".join(para).strip("\n"))
        para.clear()

    for i, line in enumerate(lines):
        if _HEADING.match(line.strip()) and para and len(para) == 1:  # the title just read
            title = para[0]
            para.clear()
            if out[-1]:
                out.append([])
            para.append(title)
            close()
        elif _HEADING.match(line.strip()):
            continue
        elif not line.strip():
            close()
        else:
            para.append(line)
    close()
    return [s for s in out if s]


def chunks(paragraphs: list[str]) -> list[str]:
    """Whole paragraphs merged up to about CHUNK_CHARS characters (a longer one stays whole)."""
    out, cur = [], ""
    for p in paragraphs:
        if cur and len(cur) + len(p) > CHUNK_CHARS:
            out.append(cur)
            cur = ""
        cur = f"{cur}\n\n{p}" if cur else p
    if cur:
        out.append(cur)
    return out


def labels(text: str) -> list[str]:
    words = re.findall(r"[a-z_]+", text.lower())
    return [label for label, _, keys in CONCEPTS if sum(w in keys for w in words) >= MIN_HITS]


def main() -> None:
    docs, used = [], 0
    for name in sorted(pydoc_data.topics.topics):
        text = pydoc_data.topics.topics[name]
        if len(text) > MAX_TOPIC:
            continue
        if used >= BUDGET:
            break
        used += len(text)
        for k, paragraphs in enumerate(sections(text)):
            docs.append({"topic": name, "section": k,
                         "chunks": [{"text": c, "concepts": labels(c)} for c in chunks(paragraphs)]})
    with open(HERE / "python-docs.jsonl", "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    cards = [{"label": label, "description": desc, "words": keys[:6]} for label, desc, keys in CONCEPTS]
    (HERE / "concepts.json").write_text(json.dumps(cards, indent=1) + "\n", encoding="utf-8")
    n_chunks = sum(len(d["chunks"]) for d in docs)
    print(f"Python {sys.version.split()[0]}: {len(docs)} documents, {n_chunks} chunks, {used:,} characters")


if __name__ == "__main__":
    main()
