"""Analytic parameter and FLOP counts (Eq. 23, Eq. 24) of a ModelConfig, without allocating:
the formulas live once in :mod:`interpscale.paper`; this module reads a config's fields into them."""

from __future__ import annotations

from interpscale import paper
from interpscale.models.config import ModelConfig


def backbone_params(cfg: ModelConfig) -> int:
    """Non-embedding backbone P: attention + SwiGLU + RMSNorm weights (+ final norm); the V×d
    embedding is tied with the LM head and not counted."""
    d, hd = cfg.d_model, cfg.head_dim
    q_dim, kv_dim = cfg.n_heads * hd, cfg.n_kv_heads * hd
    attn = d * q_dim + 2 * d * kv_dim + q_dim * d  # Wq, Wk, Wv, Wo (no biases)
    mlp = 3 * d * cfg.mlp_hidden  # SwiGLU: gate, up, down
    norms = 2 * d + ((q_dim + kv_dim) if cfg.qk_norm else 0)  # post-attn, post-mlp, QK-norm
    return cfg.n_layers * (attn + mlp + norms) + d  # + final norm


def concept_params(cfg: ModelConfig) -> int:
    """Concept-module parameters, 2dn + 2dR + 2Rm (factorised U) or 2dn + 2dm (dense U);
    see ``paper.concept_module_params``, which reproduces Table 23's "+Concept total"."""
    return paper.concept_module_params(cfg.d_model, cfg.n_concepts, cfg.n_unknown, cfg.concept_rank)


def params_cfg(cfg: ModelConfig, *, concept: bool) -> int:
    """Non-embedding P: the backbone, plus the concept module when ``concept`` (Table 23's
    "+Concept total"); equals the built model's parameters except the tied embedding."""
    return backbone_params(cfg) + (concept_params(cfg) if concept else 0)


def concept_flops(cfg: ModelConfig) -> float:
    """Eq. 24's concept terms: 6(2dn) + 6(2dR + Rm) (dense U: 6(2dm))."""
    return paper.concept_module_flops(cfg.d_model, cfg.n_concepts, cfg.n_unknown, cfg.concept_rank)


def flops_per_token_cfg(cfg: ModelConfig, seq_len: int, *, concept: bool) -> float:
    """M = 6P + 12·L·d·N (Eq. 23), plus the concept terms of Eq. 24 when ``concept``."""
    return paper.flops_per_token(backbone_params(cfg), cfg.n_layers, cfg.d_model, seq_len, concept=concept,
                                 n=cfg.n_concepts, m=cfg.n_unknown, rank=cfg.concept_rank)


def concept_overhead_fraction(cfg: ModelConfig) -> float:
    """Concept-module share of the +Concept total non-embedding parameters (Figure 21)."""
    c = concept_params(cfg)
    return c / (c + backbone_params(cfg))
