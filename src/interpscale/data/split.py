"""The validation split: one rule for every corpus, whole documents only.

A document is held out when a keyed hash of its chunk texts falls below ``val_fraction``:
deterministic, independent of the order of documents and of other files, and exact
duplicates always land on the same side.  A document is never cut, so no document's
tokens reach both splits (a code file read with ``document_per_file`` is one document).
"""

from __future__ import annotations

import hashlib
from typing import Sequence


def is_validation(texts: Sequence[str], val_fraction: float, seed: int) -> bool:
    """A document is held out when a seeded BLAKE2b hash of its chunk texts, read as a
    number in [0, 1), is below ``val_fraction``."""
    if val_fraction <= 0:
        return False
    key = int(seed).to_bytes(8, "little", signed=True)
    data = "\x1e".join(texts).encode("utf-8", "surrogatepass") + b"\x1e"  # each text then a separator
    h = hashlib.blake2b(data, digest_size=8, key=key)
    return int.from_bytes(h.digest(), "little") / 2.0**64 < val_fraction
