"""SteerlingLM: one class for the four Steerling families ar, cdlm, ar+concept, cdlm+concept
(§8.1), on the zoo's ``FamilyModel`` base, with their analytic price (Eq. 23 / Eq. 24, through
``interpscale.paper``), registered on import, and its sampling: AR decoding with a KV cache, CDLM
block-by-block denoising (§5.2) with confidence-based unmasking inside a block and the cache across blocks."""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
import torch.nn.functional as F

from interpscale import paper
from interpscale.models.backbone import Backbone, KVCache
from interpscale.models.concept import (ConceptModule, ConceptParts, concept_loss, independence_loss,
                                        reconstruction_loss)
from interpscale.models.config import ModelConfig, make_config
from interpscale.models.objectives import alpha_schedule, ar_targets, head_loss, mask_batch, mdm_targets
from interpscale.models.protocol import FamilyModel
from interpscale.models.registry import register_class
from interpscale.models.steering import SteerState, Steering, steer_state
from interpscale.models.types import Batch, DataFields, LossOutput, ModelOutput, PhaseSchedule, evaluating


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


def steerling_price(cfg: ModelConfig, seq_len: Optional[int], *,
                    concept: Optional[bool] = None) -> tuple[int, Optional[float]]:
    """(P, M): P the backbone plus, when ``concept`` (default: the family's), the concept module
    (Table 23's "+Concept total"); M = 6P_backbone + 12·L·d·N (Eq. 23) plus Eq. 24's concept terms
    (None without N)."""
    concept = paper.PAPER_FAMILIES[cfg.family].concept if concept is None else concept
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

    config_class = ModelConfig
    params_fn = staticmethod(lambda cfg: steerling_price(cfg, None)[0])
    flops_fn = staticmethod(lambda cfg, seq_len: steerling_price(cfg, seq_len)[1])

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.backbone = Backbone(config)
        self.concept = ConceptModule(config) if self.is_concept else None

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
        inside, B, dev = chunk_ids >= 0, chunk_ids.size(0), chunk_ids.device
        rows_k = torch.rand(B, device=dev) < a_known
        return inside & rows_k[:, None], inside & (torch.rand(B, device=dev) < a_unknown)[:, None]

    # --- training loss ------------------------------------------------------------
    def loss(self, batch: Batch, step: int) -> LossOutput:
        """Eq. 1 (AR) or Eq. 2 (CDLM), plus λ-weighted concept/rec/indep losses (Eq. 15). No host
        reads (one ``torch.compile(fullgraph=True)`` graph): values are :meth:`check_batch`'s job."""
        tokens, valid = batch.tokens.long(), batch.valid
        self._check_blocks(tokens)
        chunk_ids = None if batch.chunk_ids is None else batch.chunk_ids.long()
        chunk_labels = batch.chunk_labels
        x_t, masked, targets = self.loss_inputs(tokens, step, valid)
        h = self.backbone(x_t, kind=self.attn_kind)
        p = None if self.concept is None else self._concept(h, chunk_ids, chunk_labels, step, need_acts=False)
        head_in = h if p is None else p.known + p.unknown + p.residual  # Eq. 5
        lm, n = head_loss(head_in, self.lm_head, targets, self.config.loss_chunk_tokens)
        total, parts = lm, {"lm": lm.detach()}
        if p is not None:
            total = total + self._concept_losses(p, chunk_ids, chunk_labels, masked, valid, parts)
        parts["total"] = total.detach()
        return LossOutput(total=total, parts=parts, n_tokens=n)

    def loss_inputs(self, tokens: torch.Tensor, step: int, valid: Optional[torch.Tensor] = None):
        """(model input, loss positions, targets): Eq. 2's masked tokens, the masked positions and their
        clean tokens (diffusion), else the tokens, the valid positions and Eq. 1's next-token targets."""
        valid = None if valid is None else valid.bool()
        if self.is_diffusion:
            x_t, masked = mask_batch(self.config, tokens, step, self.phase.max_steps, valid)
            return x_t, masked, mdm_targets(tokens, masked)
        positions = torch.ones_like(tokens, dtype=torch.bool) if valid is None else valid
        return tokens, positions, ar_targets(tokens, valid)

    def _concept_losses(self, p: ConceptParts, chunk_ids, chunk_labels, masked, valid, parts) -> torch.Tensor:
        c, total = self.config, 0.0
        if chunk_ids is not None:
            l_c, _ = concept_loss(p.known_logits, chunk_ids, chunk_labels, valid)
            parts["concept"], total = l_c.detach(), c.lambda_concept * l_c
        k_gt = torch.zeros_like(p.hidden) if chunk_ids is None else p.known_gt  # k̂^GT of the forward, Eq. 11
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
        return KVCache(self.config, batch, max_len, self.lm_head.device, self.lm_head.dtype)

    @torch.no_grad()
    def generate(self, prompt_ids: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
                 top_k: Optional[int] = None, steer: Optional[Steering] = None, use_cache: bool = True,
                 steps_per_block: Optional[int] = None, seed: Optional[int] = None,
                 generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """[B, P + max_new_tokens] ids: AR sampling with a KV cache, or CDLM block-by-block
        confidence-based denoising with the cache across blocks; ``steer`` amplifies or suppresses
        a concept (Eqs. 18–21)."""
        prompt = self.check_tokens(prompt_ids, need_blocks=False)
        if int(max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if top_k is not None and top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if generator is None:
            generator = torch.Generator().manual_seed(0 if seed is None else int(seed))
        st = steer_state(self, steer) if steer is not None else None
        with evaluating(self):
            fn = _generate_cdlm if self.is_diffusion else _generate_ar
            return fn(self, prompt, int(max_new_tokens), temperature, top_k, st, use_cache, steps_per_block,
                      generator)


def steerling_config(family: str, size: str, *, data: DataFields = DataFields(), **overrides: Any) -> ModelConfig:
    """The config as built: the data's fields, then the overrides."""
    concept = paper.PAPER_FAMILIES[family].concept
    return make_config(family, size, **data.config_fields(concept=concept) | overrides)


for _name, _f in paper.PAPER_FAMILIES.items():  # name -> (diffusion, concept, description), §8.1
    register_class(_name, SteerlingLM, steerling_config, is_diffusion=_f.diffusion, is_concept=_f.concept,
                   description=_f.description, config_fields=ModelConfig)


# ---- sampling ----------------------------------------------------------------------------------
def _sample(logits: torch.Tensor, temperature: float, top_k: Optional[int], gen: torch.Generator):
    """(token ids, probability of the chosen id) for logits [..., V]; temperature 0 is greedy."""
    z = logits.float()
    if top_k is not None and top_k < z.size(-1):
        z = z.masked_fill(z < z.topk(top_k, dim=-1).values[..., -1:], float("-inf"))
    probs = (z if temperature == 0 else z / temperature).softmax(-1)
    if temperature == 0:
        p, idx = probs.max(-1)
        return idx, p
    idx = torch.multinomial(probs.reshape(-1, probs.size(-1)).cpu(), 1, generator=gen)
    idx = idx.view(probs.shape[:-1]).to(logits.device)
    return idx, probs.gather(-1, idx.unsqueeze(-1)).squeeze(-1)


def _logits(model, tokens, st: Optional[SteerState], steer_mask, cache=None, commit=False):
    out = model.run(tokens, cache=cache, commit=commit,
                    steer_vec=None if st is None else st.vec, steer_mask=steer_mask,
                    steer_layer=0 if st is None else st.layer)
    logits = out.logits
    if st is not None and st.logit_penalty is not None:
        logits = logits - st.logit_penalty * steer_mask.unsqueeze(-1).to(logits.dtype)  # Eq. 21
    logits[..., model.config.mask_id] = float("-inf")  # [MASK] is never an output token
    return logits


def _generate_ar(model, prompt, n_new, temperature, top_k, st, use_cache, _steps, gen):
    B, P = prompt.shape
    cache = model.new_cache(B, P + n_new) if use_cache else None
    seq = inp = prompt  # with a cache, each step feeds only the newest token
    for _ in range(n_new):
        pos = torch.arange(seq.size(1) - inp.size(1), seq.size(1), device=seq.device)
        mask = (pos >= P - 1).expand(B, -1)  # steering acts on the positions that produce new tokens
        nxt, _ = _sample(_logits(model, inp, st, mask, cache, commit=use_cache)[:, -1], temperature, top_k, gen)
        seq = torch.cat([seq, nxt[:, None]], dim=1)
        inp = nxt[:, None] if use_cache else seq
    return seq


def _generate_cdlm(model, prompt, n_new, temperature, top_k, st, use_cache, steps_per_block, gen):
    b, mask_id = model.config.block_size, model.config.mask_id
    B, P = prompt.shape
    n_full = P // b
    total = math.ceil((P + n_new) / b) * b  # whole blocks; the tail is cut at the end
    cache = model.new_cache(B, total) if use_cache else None
    if use_cache and n_full:
        model.run(prompt[:, : n_full * b], cache=cache, commit=True)  # prefill whole prompt blocks
    done = prompt[:, : n_full * b]
    carry = prompt[:, n_full * b:]  # prompt tokens in the first generated block
    while done.size(1) < total:
        block = torch.full((B, b), mask_id, dtype=prompt.dtype, device=prompt.device)
        block[:, : carry.size(1)] = carry
        masked = (torch.arange(b, device=prompt.device) >= carry.size(1)).expand(B, b)
        carry = carry[:, :0]
        n_masked = int(masked[0].sum())
        steps = min(steps_per_block or n_masked, n_masked)
        for s in range(steps):
            ctx = block if use_cache else torch.cat([done, block], dim=1)  # without a cache, the whole context
            at = masked if use_cache else torch.cat([torch.zeros_like(done, dtype=torch.bool), masked], dim=1)
            logits = _logits(model, ctx, st, at, cache)[:, -b:]
            cand, conf = _sample(logits, temperature, top_k, gen)
            conf = conf.masked_fill(~masked, float("-inf"))
            k = math.ceil(int(masked[0].sum()) / (steps - s))  # spread the remaining masks evenly
            pick = conf.topk(k, dim=-1).indices
            sel = torch.zeros_like(masked).scatter(1, pick, True) & masked
            block = torch.where(sel, cand, block)
            masked = masked & ~sel
        if use_cache:
            model.run(block, cache=cache, commit=True)  # clean K/V of the finished block
        done = torch.cat([done, block], dim=1)
    return done[:, : P + n_new]
