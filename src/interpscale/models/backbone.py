"""The shared transformer backbone (App. G, docs/models.md) with causal (AR) or block-causal (CDLM,
§5.2) attention and a :class:`KVCache`: one plain-PyTorch path on every device, fast via ``torch.compile``."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.utils.checkpoint import checkpoint

from interpscale.models.config import ModelConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


class KVCache:
    """Per-layer keys/values [B, n_kv, T_max, hd]; ``length`` tokens are committed."""

    def __init__(self, cfg: ModelConfig, batch: int, max_len: int, device, dtype):
        shape = (batch, cfg.n_kv_heads, max_len, cfg.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)]
        self.length = 0


def allowed_mask(kind: str, q_pos: torch.Tensor, k_pos: torch.Tensor, block: int) -> torch.Tensor:
    """[Tq, Tk] bool, True where query may attend key (absolute positions)."""
    if kind == "causal":
        return k_pos[None, :] <= q_pos[:, None]
    return (k_pos[None, :] // block) <= (q_pos[:, None] // block)  # block-causal


@lru_cache(maxsize=16)
def block_causal_mask(t: int, block: int, device: str):
    """FlexAttention block mask of the block-causal pattern (built once per shape)."""
    return create_block_mask(lambda b, h, q, k: (k // block) <= (q // block), None, None, t, t, device=device)


def attend(q, k, v, kind: str, block: int, start: int = 0) -> torch.Tensor:
    """Attention of q [B, H, Tq, hd] over k, v [B, Hkv, Tk, hd]; queries sit at absolute
    positions start..start+Tq (start > 0 when decoding against a KV cache)."""
    gqa = q.size(1) != k.size(1)
    Tq, Tk = q.size(2), k.size(2)
    if start == 0 and Tq == Tk and kind == "causal":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    if start == 0 and Tq == Tk and q.is_cuda:  # block-causal on GPU: FlexAttention skips masked tiles
        return flex_attention(q, k, v, block_mask=block_causal_mask(Tq, block, str(q.device)), enable_gqa=gqa)
    q_pos = torch.arange(start, start + Tq, device=q.device)
    mask = allowed_mask(kind, q_pos, torch.arange(Tk, device=q.device), block)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


def clip(x: torch.Tensor, c: float) -> torch.Tensor:
    """``x.clamp(-c, c)`` with clamp's gradient (1 where |x| <= c, else 0) as a float factor.

    Same values and gradients as ``clamp``; written out because for ``clamp`` Inductor saves
    a boolean gradient mask, and its CPU kernels store bool ~90x slower than float
    (torch 2.13; benchmarks/README.md, issue 19). An infinite input gives NaN here, where
    clamp gives ±c."""
    x0 = x.detach()
    inside = 1 - (x0.abs() - c).clamp_min(0).sign()
    return x0.clamp(-c, c) + (x - x0) * inside


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on x [B, T, heads, hd]; ``cos``/``sin`` [T, hd] hold each frequency
    twice and ``sin`` carries the rotation's sign (−sin on the first half)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos[:, None] + torch.cat([x2, x1], dim=-1) * sin[:, None]


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.d_model, cfg.head_dim
        self.q_dim, self.kv_dim = cfg.n_heads * hd, cfg.n_kv_heads * hd
        self.wqkv = nn.Linear(d, self.q_dim + 2 * self.kv_dim, bias=False)  # Wq, Wk, Wv fused
        self.wo = nn.Linear(self.q_dim, d, bias=False)
        self.q_norm = RMSNorm(self.q_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(self.kv_dim, cfg.norm_eps) if cfg.qk_norm else None

    def forward(self, x, cos, sin, kind: str, layer: int = 0, cache: Optional[KVCache] = None, commit: bool = False):
        cfg = self.cfg
        B, T, _ = x.shape
        qkv = self.wqkv(x)
        if cfg.clip_qkv is not None:
            qkv = clip(qkv, cfg.clip_qkv)  # App. G: clip_qkv = 10
        q, k, v = qkv.split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
        if self.q_norm is not None:  # QK-norm over the full projection width (OLMo-2 style)
            q, k = self.q_norm(q), self.k_norm(k)
        hd = cfg.head_dim
        q = rope(q.view(B, T, -1, hd), cos, sin).transpose(1, 2)  # [B, H, T, hd]
        k = rope(k.view(B, T, -1, hd), cos, sin).transpose(1, 2)
        v = v.view(B, T, -1, hd).transpose(1, 2)
        start = 0
        if cache is not None:
            start = cache.length
            if commit:
                cache.k[layer][:, :, start:start + T] = k
                cache.v[layer][:, :, start:start + T] = v
            if start:
                k = torch.cat([cache.k[layer][:, :, :start], k], dim=2)
                v = torch.cat([cache.v[layer][:, :, :start], v], dim=2)
        y = attend(q, k, v, kind, cfg.block_size, start)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class SwiGLU(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.d_model, cfg.mlp_hidden, bias=False)
        self.up = nn.Linear(cfg.d_model, cfg.mlp_hidden, bias=False)
        self.down = nn.Linear(cfg.mlp_hidden, cfg.d_model, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """Post-norm residual block: x + norm(attn(x)), then h + norm(mlp(h)) (OLMo-2 ordering)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn = Attention(cfg)
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = SwiGLU(cfg)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, cos, sin, kind, layer=0, cache=None, commit=False):
        x = x + self.drop(self.attn_norm(self.attn(x, cos, sin, kind, layer, cache, commit)))
        return x + self.drop(self.mlp_norm(self.mlp(x)))


class Backbone(nn.Module):
    """Token embedding (tied with the LM head), L blocks, final norm."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        inv = 1.0 / cfg.rope_base ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim)
        ang = torch.outer(torch.arange(cfg.max_seq_len, dtype=torch.float64), inv).repeat(1, 2)  # [T, hd]
        sign = torch.tensor([-1.0, 1.0], dtype=torch.float64).repeat_interleave(cfg.head_dim // 2)
        self.register_buffer("rope_cos", ang.cos().float(), persistent=False)
        self.register_buffer("rope_sin", (ang.sin() * sign).float(), persistent=False)
        self.apply(self._init)
        for blk in self.blocks:  # scaled init of residual outputs (GPT-2)
            for w in (blk.attn.wo.weight, blk.mlp.down.weight):
                nn.init.normal_(w, std=cfg.init_std / math.sqrt(2 * cfg.n_layers))

    def _init(self, m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=self.cfg.init_std)

    def forward(self, tokens: Optional[torch.Tensor], *, kind: str, embeds: Optional[torch.Tensor] = None,
                cache: Optional[KVCache] = None, commit: bool = False, steer_vec: Optional[torch.Tensor] = None,
                steer_mask: Optional[torch.Tensor] = None, steer_layer: int = 0) -> torch.Tensor:
        """Hidden states h [B, T, d]. Steering (Eq. 18) adds ``steer_vec`` at positions
        ``steer_mask`` to h^(l) for l >= ``steer_layer`` (l = L is the final hidden state)."""
        x = self.embed(tokens) if embeds is None else embeds
        T = x.size(1)
        start = cache.length if cache is not None else 0
        if start + T > self.cfg.max_seq_len:
            raise ValueError(f"sequence of {start + T} tokens exceeds max_seq_len={self.cfg.max_seq_len}")
        cos, sin = (t[start:start + T].to(x.dtype) for t in (self.rope_cos, self.rope_sin))
        add = None
        if steer_vec is not None and steer_mask is not None:
            add = steer_mask.unsqueeze(-1).to(x.dtype) * steer_vec.to(x.dtype)  # [B, T, d]
        recompute = self.cfg.activation_checkpointing and self.training and cache is None
        for i, blk in enumerate(self.blocks):
            if add is not None and i >= steer_layer:
                x = x + add
            if recompute:
                x = checkpoint(blk, x, cos, sin, kind, use_reentrant=False)
            else:
                x = blk(x, cos, sin, kind, i, cache, commit)
        h = self.norm(x)
        if add is not None and self.cfg.n_layers >= steer_layer:
            h = h + add
        if cache is not None and commit:
            cache.length = start + T
        return h
