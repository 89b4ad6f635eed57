"""Model-side pieces of replacing one MLP (a block's ``.mlp``) by a sparse layer (MxD paper §3.1,
App. B; docs/zoo.md): find, hook and capture the MLP, build a parameter-matched layer. The loops
live above the models (``orchestration.replacement``, ``metrics.replacement``)."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Iterator

import torch
import torch.nn as nn

from interpscale.models.protocol import find_blocks as protocol_blocks
from interpscale.models.types import Batch
from interpscale.models.zoo.mxd import MxD, SparseKind, TopKSAE, TopKTranscoder, mxd_expert_count

Kind = SparseKind


def find_blocks(model: nn.Module) -> list[nn.Module]:
    """The model protocol's blocks (``protocol.find_blocks``); a ValueError when there are none."""
    blocks = protocol_blocks(model)
    if not blocks:
        raise ValueError(f"{type(model).__name__} exposes no transformer blocks (.blocks / .backbone.blocks)")
    return blocks


def find_mlp(model: nn.Module, layer: int) -> nn.Module:
    blocks = find_blocks(model)
    if not 0 <= layer < len(blocks):
        raise ValueError(f"layer {layer} out of range [0, {len(blocks)})")
    mlp = getattr(blocks[layer], "mlp", None)
    if mlp is None:
        raise ValueError(f"block {layer} of {type(model).__name__} has no .mlp")
    return mlp


def mlp_dims(mlp: nn.Module) -> tuple[int, int, bool]:
    """(d_model, hidden width H, is_glu) of a GPT-2 MLP or a SwiGLU."""
    if hasattr(mlp, "up") and hasattr(mlp, "gate"):
        return mlp.up.in_features, mlp.up.out_features, True
    if hasattr(mlp, "fc"):
        return mlp.fc.in_features, mlp.fc.out_features, False
    raise ValueError(f"cannot read the dimensions of MLP {type(mlp).__name__}")


@contextlib.contextmanager
def override_output(module: nn.Module, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """While active, ``module``'s output becomes ``fn(input, output)``."""
    handle = module.register_forward_hook(lambda _m, inp, out: fn(inp[0], out))
    try:
        yield
    finally:
        handle.remove()


@torch.no_grad()
def capture_io(model: nn.Module, module: nn.Module, batches: Iterable[Batch]) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and outputs of ``module`` over ``batches``, flattened to [n_tokens, ·]."""
    xs, ys = [], []

    def keep(inp, out):
        xs.append(inp.reshape(-1, inp.size(-1)).clone())
        ys.append(out.reshape(-1, out.size(-1)).clone())
        return out

    with override_output(module, keep):
        for b in batches:
            model(b.tokens)
    if not xs:
        raise ValueError("no batches given")
    return torch.cat(xs), torch.cat(ys)


def normalised_loss(y: torch.Tensor, y_hat: torch.Tensor) -> torch.Tensor:
    """Training loss of the MxD code: mean over tokens of ‖y − ŷ‖² / ‖y‖₂."""
    return ((y - y_hat).pow(2).sum(-1) / y.norm(dim=-1).clamp_min(1e-8)).mean()


def make_sparse_layer(kind: Kind, d: int, hidden: int, *, k: int, tc_width: int, glu: bool = False) -> nn.Module:
    """A ``kind`` layer parameter-matched to a TopK transcoder of width ``tc_width``."""
    if kind == "mxd":
        return MxD(d, d, hidden, mxd_expert_count(d, d, hidden, tc_width, glu=glu), k, glu=glu)
    if kind in ("transcoder", "skip_transcoder"):
        return TopKTranscoder(d, d, tc_width, k, skip=kind == "skip_transcoder")
    if kind == "sae":
        return TopKSAE(d, tc_width, k)
    raise ValueError(f"unknown sparse layer kind {kind!r}; use mxd, transcoder, skip_transcoder or sae")
