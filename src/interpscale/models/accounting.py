"""Analytic parameter and FLOP counts (Eq. 23, Eq. 24); pure arithmetic on a ModelConfig.

These never allocate, so the planner can price 5B models; the built model's
``params_nonembedding()`` / ``flops_per_token()`` call the same functions, and a test
checks them against ``sum(p.numel())`` of the real modules.
"""

from __future__ import annotations

from interpscale.models.config import ModelConfig


def backbone_params(cfg: ModelConfig) -> int:
    """Non-embedding backbone P: attention + SwiGLU + RMSNorm weights (+ final norm).

    Embeddings are tied with the LM head, so nothing of the V×d matrix is counted.
    """
    d, hd = cfg.d_model, cfg.head_dim
    q_dim, kv_dim = cfg.n_heads * hd, cfg.n_kv_heads * hd
    attn = d * q_dim + 2 * d * kv_dim + q_dim * d  # Wq, Wk, Wv, Wo (no biases)
    mlp = 3 * d * cfg.mlp_hidden  # SwiGLU: gate, up, down
    norms = 2 * d + ((q_dim + kv_dim) if cfg.qk_norm else 0)  # post-attn, post-mlp, QK-norm
    return cfg.n_layers * (attn + mlp + norms) + d  # + final norm


def concept_params(cfg: ModelConfig) -> int:
    """Concept-module parameters: known predictor + K (2dn), unknown head and U.

    Factorised (rank R): down-projection d·R, predictor R·m, U = A·B with A m×R, B R×d,
    i.e. 2dn + 2dR + 2Rm, which reproduces Table 23's "+Concept total" column.
    Dense U: predictor d·m and U m×d.
    """
    d, n, m, r = cfg.d_model, cfg.n_concepts, cfg.n_unknown, cfg.concept_rank
    known = 2 * d * n
    unknown = (2 * d * r + 2 * r * m) if r else 2 * d * m
    return known + unknown


def attention_context_flops(cfg: ModelConfig, seq_len: int) -> float:
    """The 12·L·d·N term of Eq. 23 (attention scores and values, forward + backward)."""
    return 12.0 * cfg.n_layers * cfg.d_model * seq_len


def concept_flops(cfg: ModelConfig) -> float:
    """Eq. 24's concept terms: 6(2dn) + 6(2dR + Rm) (dense U: 6(2dm))."""
    d, n, m, r = cfg.d_model, cfg.n_concepts, cfg.n_unknown, cfg.concept_rank
    unknown = (2 * d * r + r * m) if r else 2 * d * m
    return 6.0 * (2 * d * n) + 6.0 * unknown


def flops_per_token_cfg(cfg: ModelConfig, seq_len: int, *, concept: bool) -> float:
    """M = 6P + 12·L·d·N (Eq. 23), plus the concept terms of Eq. 24 when ``concept``."""
    if int(seq_len) <= 0:
        raise ValueError(f"seq_len must be a positive int, got {seq_len!r}")
    m = 6.0 * backbone_params(cfg) + attention_context_flops(cfg, int(seq_len))
    return m + (concept_flops(cfg) if concept else 0.0)


def concept_overhead_fraction(cfg: ModelConfig) -> float:
    """Concept-module share of the +Concept total non-embedding parameters (Figure 21)."""
    c = concept_params(cfg)
    return c / (c + backbone_params(cfg))
