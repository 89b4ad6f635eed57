"""GPT-2-style language models with learned absolute positions: the host of CRATE, CRATE's
matched GPT baseline (``crate-gpt``: the pre-LayerNorm, biased, 4d-GELU block CRATE-LM's Table 1
compares against, hence not the Steerling backbone) and ``mxd`` (MLPs replaced by MxD layers).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from interpscale import paper
from interpscale.models.types import ModelOutput
from interpscale.models.zoo.common import ZooConfig, ZooLM
from interpscale.models.zoo.mxd import MxD, SparseOut, mxd_active_params, mxd_params


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Causal softmax attention of [B, T, d] queries, keys and values split into ``n_heads`` heads."""
    B, T, d = q.shape
    q, k, v = (t.view(B, T, n_heads, -1).transpose(1, 2) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, d)


class GPT2MLP(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.fc, self.fc_out = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(self.hidden(x))


class GPT2Block(nn.Module):
    """x ← x + Attn(LN₁x); x ← x + MLP(LN₂x). ``mlp`` may be any layer mapping d → d
    (an :class:`MxD` returns a ``SparseOut``; its ``y_hat`` is used)."""

    def __init__(self, d: int, n_heads: int, mlp: nn.Module):
        super().__init__()
        self.n_heads = n_heads
        self.ln_1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln_2, self.mlp = nn.LayerNorm(d), mlp

    def attn(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(causal_attention(*self.qkv(self.ln_1(x)).split(x.size(-1), -1), self.n_heads))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x)
        m = self.mlp(self.ln_2(x))
        return x + (m.y_hat if isinstance(m, SparseOut) else m)


class AbsPosLM(ZooLM):
    """E_sem + E_pos, ``make_block(i)`` × L (a subclass's), final LayerNorm, head tied to E_sem."""

    def __init__(self, config: ZooConfig):
        super().__init__(config)
        c = config
        self.wte = nn.Embedding(c.vocab_size, c.d_model)
        self.wpe = nn.Embedding(c.max_seq_len, c.d_model)
        self.blocks = nn.ModuleList(self.make_block(i) for i in range(c.n_layers))
        self.ln_f = nn.LayerNorm(c.d_model)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.02)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        T = tokens.size(1)
        if T > self.config.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds max_seq_len {self.config.max_seq_len}")
        return self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))

    def forward(self, tokens: torch.Tensor, *, chunk_ids=None, chunk_labels=None) -> ModelOutput:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        h = self.ln_f(x)
        return ModelOutput(logits=h @ self.wte.weight.t(), hidden=h)


def gpt2_nonembedding_params(d: int, n_layers: int, mlp_params: int) -> int:
    """Per layer 2 LayerNorms (4d) + biased QKV and projection (4d² + 4d) + the MLP;
    plus the final LayerNorm (2d)."""
    return n_layers * (4 * d * d + 8 * d + mlp_params) + 2 * d


def gpt_nonembedding_params(c: ZooConfig) -> int:
    d, h = c.d_model, c.extra["expansion"] * c.d_model
    return gpt2_nonembedding_params(d, c.n_layers, 2 * d * h + h + d)


def gpt_flops_per_token(c: ZooConfig, seq_len: int) -> float:
    return 6.0 * gpt_nonembedding_params(c) + paper.attention_flops(c.n_layers, c.d_model, seq_len)


class GPTLM(AbsPosLM):
    """CRATE's matched GPT-2 baseline (12d² + 13d per layer at MLP ratio 4)."""

    params_fn, flops_fn = staticmethod(gpt_nonembedding_params), staticmethod(gpt_flops_per_token)

    def make_block(self, i: int) -> nn.Module:
        d = self.config.d_model
        return GPT2Block(d, self.config.n_heads, GPT2MLP(d, self.config.extra["expansion"] * d))

    @torch.no_grad()
    def neuron_activations(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """Post-GELU MLP hidden units of every layer, each [B, T, 4d]."""
        x, acts = self.embed(tokens), []
        for block in self.blocks:
            x = x + block.attn(x)
            acts.append(block.mlp.hidden(block.ln_2(x)))
            x = x + block.mlp.fc_out(acts[-1])
        return acts


# ---- mxd family -----------------------------------------------------------------------
MXD_DEFAULTS = {"hidden_ratio": 4, "n_experts": None, "k": 32, "glu": False}


def mxd_dims(c: ZooConfig) -> tuple[int, int, int]:
    """(H, N, k) of the family's MxD layers: H = ratio·d; N defaults to 4·d experts."""
    H, N = c.extra["hidden_ratio"] * c.d_model, c.extra["n_experts"] or 4 * c.d_model
    return H, N, min(c.extra["k"], N)


def mxd_lm_params(c: ZooConfig) -> int:
    H, N, _ = mxd_dims(c)
    return gpt2_nonembedding_params(c.d_model, c.n_layers, mxd_params(c.d_model, c.d_model, H, N, glu=c.extra["glu"]))


def mxd_lm_flops(c: ZooConfig, seq_len: int) -> float:
    """6·P_active + 12·L·d·N: P_active counts the dense gate over all N experts but only
    the k active rows of C (see ``mxd_active_params``)."""
    H, N, k = mxd_dims(c)
    d = c.d_model
    active = gpt2_nonembedding_params(d, c.n_layers, mxd_active_params(d, d, H, N, k, glu=c.extra["glu"]))
    return 6.0 * active + paper.attention_flops(c.n_layers, d, seq_len)


class MxDLM(AbsPosLM):
    """GPT-2 blocks whose MLP is an MxD layer (GELU, or Swish-GLU with ``glu=True``)."""

    params_fn, flops_fn = staticmethod(mxd_lm_params), staticmethod(mxd_lm_flops)

    def make_block(self, i: int) -> nn.Module:
        c = self.config
        H, N, k = mxd_dims(c)
        layer = MxD(c.d_model, c.d_model, H, N, k, glu=c.extra["glu"])
        nn.init.normal_(layer.D, std=0.02)  # trained from scratch: a zero D would stall C's gradient
        return GPT2Block(c.d_model, c.n_heads, layer)
