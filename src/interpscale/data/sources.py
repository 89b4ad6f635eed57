"""Streaming readers of user corpora, one document at a time, each tagged with where it came
from (file and line) for error messages.  A document is a list of ``(text, [concept label, ...])``
chunks; the formats are ``FORMATS_HELP`` (also the ``data prepare --help`` epilog).
"""

from __future__ import annotations

import codecs
import glob
import gzip
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from interpscale.errors import UserError

FORMATS = ("jsonl", "parquet", "text")
FORMATS_HELP = """\
input formats (by extension, .gz allowed; or --format):
  .jsonl  one document per line: {"chunks": [{"text": ..., "concepts": [label, ...]}, ...]}
          or {"text": ..., "concepts": [...]}  (concepts optional; also .json, .ndjson)
  .parquet  one chunk per row: column text, optional concepts (list or "a,b") and doc_id
          (consecutive rows with one doc_id are one document; without it a row is a document)
  .txt    plain text, documents separated by blank lines, no concepts (also .text, .md)
  --document-per-file: each file (any extension, e.g. source code) is one plain-text document,
          every character kept (blank lines, indentation, the final newline, CRLF)
text must be UTF-8: UTF-16 / UTF-32 (with or without a byte-order mark), NUL bytes and binary
files are refused before anything is written
"""
# source code and TeX by extension (before a .gz): whole-file documents; concept chunking reads their domain
CODE_EXTENSIONS = frozenset(
    ".py .pyi .pyx .c .h .cc .cpp .cxx .hpp .hh .cu .java .kt .scala .go .rs .rb .js .mjs .ts .tsx .jsx .php .pl "
    ".pm .sh .bash .zsh .ps1 .lua .r .jl .swift .m .mm .cs .fs .hs .ml .clj .ex .exs .erl .dart .sql .css .scss "
    ".html .htm .xml .toml .yaml .yml .ini .cfg .mk .cmake .gradle .vim .el .lisp .scm .asm .s .f90 .zig .nim "
    ".v .sv .vhd .proto .dockerfile".split())
MATHS_EXTENSIONS = frozenset(".tex .sty .bib .lean".split())

_EXT = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet",
        ".txt": "text", ".text": "text", ".md": "text"}


@dataclass
class RawDoc:
    chunks: list[tuple[str, list]]  # (text, labels): labels are str (user data) or int (synthetic)
    where: str  # "FILE: line N" / "FILE: row N" for error messages
    chunked: bool = False  # the input gave the chunks (JSONL "chunks", Parquet rows): concept chunking keeps them


def format_of(path: str | os.PathLike, fmt: str | None = None, document_per_file: bool = False) -> str:
    """The format of ``path``: ``fmt``, else by extension; only "text" with ``document_per_file``."""
    p = Path(path)
    ext = Path(p.stem).suffix if p.suffix == ".gz" else p.suffix
    if fmt and fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}; expected one of {FORMATS}")
    kind = fmt or _EXT.get(ext.lower(), "text" if document_per_file else None)
    if document_per_file and kind != "text":
        raise UserError(f"{path}: --document-per-file reads each file as one plain-text document, not {kind}")
    if kind is None:
        if ext.lower() in CODE_EXTENSIONS:
            raise UserError(f"{path}: {ext} is source code; pass --document-per-file (TOML: document_per_file "
                            f"= true) to read each file as one document")
        raise UserError(f"{path}: cannot tell the format from the extension {ext!r}; name it .jsonl, "
                        f".parquet or .txt (optionally .gz) or pass --format")
    return kind


SNIFF_BYTES = 1 << 20  # the head of each text input checked for UTF-8 before any work
_MAGIC = ((b"\x89PNG", "a PNG image"), (b"%PDF", "a PDF document"), (b"PK\x03\x04", "a ZIP archive"),
          (b"\x1f\x8b", "gzip-compressed data (name it .gz)"), (b"\x7fELF", "an ELF executable"),
          (b"PAR1", "a Parquet file (name it .parquet)"), (b"\xff\xd8\xff", "a JPEG image"))
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32-LE"), (b"\x00\x00\xfe\xff", "UTF-32-BE"), (b"\xff\xfe", "UTF-16-LE"),
         (b"\xfe\xff", "UTF-16-BE"))


def not_utf8(head: bytes, final: bool) -> str | None:
    """What ``head`` (the first bytes of a file; ``final``: all of it) is when it is not UTF-8
    text, else None."""
    for bom, name in _BOMS:
        if head.startswith(bom):
            return f"{name} text (byte-order mark {bom.hex(' ').upper()}), not UTF-8; convert it: iconv -f {name} -t UTF-8"
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return f"binary data ({name}), not text"
    nul = head.find(b"\0")
    if nul >= 0:
        even, odd = head[0::2], head[1::2]
        for name, zeros, other in (("UTF-16-LE", odd, even), ("UTF-16-BE", even, odd)):
            if zeros.count(0) > 0.9 * len(zeros) and other.count(0) < 0.1 * len(other):
                return (f"{name} text without a byte-order mark (every second byte is NUL), not UTF-8; "
                        f"convert it: iconv -f {name} -t UTF-8")
        return f"binary data, not text (a NUL byte at byte {nul})"
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=final)
    except UnicodeDecodeError as exc:
        bad = head[exc.start]
        return (f"not UTF-8 text (byte 0x{bad:02X} at byte {exc.start}: {exc.reason}); Latin-1 / cp1252 text? "
                f"convert it: iconv -f CP1252 -t UTF-8")
    return None


def check_text_input(path: str | os.PathLike) -> None:
    """Refuse a text input that is not UTF-8 (its first ``SNIFF_BYTES``), naming what it is; a
    pipe is not read ahead (that would consume it): its documents are checked as they stream."""
    path = Path(path)
    if not path.is_file():
        return
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as fh:
            head = fh.read(SNIFF_BYTES)
            final = not fh.read(1)
    except (OSError, EOFError) as exc:
        raise UserError(f"{path}: cannot read ({exc})") from None
    what = not_utf8(head, final)
    if what:
        raise UserError(f"{path}: {what}")


def check_inputs(paths, fmt: str | None = None, document_per_file: bool = False) -> None:
    """Every input's format, and UTF-8 text in each that is not Parquet, before any work."""
    for p in paths:
        if format_of(p, fmt, document_per_file) != "parquet":
            check_text_input(p)


def expand_sources(patterns, base_dir: str | os.PathLike | None = None) -> list[Path]:
    """Files named by paths / glob patterns (sorted within each pattern, in pattern order);
    relative ones resolve against ``base_dir``.  A pattern matching nothing is an error."""
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    out: list[Path] = []
    for pat in patterns:
        p = Path(base_dir or "") / os.path.expanduser(str(pat))  # an absolute path stays as it is
        hits = sorted(glob.glob(str(p), recursive=True)) if glob.has_magic(str(p)) else ([str(p)] if p.exists() else [])
        files = [Path(h) for h in hits if not Path(h).is_dir()]
        if not files:
            raise UserError(f"no input file matches {str(pat)!r}" + (f" (in {base_dir})" if base_dir else ""))
        out += [f for f in files if f not in out]
    return out


def _open_text(path: Path):
    """``path`` as UTF-8 text, line breaks as they are (CRLF stays CRLF)."""
    return (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8", newline="")


def _no_nul(text: str, where: str) -> str:
    if "\0" in text:
        raise UserError(f"{where}: a NUL character at character {text.index(chr(0))}: binary data or UTF-16 "
                        f"text, not UTF-8")
    return text


def labels_of(value, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [s.strip() for s in value.split(",") if s.strip()]
    if isinstance(value, (list, tuple, np.ndarray)):
        return [str(s) for s in value]
    raise UserError(f"{where}: 'concepts' must be a list of labels or a comma-separated string, got {value!r}")


def _jsonl_doc(rec, where: str) -> list[tuple[str, list]]:
    if not isinstance(rec, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    if "chunks" in rec:
        chunks = rec["chunks"]
        if not isinstance(chunks, list) or not chunks:
            raise UserError(f"{where}: 'chunks' must be a non-empty list")
        doc = []
        for j, ch in enumerate(chunks):
            if not isinstance(ch, dict) or not isinstance(ch.get("text"), str):
                raise UserError(f"{where}, chunk {j}: needs a string 'text'")
            doc.append((ch["text"], labels_of(ch.get("concepts"), f"{where}, chunk {j}")))
        return doc
    if isinstance(rec.get("text"), str):
        return [(rec["text"], labels_of(rec.get("concepts"), where))]
    raise UserError(f"{where} has neither 'chunks' nor a string 'text'")


def iter_jsonl_docs(path: Path) -> Iterator[RawDoc]:
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}: line {lineno}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{where} is not valid JSON ({exc.msg})") from None
            yield RawDoc(_jsonl_doc(rec, where), where, chunked="chunks" in rec)


def iter_text_docs(path: Path) -> Iterator[RawDoc]:
    """Documents separated by blank lines (the separator: the last line break and the blank
    lines after it), each named by its first line."""
    with _open_text(path) as fh:
        for blank, lines in itertools.groupby(enumerate(fh, 1), key=lambda x: not x[1].strip()):
            if not blank:
                lines = list(lines)
                where = f"{path}: line {lines[0][0]}"
                text = "".join(t for _, t in lines)
                text = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text
                yield RawDoc([(_no_nul(text, where), [])], where)


def iter_file_doc(path: Path) -> Iterator[RawDoc]:
    """The whole file, every character of it, as one document of one chunk."""
    with _open_text(path) as fh:
        text = fh.read()
    if text.strip():
        yield RawDoc([(_no_nul(text, str(path)), [])], f"{path}")


def iter_parquet_docs(path: Path, batch_rows: int = 8192) -> Iterator[RawDoc]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a non-parquet file
        raise UserError(f"{path}: not a readable Parquet file ({exc})") from None
    names = set(pf.schema_arrow.names)
    if "text" not in names:
        raise UserError(f"{path}: missing column(s) ['text']; need text[, concepts][, doc_id]")
    cols = [c for c in ("doc_id", "text", "concepts") if c in names]

    def rows() -> Iterator[tuple[object, str, tuple[str, list]]]:  # (document key, where, chunk)
        row = 0
        for rb in pf.iter_batches(batch_size=batch_rows, columns=cols):
            d = rb.to_pydict()
            for i, text in enumerate(d["text"]):
                here, row = f"{path}: row {row}", row + 1
                if not isinstance(text, str):
                    raise UserError(f"{here}: column 'text' must be a string, got {text!r}")
                key = d["doc_id"][i] if "doc_id" in d else object()  # no doc_id: every row a document
                yield key, here, (text, labels_of(d["concepts"][i] if "concepts" in d else None, here))

    for _, group in itertools.groupby(rows(), key=lambda r: r[0]):  # consecutive rows of one doc_id
        group = list(group)
        yield RawDoc([chunk for _, _, chunk in group], group[0][1], chunked=True)


def iter_documents(path: str | os.PathLike, fmt: str | None = None, *,
                   document_per_file: bool = False) -> Iterator[RawDoc]:
    """Documents of one input file, streamed; an empty file is an error naming it."""
    path = Path(path)
    kind = format_of(path, fmt, document_per_file)
    reader = iter_file_doc if document_per_file else {
        "jsonl": iter_jsonl_docs, "parquet": iter_parquet_docs, "text": iter_text_docs}[kind]
    n = 0
    try:
        for doc in reader(path):
            n += 1
            yield doc
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except (OSError, EOFError) as exc:
        raise UserError(f"{path}: cannot read ({exc})") from None
    if n == 0:
        raise UserError(f"{path}: empty file (no documents)")
