"""Atomic file writes: a temp file in the destination's directory, then ``os.replace`` (a reader
never sees a half-written file, a killed writer leaves the previous one intact). A bottom
module: it imports nothing from interpscale."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_path(path: str | os.PathLike, *, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temp path next to ``path``; on clean exit it replaces ``path`` (mode 0644).
    ``suffix`` matters to writers that infer the format from the name (``savefig``)."""
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are meant to be shared
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)
