"""Training loops that replace one MLP of a zoo model by a sparse layer (MxD paper §3.1,
App. D): fit the layer on the MLP's captured I/O, then measure it
(``metrics.replacement.evaluate_replacement``)."""

from __future__ import annotations

import logging
from typing import Optional

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from interpscale.metrics.replacement import ReplacementReport, evaluate_replacement
from interpscale.models.types import Batch
from interpscale.models.zoo.replace import Kind, capture_io, find_mlp, make_sparse_layer, mlp_dims, normalised_loss

log = logging.getLogger(__name__)


def fit_sparse_layer(
    layer: nn.Module, x: torch.Tensor, y: torch.Tensor, *, steps: int = 500, batch_size: int = 256,
    lr: float = 1e-3, warmup: int = 50, seed: int = 0, progress: bool = False,
) -> list[float]:
    """AdamW (wd 0) with linear warm-up on (x, y) pairs; the output bias starts at the mean
    target (MxD App. D). Returns the per-step loss."""
    if x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise ValueError(f"x and y must hold the same non-zero number of rows, got {x.shape[0]} and {y.shape[0]}")
    with torch.no_grad():
        bias = getattr(layer, "b_out", None) if getattr(layer, "b_out", None) is not None else getattr(layer, "b_dec", None)
        if bias is not None:
            bias.copy_(y.mean(0))
    opt = torch.optim.AdamW(layer.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, warmup)))
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in tqdm(range(steps), disable=not progress, desc="fit sparse layer"):
        idx = torch.randint(0, x.shape[0], (min(batch_size, x.shape[0]),), generator=gen)
        loss = normalised_loss(y[idx], layer(x[idx]).y_hat)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    return losses


def train_replacement(
    model: nn.Module, layer: int, kind: Kind, train_batches: list[Batch], eval_batches: list[Batch], *,
    k: int, tc_width: Optional[int] = None, steps: int = 500, batch_size: int = 256, lr: float = 1e-3,
    seed: int = 0, progress: bool = False,
) -> tuple[nn.Module, ReplacementReport]:
    """Capture layer ``layer``'s MLP I/O on ``train_batches``, fit a parameter-matched
    ``kind`` layer (default transcoder width 32·d, as in the paper) and evaluate it."""
    model.eval()
    mlp = find_mlp(model, layer)
    d, hidden, glu = mlp_dims(mlp)
    torch.manual_seed(seed)
    sparse = make_sparse_layer(kind, d, hidden, k=k, tc_width=tc_width or 32 * d, glu=glu)
    x, y = capture_io(model, mlp, train_batches)
    fit_sparse_layer(sparse, y if kind == "sae" else x, y, steps=steps, batch_size=batch_size, lr=lr, seed=seed, progress=progress)
    sparse.eval()
    report = evaluate_replacement(model, layer, sparse, eval_batches)
    log.info("replacement %s at layer %d: nmse=%.4f ce %.3f (base %.3f, zero %.3f)", kind, layer, report.nmse,
             report.ce_swapped, report.ce_base, report.ce_zero_ablation)
    return sparse, report
