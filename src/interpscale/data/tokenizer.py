"""Tokenizers for prepared data: a trained BPE, or a Hugging Face ``tokenizer.json`` through
``load_tokenizer``, the one loader; our four special tokens are in every one (``special_ids``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterable

from interpscale.errors import UserError
from interpscale.models.types import SPECIAL_TEXT, SPECIAL_TOKENS

log = logging.getLogger(__name__)

# a byte-level vocabulary holds all 256 bytes and the specials before any merge
BYTE_LEVEL_MIN_VOCAB = 256 + len(SPECIAL_TOKENS) + 28


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512, byte_level: bool | None = None):
    """A BPE trained on ``texts``, [PAD] [EOS] [EOC] [MASK] at ids 0..3.  ``byte_level`` (default:
    when ``vocab_size >= BYTE_LEVEL_MIN_VOCAB``): GPT-2 style, all 256 bytes in the vocabulary, so
    no character is ever dropped; else character-level over the characters of ``texts`` (right
    for a closed alphabet like the synthetic corpus and for toy vocabularies; unseen ones drop)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size <= len(SPECIAL_TOKENS) + 16:
        raise UserError(f"vocab_size must exceed {len(SPECIAL_TOKENS) + 16}, got {vocab_size}")
    auto = byte_level is None
    byte_level = vocab_size >= BYTE_LEVEL_MIN_VOCAB if auto else byte_level
    if byte_level and vocab_size < BYTE_LEVEL_MIN_VOCAB:
        raise UserError(f"a byte-level BPE needs vocab_size >= {BYTE_LEVEL_MIN_VOCAB}, got {vocab_size}")
    tok = Tokenizer(models.BPE(unk_token=None))
    if byte_level:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        (log.warning if auto else log.info)("vocab_size=%d < %d cannot hold the byte alphabet: character-level BPE, "
                                            "characters unseen in the tokenizer sample will be dropped",
                                            vocab_size, BYTE_LEVEL_MIN_VOCAB)
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        alphabet = []
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    for i, s in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(s) != i:
            raise RuntimeError(f"tokenizer put {s} at id {tok.token_to_id(s)}, expected {i}")
    return tok


def load_tokenizer(path: str | os.PathLike, *, add_specials: bool = True):
    """A Hugging Face ``tokenizer.json``, with our special tokens added where missing
    (``add_specials=False``: as the file has it).  A tokenizer object passes through."""
    from tokenizers import AddedToken, Tokenizer

    if not isinstance(path, (str, os.PathLike)):
        return path
    if not Path(path).is_file():
        raise UserError(f"no tokenizer at {path} (a Hugging Face tokenizer.json)")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on a malformed file
        raise UserError(f"{path}: not a Hugging Face tokenizer.json ({exc})") from None
    missing = [s for s in SPECIAL_TOKENS if tok.token_to_id(s) is None] if add_specials else []
    if missing:
        tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in missing])
        log.info("%s: added special token(s) %s", path, missing)
    return tok


def special_ids(tok) -> dict[str, int]:
    """``{"pad": id, "eos": id, "eoc": id, "mask": id}`` of a tokenizer."""
    ids = {name: tok.token_to_id(text) for name, text in SPECIAL_TEXT.items()}
    bad = [SPECIAL_TEXT[k] for k, v in ids.items() if v is None]
    if bad:
        raise UserError(f"tokenizer lacks special token(s) {bad}")
    if len(set(ids.values())) != len(ids):
        raise UserError(f"special tokens share ids: {ids}")
    return ids


def encode_texts(tok, texts: list[str]) -> list[list[int]]:
    """Token ids of each text, with special-token text in the input encoded as plain text
    (a literal "[EOC]" in a document must never become the chunk delimiter)."""
    tok.encode_special_tokens = True
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    return [e.ids for e in encode(texts, add_special_tokens=False)]
