"""SteerlingLM: one class for the four Steerling families ar, cdlm, ar+concept, cdlm+concept
(§8.1), on the zoo's ``FamilyModel`` base, with their analytic price (Eq. 23 / Eq. 24, through
``interpscale.paper``), registered on import."""

from __future__ import annotations

from functools import partial
from typing import Any, Optional

import torch
import torch.nn.functional as F

from interpscale import paper
from interpscale.models.backbone import Backbone, KVCache
from interpscale.models.concept import (ConceptModule, ConceptParts, concept_loss, independence_loss,
                                        reconstruction_loss)
from interpscale.models.config import ModelConfig, make_config
from interpscale.models.generation import generate
from interpscale.models.objectives import alpha_schedule, ar_targets, head_loss, mask_batch, mdm_targets
from interpscale.models.protocol import FamilyModel
from interpscale.models.registry import get_family, register_family
from interpscale.models.types import Batch, DataFields, LossOutput, ModelOutput, PhaseSchedule


# ---- Eq. 23 / Eq. 24 on a ModelConfig (the formulas live in interpscale.paper) ------------------
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
    """Concept-module parameters (``paper.concept_module_params``: Table 23's "+Concept total")."""
    return paper.concept_module_params(cfg.d_model, cfg.n_concepts, cfg.n_unknown, cfg.concept_rank)


def steerling_price(cfg: ModelConfig, seq_len: Optional[int], *, concept: bool) -> tuple[int, Optional[float]]:
    """(P, M): P the backbone plus, when ``concept``, the concept module (Table 23's "+Concept
    total"); M = 6P_backbone + 12·L·d·N (Eq. 23) plus Eq. 24's concept terms (None without N)."""
    P = backbone_params(cfg)
    M = None if seq_len is None else paper.flops_per_token(
        P, cfg.n_layers, cfg.d_model, seq_len, concept=concept, n=cfg.n_concepts, m=cfg.n_unknown,
        rank=cfg.concept_rank)
    return P + (concept_params(cfg) if concept else 0), M


def concept_overhead_fraction(cfg: ModelConfig) -> float:
    """Concept-module share of the +Concept total non-embedding parameters (Figure 21)."""
    c = concept_params(cfg)
    return c / (c + backbone_params(cfg))


class SteerlingLM(FamilyModel):
    """Backbone (+ concept module) + tied LM head. For the diffusion families the caller of
    ``forward`` puts [MASK] (``config.mask_id``) where tokens are masked, and T is a multiple of
    ``config.block_size``; ``loss(batch, step)`` does the family's own masking / teacher forcing."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        spec = get_family(config.family)
        self.config = config
        self._diffusion, self._concept_family = spec.is_diffusion, spec.is_concept  # read in compiled code
        self.backbone = Backbone(config)
        self.concept = ConceptModule(config) if self.is_concept else None

    @property
    def is_diffusion(self) -> bool:
        return self._diffusion

    @property
    def is_concept(self) -> bool:
        return self._concept_family

    @classmethod
    def from_config(cls, data: dict[str, Any]) -> "SteerlingLM":
        return cls(ModelConfig.from_dict(data))

    @property
    def attn_kind(self) -> str:
        return "block" if self.is_diffusion else "causal"

    @property
    def lm_head(self) -> torch.Tensor:
        return self.backbone.embed.weight  # tied embeddings: W = T

    def set_phase(self, phase: PhaseSchedule) -> None:
        """Stable or anneal (Tables 25/26): α schedules and anneal-phase top-k."""
        if phase.phase not in ("stable", "anneal"):
            raise ValueError(f"phase must be 'stable' or 'anneal', got {phase.phase!r}")
        if phase.max_steps < 1:
            raise ValueError(f"PhaseSchedule.max_steps must be >= 1, got {phase.max_steps}")
        self.phase = phase
        if self.concept is not None:
            self.concept.anneal = phase.phase == "anneal"

    # --- validation ---------------------------------------------------------------
    def check_tokens(self, tokens: Any, *, need_blocks: bool = True) -> torch.Tensor:
        if not isinstance(tokens, torch.Tensor):
            raise ValueError(f"tokens must be a torch.Tensor, got {type(tokens).__name__}")
        if tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"tokens must be int64 (or int32) ids, got dtype {tokens.dtype}")
        if tokens.dim() != 2 or tokens.size(1) == 0:
            raise ValueError(f"tokens must have shape [B, T] with T >= 1, got {tuple(tokens.shape)}")
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= self.config.vocab_size:
            raise ValueError(f"token ids must be in [0, {self.config.vocab_size}), got min {lo} max {hi}")
        if need_blocks:
            self._check_blocks(tokens)
        return tokens.long()

    def _check_blocks(self, tokens: torch.Tensor) -> None:
        T = tokens.size(1)
        if self.is_diffusion and T % self.config.block_size:
            raise ValueError(f"{self.config.family} needs T to be a multiple of block_size="
                             f"{self.config.block_size}, got T={T}")

    def check_concepts(self, tokens: torch.Tensor, chunk_ids, chunk_labels):
        if chunk_ids is None and chunk_labels is None:
            return None, None
        if chunk_ids is None or chunk_labels is None:
            raise ValueError("chunk_ids and chunk_labels must be given together")
        if not self.is_concept:
            raise ValueError(f"family {self.config.family!r} has no concept module; drop chunk_ids/chunk_labels")
        if chunk_ids.shape != tokens.shape:
            raise ValueError(f"chunk_ids shape {tuple(chunk_ids.shape)} != tokens shape {tuple(tokens.shape)}")
        if chunk_labels.dim() != 3 or chunk_labels.size(0) != tokens.size(0):
            raise ValueError(f"chunk_labels must be [B, C, n] with B={tokens.size(0)}, got {tuple(chunk_labels.shape)}")
        if chunk_labels.size(2) != self.config.n_concepts:
            raise ValueError(f"chunk_labels width {chunk_labels.size(2)} != n_concepts={self.config.n_concepts}")
        C = chunk_labels.size(1)
        if chunk_ids.numel() and (int(chunk_ids.min()) < -1 or int(chunk_ids.max()) >= C):
            raise ValueError(f"chunk_ids must be in [-1, {C}), got [{int(chunk_ids.min())}, {int(chunk_ids.max())}]")
        return chunk_ids.long(), chunk_labels

    def check_batch(self, batch: Any) -> None:
        """Validate a training batch on the host, once per batch (the trainer calls it): token
        range, shapes, concept labels, and that the LM loss has positions to average over."""
        if not isinstance(batch, Batch):
            raise ValueError(f"loss() expects a Batch, got {type(batch).__name__}")
        tokens = self.check_tokens(batch.tokens)
        self.check_concepts(tokens, batch.chunk_ids, batch.chunk_labels)
        if batch.valid is not None and batch.valid.shape != tokens.shape:
            raise ValueError(f"valid shape {tuple(batch.valid.shape)} != tokens shape {tuple(tokens.shape)}")
        valid = torch.ones_like(tokens, dtype=torch.bool) if batch.valid is None else batch.valid.bool()
        pairs = valid if self.is_diffusion else valid[:, 1:] & valid[:, :-1]
        if not bool(pairs.any()):
            what = "valid tokens for the diffusion loss" if self.is_diffusion else "valid (input, target) pairs for the AR loss"
            raise ValueError(f"batch has no {what}")

    # --- forward ------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, *, chunk_ids: Optional[torch.Tensor] = None,
                chunk_labels: Optional[torch.Tensor] = None) -> ModelOutput:
        """Logits [B, T, V] (and the exact concept decomposition for concept families).
        Chunk labels only change the output in training mode (teacher forcing)."""
        tokens = self.check_tokens(tokens)
        chunk_ids, chunk_labels = self.check_concepts(tokens, chunk_ids, chunk_labels)
        return self.run(tokens, chunk_ids=chunk_ids, chunk_labels=chunk_labels)

    def run(self, tokens: Optional[torch.Tensor], *, chunk_ids: Optional[torch.Tensor] = None,
            chunk_labels: Optional[torch.Tensor] = None, step: int = 0, **backbone: Any) -> ModelOutput:
        """Unvalidated forward (generation, attribution, steering); ``backbone``: the ``embeds``,
        KV ``cache`` / ``commit`` and steering arguments of ``Backbone.forward``."""
        h = self.backbone(tokens, kind=self.attn_kind, **backbone)
        if self.concept is None:
            return ModelOutput(logits=F.linear(h, self.lm_head), hidden=h)
        p = self._concept(h, chunk_ids, chunk_labels, step, need_acts=True)
        h_bar = p.known + p.unknown + p.residual  # Eq. 5
        return ModelOutput(logits=F.linear(h_bar, self.lm_head), hidden=h, known=p.known, unknown=p.unknown,
                           residual=p.residual, known_act=p.known_act, unknown_act=p.unknown_act, parts=p)

    def _concept(self, h, chunk_ids, chunk_labels, step: int, need_acts: bool) -> ConceptParts:
        k_gt = tf_k = tf_u = None
        if chunk_ids is not None and chunk_labels is not None:
            k_gt = self.concept.ground_truth(chunk_ids, chunk_labels)
            if self.training:
                tf_k, tf_u = self._teacher_forcing_masks(chunk_ids, step)
        return self.concept(h, k_gt=k_gt, tf_known=tf_k, tf_unknown=tf_u, need_acts=need_acts)

    def _teacher_forcing_masks(self, chunk_ids: torch.Tensor, step: int):
        """Per-sequence Bernoulli(α) substitution, only where GT exists (tokens in a chunk)."""
        a_known, a_unknown = alpha_schedule(self.config, self.phase, step)
        B = chunk_ids.size(0)
        inside = chunk_ids >= 0
        rows_k = torch.rand(B, device=chunk_ids.device) < a_known
        rows_u = torch.rand(B, device=chunk_ids.device) < a_unknown
        return inside & rows_k[:, None], inside & rows_u[:, None]

    # --- training loss ------------------------------------------------------------
    def loss(self, batch: Batch, step: int) -> LossOutput:
        """Eq. 1 (AR) or Eq. 2 (CDLM), plus λ-weighted concept/rec/indep losses (Eq. 15). No host
        reads (one ``torch.compile(fullgraph=True)`` graph): values are :meth:`check_batch`'s job."""
        tokens, valid, cfg = batch.tokens.long(), batch.valid, self.config
        self._check_blocks(tokens)
        chunk_ids = None if batch.chunk_ids is None else batch.chunk_ids.long()
        chunk_labels = batch.chunk_labels
        if self.is_diffusion:
            x_t, masked = mask_batch(cfg, tokens, step, self.phase.max_steps, valid)
            targets = mdm_targets(tokens, masked)
        else:
            x_t, masked = tokens, (torch.ones_like(tokens, dtype=torch.bool) if valid is None else valid.bool())
            targets = ar_targets(tokens, None if valid is None else valid.bool())
        h = self.backbone(x_t, kind=self.attn_kind)
        p = None if self.concept is None else self._concept(h, chunk_ids, chunk_labels, step, need_acts=False)
        head_in = h if p is None else p.known + p.unknown + p.residual  # Eq. 5
        lm, n = head_loss(head_in, self.lm_head, targets, cfg.loss_chunk_tokens)
        total, parts = lm, {"lm": lm.detach()}
        if p is not None:
            total = total + self._concept_losses(p, chunk_ids, chunk_labels, masked, valid, parts)
        parts["total"] = total.detach()
        return LossOutput(total=total, parts=parts, n_tokens=n)

    def _concept_losses(self, p: ConceptParts, chunk_ids, chunk_labels, masked, valid, parts) -> torch.Tensor:
        c = self.config
        total = p.hidden.new_zeros(())
        if chunk_ids is not None:
            l_c, _ = concept_loss(p.known_logits, chunk_ids, chunk_labels, valid)
            k_gt = p.known_gt  # k̂^GT from the forward pass (Eq. 11)
            parts["concept"] = l_c.detach()
            total = total + c.lambda_concept * l_c
        else:
            k_gt = torch.zeros_like(p.hidden)
        l_rec = reconstruction_loss(p.unknown_pred, p.hidden, k_gt, masked)  # Eqs. 11-12
        coords = p.unknown_coords is not None  # û = z·B: the same loss through the R-dim coordinates
        l_ind = independence_loss(p.unknown_coords if coords else p.unknown_pred, p.known_pred, masked,
                                  basis=self.concept.unk_b if coords else None)  # Eqs. 13-14
        if c.indep_terms != 1:  # §10.2.2: L(û, k̂) + L(ε, k̂), half weight each
            eps = p.hidden - p.known_pred - p.unknown_pred
            l_ind = 0.5 * (l_ind + independence_loss(eps, p.known_pred, masked))
        parts["rec"], parts["indep"] = l_rec.detach(), l_ind.detach()
        return total + c.lambda_rec * l_rec + c.lambda_indep * l_ind

    # --- generation ---------------------------------------------------------------
    def new_cache(self, batch: int, max_len: int) -> KVCache:
        w = self.lm_head
        return KVCache(self.config, batch, max_len, w.device, w.dtype)

    def generate(self, prompt_ids: torch.Tensor, max_new_tokens: int, **kwargs: Any) -> torch.Tensor:
        """[B, P + max_new_tokens] ids; sampling and ``kwargs`` as ``models.generation.generate``."""
        return generate(self, prompt_ids, max_new_tokens, **kwargs)


def steerling_config(family: str, size: str, *, data: DataFields = DataFields(), **overrides: Any) -> ModelConfig:
    """The config as built: the data's fields, then the overrides."""
    concept = paper.PAPER_FAMILIES[family].concept
    return make_config(family, size, **{**data.config_fields(concept=concept), **overrides})


def _build(family: str, size: str, **kw: Any) -> SteerlingLM:
    return SteerlingLM(steerling_config(family, size, **kw))


def _params(family: str, size: str, **kw: Any) -> int:
    return steerling_price(steerling_config(family, size, **kw), None, concept=paper.PAPER_FAMILIES[family].concept)[0]


def _flops(family: str, size: str, seq_len: int, **kw: Any) -> float:
    return steerling_price(steerling_config(family, size, **kw), seq_len, concept=paper.PAPER_FAMILIES[family].concept)[1]


for _name, _f in paper.PAPER_FAMILIES.items():  # name -> (diffusion, concept, description), §8.1
    register_family(_name, partial(_build, _name), params_fn=partial(_params, _name),
                    flops_fn=partial(_flops, _name), is_diffusion=_f.diffusion, is_concept=_f.concept,
                    description=_f.description, config_fields=ModelConfig,
                    config_fn=partial(steerling_config, _name), overwrite=True)
