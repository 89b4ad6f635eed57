"""Mixture of Decoders (MxD) and its sparse-MLP baselines in the MxD paper's notation (docs/zoo.md):
MLP input x ∈ ℝᴵ, output y ∈ ℝᴼ, hidden z ∈ ℝᴴ, expert coefficients a ∈ ℝᴺ. Every layer returns
``SparseOut(y_hat, codes)``, ``codes`` the units counted for L0 / dead fraction."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

SparseKind = Literal["mxd", "transcoder", "skip_transcoder", "sae"]


@dataclass
class SparseOut:
    y_hat: torch.Tensor  # [..., O]
    codes: torch.Tensor  # [..., N] sparse, non-negative


def topk_relu(pre: torch.Tensor, k: int) -> torch.Tensor:
    """TopK(ReLU(pre)) along the last axis: keep the k largest, zero the rest."""
    vals, idx = pre.topk(k, dim=-1)
    return torch.zeros_like(pre).scatter(-1, idx, F.relu(vals))


def _check_k(k: int, n: int, name: str) -> None:
    if not 0 < k <= n:
        raise ValueError(f"k={k} must be in [1, {name}={n}]")


def _linear_init(fan_in: int, *shape: int) -> nn.Parameter:
    """nn.Linear's default init U(-1/√fan_in, 1/√fan_in) for a raw parameter."""
    bound = 1.0 / math.sqrt(fan_in)
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


class MxD(nn.Module):
    """ŷ = (Cᵀa) ∗ (Dᵀz) + b_out, a = TopK(ReLU(Gᵀx + b_G)) (MxD Eq. 3-5): expert n's decoder is
    W_n = D·diag(c_n) ∈ ℝ^{H×O}, and this equals Σ_n a_n W_nᵀ z (Lemma 2) at the cost of one dense
    decoder. ``glu=True``: the Swish-GLU variant z = Swish(E_GLUᵀx) ∗ (Eᵀx) (Eq. 6)."""

    kind: SparseKind = "mxd"

    def __init__(self, d_in: int, d_out: int, d_hidden: int, n_experts: int, k: int, *, glu: bool = False):
        super().__init__()
        _check_k(k, n_experts, "n_experts")
        self.d_in, self.d_out, self.d_hidden, self.n_experts, self.k, self.glu = d_in, d_out, d_hidden, n_experts, k, glu
        self.enc = nn.Linear(d_in, d_hidden, bias=not glu)  # E, b_E
        self.enc_glu = nn.Linear(d_in, d_hidden, bias=False) if glu else None  # E_GLU
        self.gate = nn.Linear(d_in, n_experts)  # G, b_G
        self.C = _linear_init(n_experts, n_experts, d_out)  # rows c_n ∈ ℝᴼ
        self.D = nn.Parameter(torch.zeros(d_hidden, d_out))  # zero init, as for skip transcoders
        self.b_out = nn.Parameter(torch.zeros(d_out))

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        if self.enc_glu is not None:
            return F.silu(self.enc_glu(x)) * self.enc(x)
        return F.gelu(self.enc(x))

    def coefficients(self, x: torch.Tensor) -> torch.Tensor:
        return topk_relu(self.gate(x), self.k)

    def forward(self, x: torch.Tensor) -> SparseOut:
        z, a = self.hidden(x), self.coefficients(x)
        y_hat = (a @ self.C) * (z @ self.D) + self.b_out  # (Cᵀa) ∗ (Dᵀz) + b
        return SparseOut(y_hat, a)

    def expert_weights(self, idx: torch.Tensor) -> torch.Tensor:
        """W_n = D·diag(c_n) for the experts in ``idx``: [len(idx), H, O]."""
        return self.D.unsqueeze(0) * self.C[idx].unsqueeze(1)

    @torch.no_grad()
    def normalised_expert_rank(self, n_sample: int | None = 256, seed: int = 0) -> float:
        """Mean rank(W_n) / min(H, O) over (a sample of) experts (MxD App. B.4.2)."""
        n = self.n_experts
        idx = torch.arange(n)
        if n_sample is not None and n > n_sample:
            idx = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:n_sample]
        ranks = torch.linalg.matrix_rank(self.expert_weights(idx).float())
        return float(ranks.float().mean()) / min(self.d_hidden, self.d_out)


class TopKTranscoder(nn.Module):
    """ŷ = W_decᵀ TopK(ReLU(W_encᵀx + b_enc)) + b_out; ``skip=True`` adds W_skipᵀx."""

    def __init__(self, d_in: int, d_out: int, width: int, k: int, *, skip: bool = False):
        super().__init__()
        _check_k(k, width, "width")
        self.d_in, self.d_out, self.width, self.k = d_in, d_out, width, k
        self.kind: SparseKind = "skip_transcoder" if skip else "transcoder"
        self.enc = nn.Linear(d_in, width)
        self.W_dec = _linear_init(width, width, d_out)
        self.b_out = nn.Parameter(torch.zeros(d_out))
        self.W_skip = nn.Parameter(torch.zeros(d_in, d_out)) if skip else None
        if skip:  # skip transcoders start from a zero decoder and a zero skip map
            nn.init.zeros_(self.W_dec)

    def forward(self, x: torch.Tensor) -> SparseOut:
        f = topk_relu(self.enc(x), self.k)
        y_hat = f @ self.W_dec + self.b_out
        if self.W_skip is not None:
            y_hat = y_hat + x @ self.W_skip
        return SparseOut(y_hat, f)


class TopKSAE(nn.Module):
    """TopK sparse autoencoder x̂ = W_decᵀ TopK(W_encᵀ(x − b_dec) + b_enc) + b_dec: on the MLP
    *output* in the replacement tool (input = target), on a teacher's residual stream by CoCoMix."""

    kind: SparseKind = "sae"

    def __init__(self, d: int, width: int, k: int):
        super().__init__()
        _check_k(k, width, "width")
        self.d_in = self.d_out = d
        self.width, self.k = width, k
        self.enc = nn.Linear(d, width)
        self.W_dec = nn.Parameter(self.enc.weight.detach().clone())  # transpose init [width, d]
        self.b_dec = nn.Parameter(torch.zeros(d))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return topk_relu(self.enc(x - self.b_dec), self.k)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        return codes @ self.W_dec + self.b_dec

    def forward(self, x: torch.Tensor) -> SparseOut:
        c = self.encode(x)
        return SparseOut(self.decode(c), c)


def n_params(layer: nn.Module) -> int:
    return sum(p.numel() for p in layer.parameters())


def mxd_params(d_in: int, d_out: int, d_hidden: int, n_experts: int, *, glu: bool = False) -> int:
    """Analytic parameter count of :class:`MxD` (equals ``n_params`` of the built layer)."""
    enc = d_in * d_hidden + (d_in * d_hidden if glu else d_hidden)
    return enc + n_experts * (d_in + 1 + d_out) + d_hidden * d_out + d_out


def transcoder_params(d_in: int, d_out: int, width: int, *, skip: bool = False) -> int:
    return d_in * width + width + width * d_out + d_out + (d_in * d_out if skip else 0)


def mxd_expert_count(d_in: int, d_out: int, d_hidden: int, tc_width: int | None = None, *, glu: bool = False) -> int:
    """Expert count N parameter-matching a TopK transcoder of width H_TC (default 32·I), weights
    only as in the paper: N·(I + O + 1) = I·H_TC + H_TC·O − (encoder weights + H·O); for I = O and
    an MLP encoder N = (2·I·H_TC − 2·I·H)/(I + O + 1), 21,490 for GPT-2 small."""
    if min(d_in, d_out, d_hidden) <= 0:
        raise ValueError(f"dimensions must be positive, got I={d_in}, O={d_out}, H={d_hidden}")
    tc_width = 32 * d_in if tc_width is None else tc_width
    enc = d_in * d_hidden * (2 if glu else 1)
    n = (d_in * tc_width + tc_width * d_out - enc - d_hidden * d_out) / (d_in + d_out + 1)
    if n < 1:
        raise ValueError(f"transcoder width {tc_width} too small to parameter-match an MxD with H={d_hidden}")
    return int(round(n))


def mxd_active_params(d_in: int, d_out: int, d_hidden: int, n_experts: int, k: int, *, glu: bool = False) -> int:
    """Weights one token multiplies through: the encoder(s), the *dense* gate over all N
    experts (TopK needs every logit), D, and only the k active rows of C."""
    return d_in * d_hidden * (2 if glu else 1) + d_in * n_experts + d_hidden * d_out + k * d_out
