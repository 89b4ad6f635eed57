"""Hugging Face architectures as families, ``hf:<model_type>`` (docs/own-model.md): built with
``AutoModelForCausalLM.from_config`` (never a hub download) from our size presets, trained on
Eq. 1 through ``ar``'s chunked head, priced by Eq. 23 where :func:`analytic_params` knows the
architecture (else measured), exported by :func:`export_pretrained` (``transformers`` is imported
only to build or export)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn as nn

from interpscale import paper
from interpscale.errors import ConfigError, UserError
from interpscale.models.checkpoint import load_checkpoint, run_tokenizer, save_pretrained_dir
from interpscale.models.config import ConfigRecord, derived_heads, preset
from interpscale.models.objectives import ar_targets, head_loss
from interpscale.models.protocol import FamilyModel
from interpscale.models.registry import register_class
from interpscale.models.types import Batch, DataFields, LossOutput, ModelOutput

PREFIX = "hf:"
ANALYTIC_TYPES = ("llama", "qwen2", "gpt_neox")  # P from the config (Eq. 23); others are measured
MEASURED_TYPES = ("qwen3",)
NEOX_STYLE = ("gpt_neox",)  # LayerNorm, biases, no grouped-query attention
LLAMA_KNOWN_HF_KEYS = frozenset({"attention_bias", "mlp_bias"})  # hf keys the llama formula accounts for


def require_transformers():
    """The ``transformers`` module, or a UserError naming the extra to install."""
    try:
        import transformers
    except ImportError as exc:
        raise UserError(f"the hf: families need the optional package 'transformers' ({exc}); "
                        "install it with: pip install 'interpscale[hf]'") from exc
    return transformers


@dataclass
class HFConfig(ConfigRecord):
    """An ``hf:`` model's config under our names (``config.ConfigRecord``'s rule), mapped onto
    the Hugging Face config by :func:`hf_kwargs`; ``hf`` holds extra ``AutoConfig.for_model``
    arguments, which win."""

    model_type: str
    n_kv_heads: int
    d_ff: int
    rope_base: float = 5e5
    norm_eps: float = 1e-6
    init_std: float = 0.02
    tie_embeddings: bool = True
    loss_chunk_tokens: int = 4096
    activation_checkpointing: bool = False
    hf: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.check("n_kv_heads", "d_ff", "loss_chunk_tokens")
        if self.model_type in NEOX_STYLE and self.n_kv_heads != self.n_heads:
            raise ConfigError(f"{self.family}: {self.model_type} has no grouped-query attention; "
                              f"n_kv_heads={self.n_kv_heads} must equal n_heads={self.n_heads}")
        if not isinstance(self.hf, dict):
            raise ConfigError(f"{self.family}: hf must be a table of Hugging Face config arguments, got {self.hf!r}")


CONFIG_FIELDS = frozenset(f.name for f in fields(HFConfig)) - {"family", "size", "model_type"} | {"mlp_ratio"}


def hf_config(family: str, size: str, *, data: DataFields = DataFields(), **overrides: Any) -> HFConfig:
    """The config ``build_model`` gives: the preset's shape, the data's vocabulary and special ids,
    the overrides. A new width keeps the preset's head width (``config.derived_heads``); KV heads
    are the preset's at its head count, else one per head; ``d_ff`` is ``mlp_ratio`` (4) × d."""
    model_type, p = family[len(PREFIX):], preset(size)
    kw = {**data.config_fields(concept=False), **overrides}
    unknown = sorted(set(kw) - CONFIG_FIELDS)
    if unknown:
        raise ConfigError(f"unknown override(s) {unknown} for family {family!r}; valid: {sorted(CONFIG_FIELDS)}")
    d = int(kw.pop("d_model", p.d_model))
    heads = int(kw.pop("n_heads", p.n_heads if d == p.d_model else derived_heads(p, d)))
    kw.setdefault("n_kv_heads", heads if model_type in NEOX_STYLE or heads != p.n_heads else p.n_kv_heads)
    d_ff = int(kw.pop("d_ff", float(kw.pop("mlp_ratio", 4.0)) * d))
    base = {"n_layers": p.n_layers, "vocab_size": p.vocab_size, "max_seq_len": p.max_seq_len}
    return HFConfig(family=family, size=size, model_type=model_type, d_model=d, n_heads=heads, d_ff=d_ff,
                    **base | kw)


def hf_kwargs(c: HFConfig) -> dict[str, Any]:
    """Keyword arguments of ``AutoConfig.for_model(c.model_type, ...)``: our names in the
    Hugging Face ones, then ``c.hf`` (which wins)."""
    kw: dict[str, Any] = dict(
        vocab_size=c.vocab_size, hidden_size=c.d_model, num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads, intermediate_size=c.d_ff, max_position_embeddings=c.max_seq_len,
        tie_word_embeddings=c.tie_embeddings, initializer_range=c.init_std, pad_token_id=c.pad_id,
        bos_token_id=c.eos_id, eos_token_id=c.eos_id, use_cache=False)
    if c.model_type in NEOX_STYLE:
        kw |= dict(layer_norm_eps=c.norm_eps, rotary_emb_base=c.rope_base)
    else:
        kw |= dict(num_key_value_heads=c.n_kv_heads, head_dim=c.head_dim, rms_norm_eps=c.norm_eps,
                   rope_theta=c.rope_base)
    return kw | dict(c.hf)


# ---- analytic pricing (Eq. 23) -----------------------------------------------------------------
def analytic_params(c: HFConfig) -> Optional[int]:
    """Non-embedding parameters of the Hugging Face module from the config (tied head not
    counted; an untied head is an embedding-sized matrix Eq. 23 leaves out as well), or None
    where the formula does not know the architecture (another ``model_type``, other ``hf`` keys)."""
    d, L, ff, q, kv = c.d_model, c.n_layers, c.d_ff, c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    if c.model_type == "gpt_neox" and not c.hf:
        # fused QKV + dense with biases; GELU MLP with biases; two LayerNorms (w, b); final LayerNorm
        return L * ((d * 3 * d + 3 * d) + (d * d + d) + (2 * d * ff + ff + d) + 4 * d) + 2 * d
    if c.model_type == "qwen2" and not c.hf:
        # q, k, v with biases, o without; SwiGLU; two RMSNorms; final RMSNorm
        return L * (2 * d * q + 2 * d * kv + q + 2 * kv + 3 * d * ff + 2 * d) + d
    if c.model_type == "llama" and set(c.hf) <= LLAMA_KNOWN_HF_KEYS:
        attn_bias = (2 * q + 2 * kv) if c.hf.get("attention_bias") else 0  # q, k, v and o
        mlp_bias = (2 * ff + d) if c.hf.get("mlp_bias") else 0
        return L * (2 * d * q + 2 * d * kv + attn_bias + 3 * d * ff + mlp_bias + 2 * d) + d
    return None


def analytic_flops(c: HFConfig, seq_len: int) -> Optional[float]:
    """Eq. 23: 6P + 12·L·d·N (attention at the model width d = heads × head width); None
    where the formula does not know the architecture (``pricing.price`` measures)."""
    P = analytic_params(c)
    return None if P is None else paper.flops_per_token(P, c.n_layers, c.n_heads * c.head_dim, seq_len)


# ---- the model ---------------------------------------------------------------------------------
class HFCausalLM(FamilyModel):
    """A ``transformers`` causal LM (``self.hf``) behind the model protocol."""

    config_class = HFConfig
    params_fn, flops_fn = staticmethod(analytic_params), staticmethod(analytic_flops)

    def __init__(self, config: HFConfig):
        super().__init__(config)
        transformers = require_transformers()
        hf_cfg = transformers.AutoConfig.for_model(config.model_type, **hf_kwargs(config))
        self.hf = transformers.AutoModelForCausalLM.from_config(hf_cfg, attn_implementation="sdpa")
        head = self.hf.get_output_embeddings()
        if getattr(head, "bias", None) is not None:
            raise ValueError(f"{config.family}: the LM head has a bias; the chunked loss takes a weight only")
        if config.activation_checkpointing:
            self.hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    def blocks(self) -> list[nn.Module]:
        """The decoder layers: the first ``nn.ModuleList`` of the base model (``layers``)."""
        return next((list(m) for m in self.hf.base_model.children() if isinstance(m, nn.ModuleList)), [])

    def check_batch(self, batch: Batch) -> None:
        if batch.chunk_ids is not None:
            raise ValueError(f"family {self.config.family!r} has no concept module; drop chunk_ids/chunk_labels")
        t = batch.tokens
        if t.dim() != 2 or t.size(1) < 2 or t.size(1) > self.config.max_seq_len:
            raise ValueError(f"Batch.tokens must be [B, T] with 2 <= T <= max_seq_len={self.config.max_seq_len}, "
                             f"got shape {tuple(t.shape)}")
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.config.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.config.vocab_size}), got [{int(t.min())}, {int(t.max())}]")

    def forward(self, tokens: torch.Tensor, **_: Any) -> ModelOutput:
        """The Hugging Face model's own logits (what ``from_pretrained`` of the export gives)."""
        return ModelOutput(logits=self.hf(input_ids=tokens, use_cache=False).logits)

    def loss(self, batch: Batch, step: int) -> LossOutput:
        """Eq. 1: mean next-token CE over valid pairs, the LM head and CE chunked as ``ar``'s."""
        if not isinstance(batch, Batch):
            raise ValueError(f"loss() expects a Batch, got {type(batch).__name__}")
        tokens, valid = batch.tokens.long(), batch.valid
        h = self.hf.base_model(input_ids=tokens, attention_mask=_meta_mask(tokens), use_cache=False).last_hidden_state
        targets = ar_targets(tokens, None if valid is None else valid.bool())
        weight = self.hf.get_output_embeddings().weight
        lm, n = head_loss(h, weight, targets, self.config.loss_chunk_tokens)
        return LossOutput(total=lm, parts={"lm": lm.detach(), "total": lm.detach()}, n_tokens=n)


def _meta_mask(tokens: torch.Tensor) -> Optional[torch.Tensor]:
    """None (the model's own causal mask), except on the meta device (measured pricing), where Hugging
    Face's mask preparation reads tensor values: a ready 4-D mask (never read there) skips it."""
    if not tokens.is_meta:
        return None
    B, T = tokens.shape
    return torch.ones(B, 1, T, T, dtype=torch.bool, device="meta")


def register_hf_family(model_type: str, *, overwrite: bool = True) -> str:
    """Register ``hf:<model_type>`` (a decoder-only ``transformers`` model type whose config takes
    the Llama-style names, or ``gpt_neox``); returns the family name."""
    name = f"{PREFIX}{model_type}"
    register_class(name, HFCausalLM, hf_config, config_fields=CONFIG_FIELDS, overwrite=overwrite,
                   description=f"Hugging Face {model_type} (AutoModelForCausalLM.from_config), our size presets")
    return name


for _type in (*ANALYTIC_TYPES, *MEASURED_TYPES):
    register_hf_family(_type)


# ---- export --------------------------------------------------------------------------------------
def export_pretrained(source: "str | os.PathLike | nn.Module", out_dir: "str | os.PathLike", *,
                      tokenizer: Any = None) -> Path:
    """Write an ``hf:`` model, or the checkpoint at ``source``, as the directory ``interpscale
    export`` writes (``save_pretrained_dir``): ``config.json``, ``generation_config.json`` and
    ``model.safetensors``, which ``AutoModelForCausalLM.from_pretrained(out_dir)`` loads,
    ``checkpoint.json`` (our config), and the tokenizer files ``AutoTokenizer`` loads:
    ``tokenizer`` (a ``tokenizers.Tokenizer`` or a ``tokenizer.json`` path), else the
    checkpoint's run tokenizer (``checkpoint.run_tokenizer``), else none. Returns ``out_dir``."""
    path = None if isinstance(source, nn.Module) else source
    model, extra = (source, {}) if path is None else load_checkpoint(path)
    if not isinstance(model, HFCausalLM):
        fam = getattr(getattr(model, "config", None), "family", type(model).__name__)
        raise UserError(f"{path or fam}: family {fam!r} is not an hf: family; only hf:<model_type> models "
                        "export to a Hugging Face directory")
    if tokenizer is None and path is not None:
        tokenizer = run_tokenizer(path)
    return save_pretrained_dir(model, out_dir, extra=extra, write=True, tokenizer=tokenizer)
