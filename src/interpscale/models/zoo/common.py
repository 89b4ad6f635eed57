"""What every zoo family shares: its config record and the autoregressive training protocol (a
:class:`ZooLM` subclass writes ``forward`` and its analytic ``params_fn`` / ``flops_fn``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from interpscale.models.config import SIZES, ConfigRecord, ModelConfig, derived_heads, make_config, preset
from interpscale.models.objectives import ar_loss as next_token_ce  # Eq. 1, shared with the backbone families
from interpscale.models.protocol import FamilyModel
from interpscale.models.types import Batch, DataFields, LossOutput, ModelOutput
from interpscale.errors import ConfigError


@dataclass
class ZooConfig(ConfigRecord):
    """Config of a zoo model (``ConfigRecord``'s rule); ``extra`` holds the family's own knobs (JSON-able)."""

    block_size: int = 64  # diffusion block of the protocol; unused by these AR families
    n_concepts: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.check()


_CORE = ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len", "block_size", "n_concepts",
         "pad_id", "eos_id", "eoc_id", "mask_id")


def zoo_fields(defaults: dict[str, Any]) -> frozenset[str]:
    """The override names a zoo family accepts: the core fields and its extra knobs."""
    return frozenset(_CORE) | frozenset(defaults) | {"extra"}


def make_zoo_config(family: str, size: str, defaults: dict[str, Any], *, data: DataFields = DataFields(),
                    **overrides: Any) -> ZooConfig:
    """Config of a zoo ``family`` at a ``SIZES`` preset: the data's vocabulary and special ids, then
    overrides of core fields, of its extra knobs ``defaults``, or ``extra={...}`` (as checkpoints)."""
    p = preset(size)
    core = {"vocab_size": p.vocab_size, "d_model": p.d_model, "n_layers": p.n_layers, "n_heads": p.n_heads,
            "max_seq_len": p.max_seq_len, "block_size": p.block_size, "n_concepts": 0}
    overrides = {**data.config_fields(concept=False), **overrides}
    extra = dict(defaults) | dict(overrides.pop("extra", None) or {})
    overrides.pop("family", None), overrides.pop("size", None)
    for key, value in overrides.items():
        if key not in _CORE and key not in defaults:
            raise ConfigError(f"unknown override {key!r} for family {family!r}; valid: {sorted(_CORE + tuple(defaults))}")
        (core if key in _CORE else extra)[key] = value
    if "d_model" in overrides and "n_heads" not in overrides:
        core["n_heads"] = derived_heads(p, int(core["d_model"]))
    unknown = sorted(set(extra) - set(defaults))
    if unknown:
        raise ConfigError(f"unknown extra key(s) {unknown} for family {family!r}; valid: {sorted(defaults)}")
    return ZooConfig(family=family, size=size, extra=extra, **core)


# knobs of the Steerling backbone that zoo families built on it expose (reetym, cocomix)
BACKBONE_DEFAULTS = {"n_kv_heads": None, "mlp_ratio": 4.0, "qk_norm": True}


def backbone_config(c: ZooConfig) -> ModelConfig:
    """The Steerling backbone's ModelConfig for a zoo config (KV heads default to the
    preset's when the head count is the preset's, else to full multi-head attention)."""
    p, ex = SIZES[c.size], c.extra
    kv = ex["n_kv_heads"] or (p.n_kv_heads if c.n_heads == p.n_heads else c.n_heads)
    return make_config(c.family, c.size, n_layers=c.n_layers, d_model=c.d_model, n_heads=c.n_heads, n_kv_heads=kv,
                       vocab_size=c.vocab_size, max_seq_len=c.max_seq_len, mlp_ratio=ex["mlp_ratio"],
                       qk_norm=ex["qk_norm"], pad_id=c.pad_id, eos_id=c.eos_id, eoc_id=c.eoc_id, mask_id=c.mask_id)


class ZooLM(FamilyModel):
    """Base of the zoo families: Eq. 1's loss plus ``extra_loss`` terms; ``params_fn`` /
    ``flops_fn`` (of a config) are the family's analytic price, which ``pricing.price`` reads."""

    config_class = ZooConfig
    params_fn: Callable[[ZooConfig], int]
    flops_fn: Callable[[ZooConfig, int], float]

    def extra_loss(self, out: ModelOutput, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """Family-specific auxiliary terms, already weighted (e.g. CoCoMix's λ·L_concept, from the
        intermediates its forward leaves in ``out.parts``)."""
        return {}

    def loss(self, batch: Batch, step: int) -> LossOutput:
        if not isinstance(batch, Batch):
            raise ValueError(f"loss() expects a Batch, got {type(batch).__name__}")
        if batch.tokens.dim() != 2 or batch.tokens.size(1) < 2:
            raise ValueError(f"Batch.tokens must be [B, T] with T >= 2, got shape {tuple(batch.tokens.shape)}")
        out = self(batch.tokens)
        lm, n = next_token_ce(out.logits, batch.tokens, batch.valid)
        extras = self.extra_loss(out, batch, step)
        total = lm + sum(extras.values()) if extras else lm
        parts = {"lm": lm.detach()} | {k: v.detach() for k, v in extras.items()}  # tensors: no host sync
        return LossOutput(total=total, parts=parts, n_tokens=n)
