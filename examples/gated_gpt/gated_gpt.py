"""A gated-attention GPT as an interpscale model family, from outside the package.

The attention output of every head is multiplied by a sigmoid gate computed from the block's
input (``gate = "headwise"``: one gate per head; ``"elementwise"``: one per channel), the
variant of "Gated Attention for Large Language Models" (Qiu et al., 2025). Importing this
module registers the family ``gated-gpt``; ``pyproject.toml`` declares it as an entry point
of the group ``interpscale.families`` so every interpscale process finds it once installed.

Only the required parts of the model protocol are written here (a builder, a config record
and ``loss``); ``FamilyModel`` supplies the rest, and the planner prices the family by
measuring it on the meta device (no formulas given).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from interpscale.models import SIZES, DataFields, FamilyModel, register_family
from interpscale.models.types import MASK_ID, Batch, LossOutput, ModelOutput


@dataclass
class GatedConfig:
    family: str
    size: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    max_seq_len: int
    mask_id: int = MASK_ID
    gate: str = "headwise"  # "headwise" | "elementwise"

    def __post_init__(self) -> None:
        if self.gate not in ("headwise", "elementwise"):
            raise ValueError(f"gate must be 'headwise' or 'elementwise', got {self.gate!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")

    def to_dict(self) -> dict:
        return asdict(self)


class GatedBlock(nn.Module):
    def __init__(self, c: GatedConfig):
        super().__init__()
        self.h = c.n_heads
        self.norm1, self.norm2 = nn.LayerNorm(c.d_model), nn.LayerNorm(c.d_model)
        self.qkv = nn.Linear(c.d_model, 3 * c.d_model, bias=False)
        self.gate = nn.Linear(c.d_model, c.n_heads if c.gate == "headwise" else c.d_model, bias=False)
        self.proj = nn.Linear(c.d_model, c.d_model, bias=False)
        self.mlp = nn.Sequential(nn.Linear(c.d_model, 4 * c.d_model, bias=False), nn.GELU(),
                                 nn.Linear(4 * c.d_model, c.d_model, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        u = self.norm1(x)
        q, k, v = self.qkv(u).view(B, T, 3, self.h, d // self.h).transpose(1, 3).unbind(2)  # [B, h, T, hd]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)  # [B, T, h, hd]
        g = torch.sigmoid(self.gate(u))  # [B, T, h] or [B, T, d]
        y = y * g.unsqueeze(-1) if g.size(-1) == self.h else y * g.view(B, T, self.h, d // self.h)
        x = x + self.proj(y.reshape(B, T, d))
        return x + self.mlp(self.norm2(x))


class GatedGPT(FamilyModel):
    def __init__(self, config: GatedConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.pos = nn.Embedding(config.max_seq_len, config.d_model)
        self.blocks = nn.ModuleList(GatedBlock(config) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(config.d_model)
        nn.init.normal_(self.embed.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, tokens: torch.Tensor, **_: object) -> ModelOutput:
        x = self.embed(tokens) + self.pos.weight[: tokens.size(1)]
        for block in self.blocks:
            x = block(x)
        return ModelOutput(logits=self.norm(x) @ self.embed.weight.T)  # tied LM head

    def loss(self, batch: Batch, step: int) -> LossOutput:
        logits = self(batch.tokens[:, :-1]).logits
        target = batch.tokens[:, 1:]
        if batch.valid is not None:
            target = target.masked_fill(~(batch.valid[:, 1:] & batch.valid[:, :-1]), -100)
        lm = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=-100)
        return LossOutput(total=lm, parts={"lm": lm.detach()}, n_tokens=(target != -100).sum())


def build(size: str, *, data: DataFields = DataFields(), **overrides) -> GatedGPT:
    """The builder: ``size`` a ``SIZES`` preset, ``data`` the vocabulary (and a [MASK] id), the
    ``overrides`` any ``GatedConfig`` field (``[model.gated-gpt] gate = "elementwise"``)."""
    p = SIZES[size]
    fields = dict(family="gated-gpt", size=size, vocab_size=data.vocab_size or p.vocab_size, d_model=p.d_model,
                  n_layers=p.n_layers, n_heads=p.n_heads, max_seq_len=p.max_seq_len,
                  mask_id=data.special_ids.get("mask", MASK_ID))
    return GatedGPT(GatedConfig(**{**fields, **overrides}))


register_family("gated-gpt", build, config_fields=GatedConfig,
                description="GPT with sigmoid-gated attention output (headwise or elementwise)")
