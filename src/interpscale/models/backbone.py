"""The shared transformer backbone (App. G): post-norm RMSNorm, QK-norm, RoPE, SwiGLU, GQA.

Attention is causal (AR) or block-causal (CDLM: bidirectional inside a block of b tokens,
causal across blocks, §5.2). A :class:`KVCache` serves both AR decoding and CDLM
block-by-block denoising.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from interpscale.models.config import ModelConfig
from interpscale.models.fused import add_rms_norm, qk_norm_rope, rms_norm
from interpscale.models.gemm import Linear

try:  # FlexAttention block masks on CUDA; dense boolean masks elsewhere
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:  # pragma: no cover - older torch
    create_block_mask = flex_attention = None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)  # F.rms_norm's values, fewer passes (fused.py)

    def residual(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """x + self(y) in one pass (no forward hooks on this module fire)."""
        return add_rms_norm(x, y, self.weight, self.eps)


class KVCache:
    """Per-layer keys/values [B, n_kv, T_max, hd]; ``length`` tokens are committed."""

    def __init__(self, cfg: ModelConfig, batch: int, max_len: int, device, dtype):
        shape = (batch, cfg.n_kv_heads, max_len, cfg.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)]
        self.length = 0
        self.max_len = max_len


def allowed_mask(kind: str, q_pos: torch.Tensor, k_pos: torch.Tensor, block: int) -> torch.Tensor:
    """[Tq, Tk] bool, True where query may attend key (absolute positions)."""
    if kind == "causal":
        return k_pos[None, :] <= q_pos[:, None]
    return (k_pos[None, :] // block) <= (q_pos[:, None] // block)  # block-causal


@lru_cache(maxsize=16)
def _dense_block_mask(t: int, block: int, device: str) -> torch.Tensor:
    pos = torch.arange(t, device=device)
    return allowed_mask("block", pos, pos, block)


_FLEX = {}


def flex_block_attention(q, k, v, block: int) -> torch.Tensor:
    """Block-causal attention through FlexAttention (compiled once on CUDA, eager elsewhere)."""
    fn = flex_attention
    if q.is_cuda:
        if "cuda" not in _FLEX:
            try:
                _FLEX["cuda"] = torch.compile(flex_attention, dynamic=False)
            except Exception:  # pragma: no cover - compile unavailable: eager flex still works
                _FLEX["cuda"] = flex_attention
        fn = _FLEX["cuda"]
    return fn(q, k, v, block_mask=_flex_block_mask(q.size(2), block, str(q.device)))


@lru_cache(maxsize=16)
def _flex_block_mask(t: int, block: int, device: str):
    def mod(b, h, q, k):
        return (k // block) <= (q // block)

    return create_block_mask(mod, None, None, t, t, device=device)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.d_model, cfg.head_dim
        self.q_dim, self.kv_dim = cfg.n_heads * hd, cfg.n_kv_heads * hd
        self.wqkv = Linear(d, self.q_dim + 2 * self.kv_dim)  # Wq, Wk, Wv fused
        self.wo = Linear(cfg.n_heads * hd, d)
        self.fuse_qk = cfg.qk_norm  # QK-norm + RoPE in one autograd Function (fused.py)
        self.q_norm = RMSNorm(cfg.n_heads * hd, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.n_kv_heads * hd, cfg.norm_eps) if cfg.qk_norm else None

    def forward(self, x, cos, sin, kind: str, layer: int, cache: Optional[KVCache], commit: bool):
        cfg = self.cfg
        B, T, _ = x.shape
        qkv = self.wqkv(x)
        if cfg.clip_qkv is not None and (qkv.is_cuda or _exceeds(qkv.detach(), cfg.clip_qkv)):
            # App. G: clip_qkv = 10. On CPU skip the clamp (and its backward mask) when it
            # would change nothing: same values, same gradients, one cheap reduction.
            qkv = qkv.clamp(-cfg.clip_qkv, cfg.clip_qkv)
        H, Hkv, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        if cos.dim() != 2 or cos.size(-1) != self.q_dim:  # [T, hd] from callers that slice the buffers
            cos, sin = (t.reshape(T, hd).repeat(1, H) for t in (cos, sin))
        if self.fuse_qk:  # QK-norm + RoPE with a hand-written backward (fused.py)
            q, k, v = qk_norm_rope(qkv, self.q_norm.weight, self.k_norm.weight, cos, sin, H, Hkv, cfg.norm_eps)
        else:  # reference path (and qk_norm=False)
            q, k, v = qkv.split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
            if self.q_norm is not None:  # QK-norm over the full projection width (OLMo-2 style)
                q, k = self.q_norm(q), self.k_norm(k)
            q = _rope(q.reshape(B, T, H, hd), cos, sin).transpose(1, 2)  # [B, H, T, hd]
            k = _rope(k.reshape(B, T, Hkv, hd), cos[:, : self.kv_dim], sin[:, : self.kv_dim]).transpose(1, 2)
            v = v.reshape(B, T, Hkv, hd).transpose(1, 2)
        start = 0
        if cache is not None:
            start = cache.length
            if commit:
                cache.k[layer][:, :, start:start + T] = k
                cache.v[layer][:, :, start:start + T] = v
            if start:
                k = torch.cat([cache.k[layer][:, :, :start], k], dim=2)
                v = torch.cat([cache.v[layer][:, :, :start], v], dim=2)
        y = self._attend(q, k, v, kind, start)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))

    def _attend(self, q, k, v, kind: str, start: int) -> torch.Tensor:
        cfg = self.cfg
        Tq, Tk = q.size(2), k.size(2)
        gqa = cfg.n_kv_heads != cfg.n_heads
        if start == 0 and Tq == Tk and kind == "causal":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        if start == 0 and Tq == Tk and q.is_cuda and flex_attention is not None:
            if gqa:
                k, v = (z.repeat_interleave(cfg.n_heads // cfg.n_kv_heads, dim=1) for z in (k, v))
            return flex_block_attention(q, k, v, cfg.block_size)
        if start == 0 and Tq == Tk:
            mask = _dense_block_mask(Tq, cfg.block_size, str(q.device))
        else:
            q_pos = torch.arange(start, start + Tq, device=q.device)
            mask = allowed_mask(kind, q_pos, torch.arange(Tk, device=q.device), cfg.block_size)
            if bool(mask.all()):
                mask = None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


def _exceeds(x: torch.Tensor, bound: float) -> bool:
    lo, hi = torch.aminmax(x)  # one pass, no |x| temporary
    return max(-float(lo), float(hi)) > bound


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on [..., T, heads, hd]; ``cos`` [T, heads·hd] holds each frequency
    twice per head and ``sin`` carries the rotation's sign (−sin on the first half)."""
    cos, sin = (t.unflatten(-1, x.shape[-2:]) for t in (cos, sin))
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([x2, x1], dim=-1) * sin


class SwiGLU(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate = Linear(cfg.d_model, cfg.mlp_hidden)
        self.up = Linear(cfg.d_model, cfg.mlp_hidden)
        self.down = Linear(cfg.mlp_hidden, cfg.d_model)

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

    def forward(self, x, cos, sin, kind, layer, cache, commit):
        x = self._update(x, self.attn_norm, self.attn(x, cos, sin, kind, layer, cache, commit))
        return self._update(x, self.mlp_norm, self.mlp(x))

    def _update(self, x, norm: RMSNorm, y):
        if self.drop.p and self.training:  # dropout sits between the norm and the add
            return x + self.drop(norm(y))
        return norm.residual(x, y)


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
        self.register_buffer("rope_cos", ang.cos().float(), persistent=False)
        half = cfg.head_dim // 2
        sign = torch.cat([-torch.ones(half, dtype=torch.float64), torch.ones(half, dtype=torch.float64)])
        self.register_buffer("rope_sin", (ang.sin() * sign).float(), persistent=False)
        self.apply(self._init)
        for blk in self.blocks:  # scaled init of residual outputs (GPT-2)
            for w in (blk.attn.wo.weight, blk.mlp.down.weight):
                nn.init.normal_(w, std=cfg.init_std / math.sqrt(2 * cfg.n_layers))

    def _init(self, m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=self.cfg.init_std)

    def forward(
        self,
        tokens: Optional[torch.Tensor],
        *,
        kind: str,
        embeds: Optional[torch.Tensor] = None,
        cache: Optional[KVCache] = None,
        commit: bool = False,
        steer_vec: Optional[torch.Tensor] = None,
        steer_mask: Optional[torch.Tensor] = None,
        steer_layer: int = 0,
    ) -> torch.Tensor:
        """Hidden states h [B, T, d]. Steering (Eq. 18) adds ``steer_vec`` at positions
        ``steer_mask`` to h^(l) for l >= ``steer_layer`` (l = L is the final hidden state)."""
        x = self.embed(tokens) if embeds is None else embeds
        T = x.size(1)
        start = cache.length if cache is not None else 0
        if start + T > self.cfg.max_seq_len:
            raise ValueError(f"sequence of {start + T} tokens exceeds max_seq_len={self.cfg.max_seq_len}")
        # [T, H·hd]: repeated across heads once here, so every layer's RoPE reads dense tables
        H = self.cfg.n_heads
        cos, sin = (t[start:start + T].to(x.dtype).repeat(1, H) for t in (self.rope_cos, self.rope_sin))
        add = None
        if steer_vec is not None and steer_mask is not None:
            add = steer_mask.unsqueeze(-1).to(x.dtype) * steer_vec.to(x.dtype)  # [B, T, d]
        for i, blk in enumerate(self.blocks):
            if add is not None and i >= steer_layer:
                x = x + add
            x = blk(x, cos, sin, kind, i, cache, commit)
        h = self.norm(x)
        if add is not None and self.cfg.n_layers >= steer_layer:
            h = h + add
        if cache is not None and commit:
            cache.length = start + T
        return h
