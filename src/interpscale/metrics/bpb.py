"""Bits per byte, a tokenizer-free scale: bpb = (nats/token) × tokens / (bytes × ln 2), ``tokens``
the positions the loss averages (``LossEstimate.n_tokens``), ``bytes`` the UTF-8 length of those
tokens decoded row by row (special tokens decode to nothing).  Families with different
tokenizers, and AR vs diffusion ELBO losses, then compare on one scale.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Iterable, Union

from interpscale.metrics.loss import scored_positions
from interpscale.models.types import Batch

Decoder = Union[Callable[[list[int]], str], Any]  # a callable ids -> text, or a tokenizer with .decode


def scored_bytes(batches: Iterable[Batch], decoder: Decoder, estimator: str) -> int:
    """UTF-8 bytes of the tokens whose loss ``estimator`` averages, decoded row by row."""
    if hasattr(decoder, "decode"):  # tokenizers.Tokenizer / transformers tokenizer
        decode = functools.partial(decoder.decode, skip_special_tokens=True)
    elif callable(decoder):
        decode = decoder
    else:
        raise ValueError(f"decoder must be a tokenizer with .decode or a callable ids -> text, "
                         f"got {type(decoder).__name__}")
    n = 0
    for batch in batches:
        keep = scored_positions(batch, estimator).cpu()
        for row, mask in zip(batch.tokens.cpu(), keep):
            n += len(decode(row[mask].tolist()).encode("utf-8"))
    return n


def bits_per_byte(nats_per_token: float, n_tokens: int, n_bytes: int) -> float:
    """(nats/token) × tokens / (bytes × ln 2); NaN when nothing decodes to text."""
    if n_bytes <= 0:
        return float("nan")
    return float(nats_per_token) * int(n_tokens) / (int(n_bytes) * math.log(2))
