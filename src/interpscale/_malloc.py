"""Let a training process keep the heap memory it frees (glibc), so big tensors skip page faults.

PyTorch's CPU allocator has no cache: every tensor is malloc'd and freed. glibc serves
allocations above its mmap threshold with fresh ``mmap`` pages, and gives the top of the
heap back to the kernel once more than the trim threshold is free. A training step that
allocates a [tokens, m] buffer (the stable-phase unknown head: 12.6 MB at 1,024 tokens and
m = 3,072) then page-faults through it on every step: about 2,600 faults and 14 ms of a
420 ms step in ``benchmarks/bench_models.py``. Raising both thresholds keeps that memory in
the process after the first step. Training workers call this once (``TrainJob``); it is a
no-op where glibc's ``mallopt`` is unavailable.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc <malloc.h>


def retain_freed_memory(threshold_bytes: int = 1 << 30) -> bool:
    """Serve allocations below ``threshold_bytes`` from the heap and never trim it below that
    much free memory. Returns True when glibc accepted both settings."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: nothing to tune
        return False
    ok = mallopt(_M_MMAP_THRESHOLD, int(threshold_bytes)) == 1 and mallopt(_M_TRIM_THRESHOLD, int(threshold_bytes)) == 1
    log.debug("mallopt thresholds %d bytes: %s", threshold_bytes, "set" if ok else "refused")
    return ok
