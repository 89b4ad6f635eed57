"""The one config rule every family follows, the Steerling families' ``ModelConfig``, and the size
presets, which are ``ModelConfig`` records themselves (Table 23 plus tiny CPU sizes, the sizes a
sweep defines, and generated names ``L<layers>d<width>``)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Optional

from interpscale import paper
from interpscale.errors import ConfigError
from interpscale.models.types import EOC_ID, EOS_ID, MASK_ID, PAD_ID, SPECIAL_IDS

PAPER_N_CONCEPTS = paper.N_KNOWN  # Table 25: n, shared across all sizes
SPECIAL_ID_FIELDS = tuple(f"{k}_id" for k in SPECIAL_IDS)  # pad_id, eos_id, eoc_id, mask_id


@dataclass(kw_only=True)
class ConfigRecord:
    """The one config rule, the base of every family's config: the shape and the special-token ids
    (the bundled tokenizer's by default; a pretrained tokenizer passes its own), and their checks."""

    family: str
    size: str
    n_layers: int
    d_model: int
    n_heads: int
    vocab_size: int
    max_seq_len: int = 4096
    pad_id: int = PAD_ID
    eos_id: int = EOS_ID
    eoc_id: int = EOC_ID
    mask_id: int = MASK_ID  # diffusion [MASK]; also the IG baseline (Eq. 16)

    def check(self, *positive: str) -> None:
        for name in ("n_layers", "d_model", "n_heads", "vocab_size", "max_seq_len", *positive):
            if int(getattr(self, name)) <= 0:
                raise ConfigError(f"{self.family}: {name} must be positive, got {getattr(self, name)!r}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"{self.family}: d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.n_heads % getattr(self, "n_kv_heads", 1):
            raise ConfigError(f"{self.family}: n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads}")
        for name in SPECIAL_ID_FIELDS:
            if not 0 <= int(getattr(self, name)) < self.vocab_size:
                raise ConfigError(f"{self.family}: {name}={getattr(self, name)!r} is not a token id of "
                                  f"vocab_size={self.vocab_size}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"unknown {cls.__name__} fields: {unknown}")
        return cls(**data)


@dataclass
class ModelConfig(ConfigRecord):
    """A Steerling-family model's config. Defaults follow App. G: post-norm RMSNorm, QK-norm, RoPE
    base 5e5, SwiGLU ratio 4, no biases, clip_qkv 10, tied embeddings, dropout 0; CDLM block 64,
    t ~ U(0.05, 0.95); concept module per Table 25 (stable) and Table 26 (anneal)."""

    n_kv_heads: int
    mlp_ratio: float = 4.0
    rope_base: float = 5e5
    clip_qkv: Optional[float] = 10.0
    qk_norm: bool = True
    norm_eps: float = 1e-6
    dropout: float = 0.0
    init_std: float = 0.02
    # memory: tokens per LM-head + cross-entropy chunk (logits of one chunk alive at a time),
    # and per-block activation checkpointing (recompute each block in the backward pass)
    loss_chunk_tokens: int = 4096
    activation_checkpointing: bool = False
    # diffusion (CDLM families)
    block_size: int = 64
    t_min: float = 0.05
    t_max: float = 0.95
    mask_schedule: str = "uniform"  # "uniform" | "gaussian" (App. J.2 moving Gaussian)
    per_block_t: bool = True  # §5.4.2: independent t_b per block
    gauss_center: tuple[float, float] = (0.2, 0.8)
    gauss_sigma: float = 0.3
    # concept module (+concept families)
    n_concepts: int = PAPER_N_CONCEPTS
    unknown_ratio: int = 3  # m = 3n
    concept_rank: Optional[int] = 256  # None -> dense U (m×d)
    topk_known: Optional[int] = 16  # Table 25 (stable phase)
    topk_unknown: Optional[int] = None
    anneal_topk_known: Optional[int] = 32  # Table 26
    anneal_topk_unknown: Optional[int] = 128
    lambda_concept: float = 1.0
    lambda_rec: float = 1.0
    lambda_indep: float = 1.0
    indep_terms: int = 1  # 2 = mid-training variant (§10.2.2)
    p_cfg: float = 0.1
    p_eps: float = 0.3
    # teacher-forcing probabilities of substituting ground truth (§5.4.2, Tables 25-26)
    alpha_known_start: float = 1.0
    alpha_known_floor: float = 0.5
    alpha_unknown_start: float = 1.0
    alpha_unknown_floor: float = 0.5
    alpha_ramp_frac: float = 0.10
    anneal_alpha_known: tuple[float, float] = (0.5, 0.0)
    anneal_alpha_unknown: float = 0.0

    def __post_init__(self) -> None:
        self.check("n_kv_heads", "block_size", "loss_chunk_tokens")
        if self.head_dim % 2:
            raise ConfigError(f"head_dim={self.head_dim} must be even for RoPE")
        if not 0.0 <= self.t_min < self.t_max <= 1.0:
            raise ConfigError(f"need 0 <= t_min < t_max <= 1, got t_min={self.t_min}, t_max={self.t_max}")
        if self.mask_schedule not in ("uniform", "gaussian"):
            raise ConfigError(f"mask_schedule must be 'uniform' or 'gaussian', got {self.mask_schedule!r}")
        if self.indep_terms not in (1, 2):
            raise ConfigError(f"indep_terms must be 1 or 2, got {self.indep_terms!r}")
        if self.n_concepts < 0:
            raise ConfigError(f"n_concepts must be >= 0, got {self.n_concepts}")
        self.gauss_center = tuple(self.gauss_center)  # JSON round-trips tuples as lists
        self.anneal_alpha_known = tuple(self.anneal_alpha_known)

    @property
    def n_unknown(self) -> int:
        return self.unknown_ratio * self.n_concepts

    @property
    def mlp_hidden(self) -> int:
        return int(self.mlp_ratio * self.d_model)


# ---- size presets: ModelConfig records (family "") ------------------------------------------------
def _tiny(name: str, n_layers: int, d_model: int, n_heads: int) -> ModelConfig:
    # CPU demo sizes: MHA, small vocab/concept library, short blocks so a 64-token
    # sequence still holds several diffusion blocks.
    return ModelConfig(family="", size=name, n_layers=n_layers, d_model=d_model, n_heads=n_heads, n_kv_heads=n_heads,
                       vocab_size=512, max_seq_len=512, block_size=16, n_concepts=32, concept_rank=16)


# Table 23 gives L, d and the counts; the head counts are ours (App. G's head width 128 at
# two KV heads reproduces the counts; docs/models.md). 5B: no KV-head count reproduces
# 5,694M at L=24, d=3840; full MHA is closest (-0.6%).
PAPER_HEADS = {"10M": (4, 2), "25M": (4, 2), "85M": (6, 2), "200M": (8, 2), "400M": (10, 2), "800M": (14, 2),
               "1.5B": (18, 2), "3B": (24, 3), "5B": (30, 30)}  # size -> (n_heads, n_kv_heads)
GENERATED = re.compile(r"L([1-9][0-9]*)d([1-9][0-9]*)")  # the adaptive sweep's names (orchestration.adaptive.LADDER)
GENERATED_BASE = "nano"


def generated_heads(d_model: int) -> int:
    """Heads of a generated size: head width 16 from d = 32, two heads at 16 and 24, else one
    (the adaptive sweep's ladder, ``orchestration.adaptive.LADDER``)."""
    if d_model >= 32 and d_model % 16 == 0:
        return d_model // 16
    return 2 if d_model in (16, 24) else 1


class Sizes(dict):
    """Size presets by name: the built-in ones, those a sweep defines (:meth:`define`: a base
    preset and config fields) and generated names ``L<layers>d<width>`` on the ``nano`` base,
    valid wherever a size is without being listed."""

    def __missing__(self, name: str) -> ModelConfig:
        m = GENERATED.fullmatch(name) if isinstance(name, str) else None
        if m is None:
            raise KeyError(name)
        d = int(m[2])
        return _apply(dict.__getitem__(self, GENERATED_BASE), name, {"n_layers": int(m[1]), "d_model": d,
                                                                       "n_heads": generated_heads(d)})

    def __contains__(self, name: object) -> bool:
        return self.get(name) is not None

    def get(self, name, default=None):
        try:
            return self[name]
        except (KeyError, ValueError):  # not a preset, or a generated name of an invalid shape
            return default

    def define(self, name: str, base: str, **fields_: Any) -> ModelConfig:
        """Add (or replace) preset ``name``: ``base``'s fields, then ``fields_`` (those ``ModelConfig``
        has; a family's own keys are passed to its builder as overrides). Built-in names are fixed."""
        if name in BUILTIN_SIZES and name != base:
            raise ConfigError(f"size {name!r} is a built-in preset; name the size preset otherwise")
        if name in BUILTIN_SIZES:
            return self[name]
        own = {f.name for f in fields(ModelConfig)} - {"family", "size"}
        self[name] = _apply(self[base], name, {k: v for k, v in fields_.items() if k in own})
        return self[name]


def derived_heads(p: ModelConfig, d_model: int) -> int:
    """Heads for a width that overrides the preset's: keep its head width where it divides
    ``d_model``, else heads of width 32, else one head."""
    hd = p.head_dim
    if d_model % hd == 0 and d_model >= hd:
        return d_model // hd
    return max(1, d_model // 32) if d_model % 32 == 0 else 1


def _apply(p: ModelConfig, size: str, overrides: dict[str, Any], family: Optional[str] = None) -> ModelConfig:
    """``p`` renamed ``size`` (and ``family``) with ``overrides``: a new width without heads keeps
    the preset's head width (:func:`derived_heads`), new heads without KV heads are full MHA."""
    overrides = dict(overrides)
    if "d_model" in overrides and "n_heads" not in overrides:
        overrides["n_heads"] = derived_heads(p, int(overrides["d_model"]))
    if "n_heads" in overrides and "n_kv_heads" not in overrides:
        overrides["n_kv_heads"] = overrides["n_heads"]
    return replace(p, family=p.family if family is None else family, size=size, **overrides)


SIZES: Sizes = Sizes(
    (p.size, p)
    for p in (
        _tiny("nano", 2, 32, 2),  # ≈ 33k non-embedding params
        _tiny("micro", 2, 64, 2),  # ≈ 132k
        _tiny("tiny", 3, 96, 3),  # ≈ 444k
        _tiny("mini", 4, 128, 4),  # ≈ 1.05M
        _tiny("small", 5, 160, 5),  # ≈ 2.05M
        *(ModelConfig(family="", size=name, n_layers=L, d_model=d, n_heads=PAPER_HEADS[name][0],
                      n_kv_heads=PAPER_HEADS[name][1], vocab_size=paper.VOCAB_SIZE)
          for name, (L, d, _, _) in paper.TABLE23.items()),
    )
)
BUILTIN_SIZES = frozenset(SIZES)
PAPER_SIZES = tuple(paper.TABLE23)
TINY_SIZES = tuple(n for n in SIZES if n not in paper.TABLE23)


def preset(size: str) -> ModelConfig:
    """The size preset ``size`` (built-in, defined or generated)."""
    if size not in SIZES:
        raise ConfigError(f"unknown size {size!r}; known sizes: {list(SIZES)} or generated L<layers>d<width>")
    return SIZES[size]


def make_config(family: str, size: str, **overrides: Any) -> ModelConfig:
    """The config of ``family`` at preset ``size`` with ``overrides`` applied (no allocation)."""
    known = {f.name for f in fields(ModelConfig)}
    bad = sorted(set(overrides) - known)
    if bad:
        raise ConfigError(f"unknown model override(s) {bad}; valid: {sorted(known - {'family', 'size'})}")
    return _apply(preset(size), size, overrides, family)
