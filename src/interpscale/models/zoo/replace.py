"""Train a sparse layer (MxD, TopK transcoder, skip transcoder, TopK SAE) to replace one MLP
of a zoo model, then splice it in and measure what the MxD paper reports (§3.1, App. B):
normalised MSE, next-token CE with the layer swapped in next to the base and zero-ablation
CE, L0, dead fraction (firing frequency < 1e-8) and normalised expert rank.

Works on any zoo model whose blocks are reachable as ``model.blocks`` or
``model.backbone.blocks`` and have an ``.mlp`` submodule (GPT-2 ``GPT2MLP``, Steerling
``SwiGLU``); a SwiGLU base gets the Swish-GLU MxD variant.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Iterator, Literal, Optional

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from interpscale.models.types import Batch
from interpscale.models.zoo.common import next_token_ce
from interpscale.models.zoo.mxd import MxD, SparseOut, TopKSAE, TopKTranscoder, mxd_expert_count, n_params

log = logging.getLogger(__name__)
Kind = Literal["mxd", "transcoder", "skip_transcoder", "sae"]


def find_blocks(model: nn.Module) -> nn.ModuleList:
    for owner in (model, getattr(model, "backbone", None)):
        blocks = getattr(owner, "blocks", None)
        if isinstance(blocks, nn.ModuleList):
            return blocks
    raise ValueError(f"{type(model).__name__} exposes no .blocks / .backbone.blocks ModuleList")


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


@dataclass(frozen=True)
class ReplacementReport:
    kind: str
    layer: int
    k: int
    n_units: int
    n_params: int
    nmse: float  # mean over tokens of ‖y − ŷ‖² / ‖y‖²
    ce_base: float
    ce_swapped: float
    ce_zero_ablation: float
    l0: float
    dead_fraction: float
    expert_rank: Optional[float]  # MxD only

    @property
    def ce_recovered(self) -> float:
        """Fraction of the zero-ablation CE gap the sparse layer closes."""
        gap = self.ce_zero_ablation - self.ce_base
        return (self.ce_zero_ablation - self.ce_swapped) / gap if gap else float("nan")

    def to_dict(self) -> dict:
        return asdict(self) | {"ce_recovered": self.ce_recovered}


@torch.no_grad()
def evaluate_replacement(model: nn.Module, layer: int, sparse: nn.Module, batches: list[Batch]) -> ReplacementReport:
    mlp = find_mlp(model, layer)
    is_sae = getattr(sparse, "kind", "") == "sae"
    run = (lambda x, y: sparse(y)) if is_sae else (lambda x, y: sparse(x))
    err, n_tok, l0, fired = 0.0, 0, 0.0, None
    ce = {"base": [], "swap": [], "zero": []}

    def swap(x, y):
        nonlocal err, n_tok, l0, fired
        out: SparseOut = run(x, y)
        err += float(((y - out.y_hat).pow(2).sum(-1) / y.pow(2).sum(-1).clamp_min(1e-12)).sum())
        codes = out.codes.reshape(-1, out.codes.size(-1))
        n_tok += codes.size(0)
        l0 += float((codes > 0).sum())
        f = (codes > 0).sum(0)
        fired = f if fired is None else fired + f
        return out.y_hat

    for b in batches:
        ce["base"].append(float(next_token_ce(model(b.tokens).logits, b.tokens, b.valid)[0]))
        with override_output(mlp, swap):
            ce["swap"].append(float(next_token_ce(model(b.tokens).logits, b.tokens, b.valid)[0]))
        with override_output(mlp, lambda x, y: torch.zeros_like(y)):
            ce["zero"].append(float(next_token_ce(model(b.tokens).logits, b.tokens, b.valid)[0]))
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    freq = fired.float() / n_tok
    return ReplacementReport(
        kind=getattr(sparse, "kind", type(sparse).__name__), layer=layer, k=sparse.k,
        n_units=int(freq.numel()), n_params=n_params(sparse), nmse=err / n_tok,
        ce_base=mean(ce["base"]), ce_swapped=mean(ce["swap"]), ce_zero_ablation=mean(ce["zero"]),
        l0=l0 / n_tok, dead_fraction=float((freq < 1e-8).float().mean()),
        expert_rank=sparse.normalised_expert_rank() if isinstance(sparse, MxD) else None,
    )


def make_sparse_layer(kind: Kind, d: int, hidden: int, *, k: int, tc_width: int, glu: bool = False) -> nn.Module:
    """A ``kind`` layer parameter-matched to a TopK transcoder of width ``tc_width``."""
    if kind == "mxd":
        return MxD(d, d, hidden, mxd_expert_count(d, d, hidden, tc_width, glu=glu), k, glu=glu)
    if kind in ("transcoder", "skip_transcoder"):
        return TopKTranscoder(d, d, tc_width, k, skip=kind == "skip_transcoder")
    if kind == "sae":
        return TopKSAE(d, tc_width, k)
    raise ValueError(f"unknown sparse layer kind {kind!r}; use mxd, transcoder, skip_transcoder or sae")


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
