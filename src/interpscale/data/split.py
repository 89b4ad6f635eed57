"""The validation split, one rule for every corpus (``docs/data.md``, step 2): a keyed hash of a
whole document's chunk texts.
"""

from __future__ import annotations

import hashlib
from typing import Sequence


def is_validation(texts: Sequence[str], val_fraction: float, seed: int) -> bool:
    """A seeded BLAKE2b hash of the chunk texts, read as a number in [0, 1), < ``val_fraction``."""
    if val_fraction <= 0:
        return False
    key = int(seed).to_bytes(8, "little", signed=True)
    data = "\x1e".join(texts).encode("utf-8", "surrogatepass") + b"\x1e"  # each text then a separator
    h = hashlib.blake2b(data, digest_size=8, key=key)
    return int.from_bytes(h.digest(), "little") / 2.0**64 < val_fraction
