"""Small helpers shared by the metric modules: model introspection, eval mode, input checks."""

from __future__ import annotations

import contextlib
import itertools
import zlib
from typing import Iterable, Iterator

import torch
from torch import nn

from interpscale.models.types import SPECIAL_IDS, Batch, ModelOutput, evaluating
from interpscale.errors import UserError


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (or buffer); CPU for a model with neither."""
    return next((t.device for t in itertools.chain(model.parameters(), model.buffers())), torch.device("cpu"))


def family_name(model: nn.Module) -> str:
    return str(getattr(getattr(model, "config", None), "family", type(model).__name__))


def is_diffusion(model: nn.Module) -> bool:
    """A registry fact, read off the model's family (a model outside any family: its own flag)."""
    from interpscale.models.registry import FAMILIES

    family = getattr(getattr(model, "config", None), "family", None)
    if isinstance(family, str) and family in FAMILIES:
        return FAMILIES[family].is_diffusion
    return bool(getattr(model, "is_diffusion", False))


def special_id(model: nn.Module, name: str) -> int:
    """The model's ``pad_id`` / ``eos_id`` / ``eoc_id`` / ``mask_id`` from its config (a pretrained
    tokenizer puts them anywhere), else the built-in id."""
    value = getattr(getattr(model, "config", None), name, None)
    return SPECIAL_IDS[name.removesuffix("_id")] if value is None else int(value)


def special_ids(model: nn.Module) -> frozenset[int]:
    """All of the model's special token ids (never words a judge can read)."""
    return frozenset(special_id(model, n) for n in ("pad_id", "eos_id", "eoc_id", "mask_id"))


def block_size(model: nn.Module, default: int = 64) -> int:
    return int(getattr(getattr(model, "config", None), "block_size", None) or default)


def generate_text(model: nn.Module, tokenizer, ids: list[int], n_new: int, max_len: int, **options) -> str:
    """``model.generate``'s ``n_new`` tokens after ``ids`` (cut to leave them room in ``max_len``),
    up to the model's EOS, decoded (special tokens skipped)."""
    ids = ids[-(max_len - n_new):]
    with torch.no_grad():
        out = model.generate(torch.tensor([ids], device=model_device(model)), n_new, **options)
    new, eos = out[0, len(ids):].tolist(), special_id(model, "eos_id")
    return tokenizer.decode(new[: new.index(eos)] if eos in new else new, skip_special_tokens=True)


def logits_of(out: ModelOutput | torch.Tensor) -> torch.Tensor:
    return out if isinstance(out, torch.Tensor) else out.logits


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Inference mode with dropout off; restores the caller's train/eval state."""
    with evaluating(model), torch.inference_mode():
        yield


def require_family(model: nn.Module, *, diffusion: bool, what: str) -> None:
    """Raise if ``what`` (an estimator / metric name) does not fit the model's family."""
    if is_diffusion(model) != diffusion:  # then the model's own family is the other kind
        need = "a diffusion (CDLM-style) model" if diffusion else "an autoregressive model"
        raise UserError(f"{what!r} needs {need}, but the model's family is {family_name(model)!r} "
                        f"(is_diffusion={not diffusion}); pick an estimator for its family "
                        f"({'ar_ce' if diffusion else 'mdlm_elbo, fixed_rate, fixed_grid, per_block'})")


def checked_batches(batches: Iterable[Batch], *, mask_id: int | None = None) -> list[Batch]:
    """Materialise ``batches`` (once) and validate them; raise on an empty validation set."""
    out = list(batches)
    if not out:
        raise ValueError("validation set is empty: `batches` yielded no Batch")
    for i, b in enumerate(out):
        if not isinstance(b, Batch):
            raise ValueError(f"batch {i}: expected interpscale.models.types.Batch, got {type(b).__name__}")
        if b.tokens.dim() != 2 or b.tokens.numel() == 0:
            raise ValueError(f"batch {i}: tokens must be a non-empty [B, T] tensor, got shape {tuple(b.tokens.shape)}")
        if b.valid is not None and b.valid.shape != b.tokens.shape:
            raise ValueError(f"batch {i}: valid has shape {tuple(b.valid.shape)}, tokens {tuple(b.tokens.shape)}")
        if mask_id is not None and bool((b.tokens == mask_id).any()):
            raise ValueError(f"batch {i}: clean validation tokens contain the [MASK] id {mask_id}")
    if sum(b.n_tokens for b in out) == 0:
        raise UserError("validation set is empty: every token is marked invalid (padding)")
    return out


def valid_mask(batch: Batch) -> torch.Tensor:
    return torch.ones_like(batch.tokens, dtype=torch.bool) if batch.valid is None else batch.valid.bool()


def seeded_generator(device: torch.device, seed: int, name: str) -> torch.Generator:
    """A generator on ``device`` seeded from (seed, name): one reproducible stream per estimator."""
    g = torch.Generator(device=device)
    g.manual_seed((int(seed) * 1_000_003 + zlib.crc32(name.encode())) % (2**63))
    return g
