"""What the MxD paper measures of a sparse layer spliced in for one MLP (§3.1, App. B):
normalised MSE, next-token CE with the layer swapped in next to the base and zero-ablation
CE, L0, dead fraction (firing frequency < 1e-8) and normalised expert rank."""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Optional

import torch
import torch.nn as nn

from interpscale.models.types import Batch
from interpscale.models.zoo.common import next_token_ce
from interpscale.models.zoo.mxd import MxD, SparseOut, n_params
from interpscale.models.zoo.replace import find_mlp, override_output


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
    run = (lambda x, y: sparse(y)) if getattr(sparse, "kind", "") == "sae" else (lambda x, y: sparse(x))
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

    swaps = {"base": None, "swap": swap, "zero": lambda x, y: torch.zeros_like(y)}
    for b in batches:
        for name, fn in swaps.items():
            with override_output(mlp, fn) if fn else contextlib.nullcontext():
                ce[name].append(float(next_token_ce(model(b.tokens).logits, b.tokens, b.valid)[0]))
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    freq = fired.float() / n_tok
    return ReplacementReport(
        kind=getattr(sparse, "kind", type(sparse).__name__), layer=layer, k=sparse.k,
        n_units=int(freq.numel()), n_params=n_params(sparse), nmse=err / n_tok,
        ce_base=mean(ce["base"]), ce_swapped=mean(ce["swap"]), ce_zero_ablation=mean(ce["zero"]),
        l0=l0 / n_tok, dead_fraction=float((freq < 1e-8).float().mean()),
        expert_rank=sparse.normalised_expert_rank() if isinstance(sparse, MxD) else None,
    )
