"""What every zoo family shares: its config record and the autoregressive training protocol.

A zoo model subclasses :class:`ZooLM`, implements ``forward(tokens) -> ModelOutput`` and
the analytic ``params_nonembedding`` / ``flops_per_token`` (so the planner can plan sizes
it never builds); the next-token loss, phase handling and greedy generation live here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from interpscale.models.config import SIZES, ModelConfig, derived_heads, make_config, renamed
from interpscale.models.objectives import ar_loss as next_token_ce  # Eq. 1, shared with the backbone families
from interpscale.models.protocol import DataFields, FamilyModel
from interpscale.models.types import EOC_ID, EOS_ID, MASK_ID, PAD_ID, Batch, LossOutput, ModelOutput


@dataclass
class ZooConfig:
    """Config of a zoo model; ``extra`` holds the family-specific knobs (all JSON-able).

    Follows the rule every family's config follows (``config.renamed``, ``config.derived_heads``):
    special ids named ``pad_id`` / ``eos_id`` / ``eoc_id`` / ``mask_id``, heads derived from the preset."""

    family: str
    size: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    max_seq_len: int
    block_size: int = 64  # diffusion block of the protocol; unused by these AR families
    n_concepts: int = 0
    pad_id: int = PAD_ID
    eos_id: int = EOS_ID
    eoc_id: int = EOC_ID
    mask_id: int = MASK_ID
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"ZooConfig.{name} must be positive, got {getattr(self, name)!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")

    @property
    def mask_token_id(self) -> int:  # the name used before the special-id fields existed
        return self.mask_id

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ZooConfig":
        return cls(**renamed(data))


_CORE = ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len", "block_size", "n_concepts",
         "pad_id", "eos_id", "eoc_id", "mask_id")


def zoo_fields(defaults: dict[str, Any]) -> frozenset[str]:
    """The override names a zoo family accepts: the core fields and its extra knobs."""
    return frozenset(_CORE) | frozenset(defaults) | {"extra"}


def make_zoo_config(family: str, size: str, defaults: dict[str, Any], *, data: DataFields = DataFields(),
                    **overrides: Any) -> ZooConfig:
    """Config of a zoo ``family`` at a ``SIZES`` preset. ``data`` sets the vocabulary and special
    ids (zoo families have no concept library); ``overrides`` may name core fields
    (``d_model``, ``n_layers``, ...), keys of the family's ``defaults`` (its extra knobs),
    or pass ``extra={...}`` (the form ``to_dict`` round-trips through checkpoints)."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; known sizes: {list(SIZES)}")
    p = SIZES[size]
    core = {"vocab_size": p.vocab_size, "d_model": p.d_model, "n_layers": p.n_layers, "n_heads": p.n_heads,
            "max_seq_len": p.max_seq_len, "block_size": p.block_size, "n_concepts": 0}
    overrides = {**data.config_fields(concept=False), **renamed(overrides)}
    extra = dict(defaults) | dict(overrides.pop("extra", None) or {})
    overrides.pop("family", None), overrides.pop("size", None)
    for key, value in overrides.items():
        if key in _CORE:
            core[key] = value
        elif key in defaults:
            extra[key] = value
        else:
            raise ValueError(f"unknown override {key!r} for family {family!r}; valid: {sorted(_CORE + tuple(defaults))}")
    if "d_model" in overrides and "n_heads" not in overrides:
        core["n_heads"] = derived_heads(p, int(core["d_model"]))
    unknown = sorted(set(extra) - set(defaults))
    if unknown:
        raise ValueError(f"unknown extra key(s) {unknown} for family {family!r}; valid: {sorted(defaults)}")
    return ZooConfig(family=family, size=size, extra=extra, **core)


# knobs of the Steerling backbone that zoo families built on it expose (reetym, cocomix)
BACKBONE_DEFAULTS = {"n_kv_heads": None, "mlp_ratio": 4.0, "qk_norm": True}


def backbone_config(c: ZooConfig) -> ModelConfig:
    """The Steerling backbone's ModelConfig for a zoo config (KV heads default to the
    preset's when the head count is the preset's, else to full multi-head attention)."""
    preset, ex = SIZES[c.size], c.extra
    kv = ex["n_kv_heads"] or (preset.n_kv_heads if c.n_heads == preset.n_heads else c.n_heads)
    return make_config(c.family, c.size, n_layers=c.n_layers, d_model=c.d_model, n_heads=c.n_heads, n_kv_heads=kv,
                       vocab_size=c.vocab_size, max_seq_len=c.max_seq_len, mlp_ratio=ex["mlp_ratio"], qk_norm=ex["qk_norm"],
                       pad_id=c.pad_id, eos_id=c.eos_id, eoc_id=c.eoc_id, mask_id=c.mask_id)


class ZooLM(FamilyModel):
    """Base class: autoregressive LM protocol shared by the zoo families (``FamilyModel``
    supplies set_phase, generate, blocks; diffusion / concept come from the registry)."""

    def __init__(self, config: ZooConfig):
        super().__init__()
        self.config = config

    # --- protocol -------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, *, chunk_ids=None, chunk_labels=None) -> ModelOutput:  # noqa: D401
        raise NotImplementedError

    def forward_train(self, tokens: torch.Tensor) -> tuple[ModelOutput, dict[str, torch.Tensor]]:
        """Forward pass for the loss: the output and any intermediates ``extra_loss`` needs."""
        return self(tokens), {}

    def extra_loss(self, out: ModelOutput, aux: dict[str, torch.Tensor], batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """Family-specific auxiliary terms, already weighted (e.g. CoCoMix's λ·L_concept)."""
        return {}

    def loss(self, batch: Batch, step: int) -> LossOutput:
        if not isinstance(batch, Batch):
            raise ValueError(f"loss() expects a Batch, got {type(batch).__name__}")
        if batch.tokens.dim() != 2 or batch.tokens.size(1) < 2:
            raise ValueError(f"Batch.tokens must be [B, T] with T >= 2, got shape {tuple(batch.tokens.shape)}")
        out, aux = self.forward_train(batch.tokens)
        lm, n = next_token_ce(out.logits, batch.tokens, batch.valid)
        extras = self.extra_loss(out, aux, batch, step)
        total = lm + sum(extras.values()) if extras else lm
        parts = {"lm": lm.detach()} | {k: v.detach() for k, v in extras.items()}  # tensors: no host sync
        return LossOutput(total=total, parts=parts, n_tokens=n)

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "ZooLM":
        """Rebuild from ``config.to_dict()`` (used by ``load_checkpoint``)."""
        return cls(ZooConfig.from_dict(cfg))
