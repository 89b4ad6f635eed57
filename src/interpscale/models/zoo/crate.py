"""CRATE language model (white-box transformer, CRATE-LM §4: MSSA then two-step ISTA, Eqs. 8-13;
docs/zoo.md) and the units its auto-interpretability reads."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from interpscale import paper
from interpscale.models.zoo.common import ZooConfig
from interpscale.models.zoo.gpt2 import AbsPosLM, causal_attention

# Table 1 of the CRATE-LM paper: name -> (d, K heads, L, h, CRATE params, GPT params).
CRATE_TABLE1 = {
    "1L": (128, 4, 1, 512, 6.54e6, 6.64e6),
    "2L": (128, 4, 2, 512, 6.64e6, 6.83e6),
    "3L": (128, 4, 3, 512, 6.74e6, 7.03e6),
    "S": (768, 12, 6, 3072, 55.9e6, 81.1e6),
    "B": (768, 12, 12, 3072, 81.2e6, 123.6e6),
}
GPT2_VOCAB = 50257
CRATE_DEFAULTS = {"expansion": 4, "eta": 0.1, "lam": 0.1, "n_steps": 2}  # §4: h = 4d, η = λ = 0.1, t = 2


def crate_params(vocab_size: int, d: int, n_layers: int) -> int:
    """V·d + L(6d² + 5d): tied embedding, per layer U (d²), output projection (d² + d),
    dictionary (4d²) and two LayerNorms (4d); positional table and final norm excluded."""
    return vocab_size * d + n_layers * (6 * d * d + 5 * d)


def gpt_params(vocab_size: int, d: int, n_layers: int) -> int:
    """V·d + L(12d² + 13d): the GPT-2 block with biases and a 4d MLP, same exclusions."""
    return vocab_size * d + n_layers * (12 * d * d + 13 * d)


class MSSA(nn.Module):
    """Multi-head subspace self-attention: Q = K = V = U_kᵀZ per head (Eq. 4, 8)."""

    def __init__(self, d: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.U = nn.Linear(d, d, bias=False)  # [U_1 … U_K]ᵀ, one d×d matrix
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.U(x)  # K heads of width p = d / K
        return self.proj(causal_attention(q, q, q, self.n_heads))  # softmax(QQᵀ/√p) Q


class ISTA(nn.Module):
    """Two proximal-gradient steps of the non-negative LASSO min_A ½‖Z − DA‖² + λ‖A‖₁, A ≥ 0,
    from A₀ = 0 (Eq. 10-12), returning D·A₂ (Eq. 13)."""

    def __init__(self, d: int, expansion: int = 4, *, eta: float = 0.1, lam: float = 0.1, n_steps: int = 2):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(expansion * d, d))  # Dᵀ: [h, d]
        nn.init.kaiming_uniform_(self.weight)
        self.eta, self.lam, self.n_steps = eta, lam, n_steps

    def codes(self, z: torch.Tensor) -> torch.Tensor:
        """A_t, the sparse code [..., h]."""
        dtz = F.linear(z, self.weight)  # Dᵀz, reused by every step
        a = F.relu(self.eta * dtz - self.eta * self.lam)  # A₁ (Eq. 10)
        for _ in range(self.n_steps - 1):  # A_{k+1} = ReLU(A_k + η(Dᵀz − DᵀD A_k) − ηλ) (Eq. 11-12)
            dtda = F.linear(F.linear(a, self.weight.t()), self.weight)
            a = F.relu(a + self.eta * (dtz - dtda) - self.eta * self.lam)
        return a

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return F.linear(self.codes(z), self.weight.t())  # D·A_t


class CRATEBlock(nn.Module):
    def __init__(self, d: int, n_heads: int, expansion: int = 4, eta: float = 0.1, lam: float = 0.1, n_steps: int = 2):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(d), MSSA(d, n_heads)
        self.ln_2, self.ista = nn.LayerNorm(d), ISTA(d, expansion, eta=eta, lam=lam, n_steps=n_steps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return self.ista(self.ln_2(x))  # no residual around ISTA


def crate_nonembedding_params(c: ZooConfig) -> int:
    """Blocks + final norm; token and positional tables are the embedding."""
    d, e = c.d_model, c.extra.get("expansion", 4)
    return c.n_layers * ((2 + e) * d * d + 5 * d) + 2 * d  # 6d² + 5d per layer at e = 4


def crate_flops_per_token(c: ZooConfig, seq_len: int) -> float:
    """6·P_eff + 12·L·d·N (Eq. 23), P_eff counting the dictionary once per matmul it takes part in."""
    d, L = c.d_model, c.n_layers
    h, t = c.extra.get("expansion", 4) * d, c.extra.get("n_steps", 2)
    dict_uses = 2 + 2 * (t - 1)  # Dᵀz, D A₁, Dᵀ(D A₁), D A₂
    p_eff = crate_nonembedding_params(c) + L * (dict_uses - 1) * h * d
    return 6.0 * p_eff + paper.attention_flops(L, d, seq_len)


class CRATELM(AbsPosLM):
    """CRATE: E_sem + E_pos (Eq. 7), L CRATE blocks, final LayerNorm, head tied to E_sem."""

    params_fn, flops_fn = staticmethod(crate_nonembedding_params), staticmethod(crate_flops_per_token)

    def make_block(self, i: int) -> nn.Module:
        c, ex = self.config, self.config.extra
        return CRATEBlock(c.d_model, c.n_heads, ex["expansion"], ex["eta"], ex["lam"], ex["n_steps"])

    @torch.no_grad()
    def neuron_activations(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """ISTA codes A₂ of every layer, each [B, T, h] (the units auto-interp reads)."""
        x, acts = self.embed(tokens), []
        for block in self.blocks:
            x = x + block.attn(block.ln_1(x))
            acts.append(block.ista.codes(block.ln_2(x)))
            x = F.linear(acts[-1], block.ista.weight.t())
        return acts


def activation_sparsity(acts: list[torch.Tensor], threshold: float = 0.0) -> list[float]:
    """Fraction of units with |activation| <= threshold, one value per layer."""
    return [float((a.abs() <= threshold).float().mean()) for a in acts]


def unit_activations(model: Any, tokens: torch.Tensor, layer: int, units: Optional[Sequence[int]] = None,
                     *, n_units: int = 16, seed: int = 0) -> tuple[np.ndarray, list[int]]:
    """Activations [units, B, T] of ``layer`` (ISTA codes A₂ for ``crate``, post-GELU neurons for
    ``crate-gpt``; CRATE-LM §5.3) and the unit ids; without ``units``, ``n_units`` ids drawn
    uniformly at random (seeded), as the paper samples neurons per layer."""
    acts = model.neuron_activations(tokens)
    if not 0 <= layer < len(acts):
        raise ValueError(f"layer {layer} out of range [0, {len(acts)})")
    a = acts[layer]  # [B, T, h]
    h = a.size(-1)
    if units is None:
        units = torch.randperm(h, generator=torch.Generator().manual_seed(seed))[: min(n_units, h)].tolist()
    bad = [u for u in units if not 0 <= u < h]
    if bad:
        raise ValueError(f"unit ids {bad} out of range [0, {h})")
    return a[..., list(units)].permute(2, 0, 1).double().numpy(), list(units)
