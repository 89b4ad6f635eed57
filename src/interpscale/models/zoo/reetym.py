"""reEtym: the token embedding factorised as W_recipe (V×S) · W_basis (S×d), tied to the head
(docs/zoo.md); interventions (App. E) and signal-space statistics live in ``reetym_analysis``."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from interpscale.models.lm import backbone_params, steerling_price
from interpscale.models.backbone import Backbone
from interpscale.models.types import ModelOutput
from interpscale.models.zoo.common import BACKBONE_DEFAULTS, ZooConfig, ZooLM, backbone_config

# reEtym Table 5: name -> (layers, d_model, heads, kv_heads, d_ff, S, published params).
# Vocabulary padded to 50,304 (App. B); backbone is "GPT-2-New" (RoPE, SwiGLU, RMSNorm).
REETYM_TABLE5 = {
    "reEtyM-1-Small": (6, 512, 8, 8, 1536, 512, 46.47e6),
    "reEtyM-1-Lite": (32, 1024, 16, 4, 2816, 1024, 413.34e6),
    "reEtyM-1": (32, 1024, 16, 16, 2816, 1024, 463.67e6),
    "reEtyM-1-Big": (36, 1024, 16, 16, 2816, 1024, 515.06e6),
}
REETYM_VOCAB = 50304


class EtymEmbedding(nn.Module):
    """E = W_recipe · W_basis (Eq. 1-2), used for input lookup and the tied output head."""

    def __init__(self, vocab_size: int, d_model: int, n_signals: int | None = None, *, v_s: float = 0.02):
        super().__init__()
        S = d_model if n_signals is None else n_signals
        self.recipe = nn.Parameter(torch.empty(vocab_size, S))  # W_recipe [V, S]
        self.basis = nn.Parameter(torch.empty(S, d_model))  # W_basis [S, d]
        self.reset_parameters(v_s)

    @torch.no_grad()
    def reset_parameters(self, v_s: float = 0.02) -> None:
        # σ = sqrt(V_s/√S) so that Var(E_ij) = S·σ⁴ = V_s² (App. A.1, Eq. 4-6)
        sigma = math.sqrt(v_s / math.sqrt(self.recipe.size(1)))
        nn.init.normal_(self.recipe, std=sigma)
        nn.init.normal_(self.basis, std=sigma)

    @property
    def n_signals(self) -> int:
        return self.recipe.size(1)

    def vocab_matrix(self) -> torch.Tensor:
        """W_vocab = W_recipe · W_basis [V, d], rebuilt on every call."""
        return self.recipe @ self.basis

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.recipe[tokens] @ self.basis  # e_i = Σ_k R_ik B_k (Eq. 2)

    def signals(self, h: torch.Tensor) -> torch.Tensor:
        """Signal activations s = h·W_basisᵀ [..., S]."""
        return h @ self.basis.t()

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.signals(h) @ self.recipe.t()  # = h·(W_recipe·W_basis)ᵀ


def backbone_layer_params(d: int, n_heads: int, kv_heads: int, d_ff: int) -> int:
    """One GPT-2-New layer: Q, O (d² each), K, V (d·kv·head_dim each), SwiGLU (3·d·d_ff),
    two RMSNorm gains (2d); no biases."""
    head_dim = d // n_heads
    return 2 * d * d + 2 * d * kv_heads * head_dim + 3 * d * d_ff + 2 * d


def reetym_params(n_layers: int, d: int, n_heads: int, kv_heads: int, d_ff: int, n_signals: int, vocab_size: int = REETYM_VOCAB) -> dict[str, int]:
    """Analytic parameter counts: ``embedding`` (V·S + S·d), ``nonembedding`` (layers +
    final norm) and ``total`` — the quantity Table 5 reports."""
    emb = vocab_size * n_signals + n_signals * d
    non = n_layers * backbone_layer_params(d, n_heads, kv_heads, d_ff) + d
    return {"embedding": emb, "nonembedding": non, "total": emb + non}


# ---- the reetym family: the Steerling backbone with the factorised tied embedding -----
REETYM_DEFAULTS = {"n_signals": None, "v_s": 0.02, **BACKBONE_DEFAULTS}


def n_signals(c: ZooConfig) -> int:
    return c.extra["n_signals"] or c.d_model  # S = d in every paper config


def reetym_nonembedding_params(c: ZooConfig) -> int:
    """The backbone's P; W_recipe and W_basis are the (tied) embedding."""
    return backbone_params(backbone_config(c))


def reetym_flops_per_token(c: ZooConfig, seq_len: int) -> float:
    """Eq. 23 of the backbone plus the factorisation's extra matmuls: R[t]·B at the input
    and h·Bᵀ at the head, 2·S·d each forward, ×3 with the backward: 12·S·d."""
    return steerling_price(backbone_config(c), seq_len, concept=False)[1] + 12.0 * n_signals(c) * c.d_model


class ReEtymLM(ZooLM):
    """The Steerling backbone (the paper's "GPT-2-New") with an :class:`EtymEmbedding` embedding and head."""

    params_fn, flops_fn = staticmethod(reetym_nonembedding_params), staticmethod(reetym_flops_per_token)

    def __init__(self, config: ZooConfig):
        super().__init__(config)
        self.backbone = Backbone(backbone_config(config))
        del self.backbone.embed  # replaced by the factorised embedding
        self.etym = EtymEmbedding(config.vocab_size, config.d_model, n_signals(config), v_s=config.extra["v_s"])

    def forward(self, tokens: torch.Tensor, *, chunk_ids=None, chunk_labels=None) -> ModelOutput:
        h = self.backbone(None, kind="causal", embeds=self.etym(tokens))
        return ModelOutput(logits=self.etym.logits(h), hidden=h)

    @torch.no_grad()
    def signal_activations(self, tokens: torch.Tensor, layers: bool = False) -> torch.Tensor:
        """s = h·W_basisᵀ of the final hidden state [B, T, S], or of every layer's output
        [L+1, B, T, S] (embedding first) when ``layers`` (App. D Exp. 8)."""
        if not layers:
            return self.etym.signals(self(tokens).hidden)
        states = [self.etym(tokens)]
        hooks = [blk.register_forward_hook(lambda _m, _i, out: states.append(out)) for blk in self.backbone.blocks]
        try:
            self(tokens)
        finally:
            for hk in hooks:
                hk.remove()
        return self.etym.signals(torch.stack(states))
