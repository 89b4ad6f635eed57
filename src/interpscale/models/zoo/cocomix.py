"""CoCoMix (continuous concept mixing) and its pause-token and knowledge-distillation baselines
(method, knobs and counts: docs/zoo.md). Building reads no file: teacher and SAE are passed in or
attached (``orchestration.teachers`` trains, saves and loads them); without them it runs forward."""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from interpscale.models.lm import backbone_params
from interpscale.models.backbone import Backbone
from interpscale.models.config import SIZES, make_config
from interpscale.models.types import Batch, ModelOutput
from interpscale.models.zoo.common import BACKBONE_DEFAULTS, ZooConfig, ZooLM, backbone_config
from interpscale.models.zoo.mxd import TopKSAE
from interpscale.models.zoo.replace import find_blocks, override_output
from interpscale.errors import ConfigError

COCOMIX_DEFAULTS = {
    "variant": "cocomix",  # cocomix | pause | kd
    "insert_layer": None,  # blocks run on T tokens before interleaving (default L // 2)
    "k_concept": 32,  # TopK of the predicted logits (App. A)
    "k_attr": 4,  # concept targets per token (App. A)
    "lam": 0.1,  # λ of the concept loss (Eq. 4)
    "lambda_kd": 0.1,  # KD baseline weight
    "teacher_size": "tiny",  # SIZES preset of the teacher (an ``ar`` model); fixes analytic FLOPs
    "teacher_layer": None,  # L_con (default: the teacher's middle layer)
    "sae_width": None,  # C, the SAE's concept count (default 8·d_teacher)
    "teacher_checkpoint": None,  # paths recorded by orchestration.teachers.prepare_cocomix_teacher;
    "sae_checkpoint": None,  # read by orchestration.teachers.attach_frozen, never by the model
    "count_teacher": True,  # include the teacher's forward (+ attribution backward) in FLOPs
    **BACKBONE_DEFAULTS,
}
VARIANTS = ("cocomix", "pause", "kd")


def topk_keep(z: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest entries of the last axis, zero the rest (TopK of Eq. 3)."""
    vals, idx = z.topk(k, dim=-1)
    return torch.zeros_like(z).scatter(-1, idx, vals)


# ---- teacher side: SAE and attribution targets -------------------------------------------
def _teacher_logits(teacher: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """The teacher's logits without re-validating token values (an LM's ``run``)."""
    run = getattr(teacher, "run", None)
    return (run(tokens) if run is not None else teacher(tokens)).logits


def concept_targets(teacher: nn.Module, sae: TopKSAE, layer: int, tokens: torch.Tensor, k_attr: int = 4) -> torch.Tensor:
    """[B, T−1, k_attr] indices of the largest a_t = c_t ⊙ ∇_{c_t}(−log p(x_{t+1})) (Eq. 1). The
    teacher's layer-L_con state becomes D(c) plus the detached SAE error (outputs unchanged, the
    gradient reaches c); the loss is the sequence's summed CE, so ∇_{c_t} carries c_t's effect on
    later positions through attention."""
    store: dict[str, torch.Tensor] = {}

    def through_sae(_inp, h):
        c = sae.encode(h.detach()).requires_grad_(True)
        store["c"] = c
        rec = sae.decode(c)
        return rec + (h - rec).detach()

    with torch.enable_grad(), override_output(find_blocks(teacher)[layer - 1], through_sae):
        logits = _teacher_logits(teacher, tokens)
        ce = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten(), reduction="sum")
        (grad,) = torch.autograd.grad(ce, store["c"])
    attribution = store["c"].detach() * grad  # Eq. 1
    return attribution[:, :-1].topk(k_attr, dim=-1).indices


# ---- the student -------------------------------------------------------------------
def _dims(c: ZooConfig) -> tuple[int, int, int]:
    """(insert_layer, C, L_con) with defaults resolved."""
    ex, t = c.extra, SIZES[c.extra["teacher_size"]]
    ins = ex["insert_layer"] if ex["insert_layer"] is not None else max(1, c.n_layers // 2)
    if ex["variant"] not in VARIANTS:
        raise ConfigError(f"variant must be one of {VARIANTS}, got {ex['variant']!r}")
    if ex["variant"] != "kd" and not 0 < ins < c.n_layers:
        raise ConfigError(f"insert_layer={ins} must be in [1, n_layers={c.n_layers}) so that blocks remain after it")
    return ins, ex["sae_width"] or 8 * t.d_model, ex["teacher_layer"] or max(1, t.n_layers // 2)


def cocomix_params(c: ZooConfig) -> int:
    """Trainable non-embedding parameters: backbone + concept head (d·C + C) and
    compression (C·d + d) for cocomix, the pause vector (d) for pause; teacher excluded."""
    _, C, _ = _dims(c)
    d, v = c.d_model, c.extra["variant"]
    extra = {"cocomix": 2 * d * C + C + d, "pause": d, "kd": 0}[v]
    return backbone_params(backbone_config(c)) + extra


def cocomix_flops_per_token(c: ZooConfig, seq_len: int) -> float:
    """Eq. 23 with the doubled sequence (2 positions per token, context 2N) above the insertion
    layer, the concept head, the compression and, with ``count_teacher``, the teacher (docs/zoo.md)."""
    bcfg = backbone_config(c)
    ins, C, _ = _dims(c)
    d, L, N, v = c.d_model, c.n_layers, int(seq_len), c.extra["variant"]
    per_layer = (backbone_params(bcfg) - d) / L
    upper = 0 if v == "kd" else L - ins
    m = 6.0 * per_layer * (L - upper) + 12.0 * per_layer * upper + 6.0 * d
    m += 12.0 * d * N * (L - upper) + 48.0 * d * N * upper
    if v == "cocomix":
        m += 6.0 * d * C + 6.0 * c.extra["k_concept"] * d
    if c.extra["count_teacher"] and v != "pause":
        t = SIZES[c.extra["teacher_size"]]
        fwd = 2.0 * backbone_params(make_config("ar", c.extra["teacher_size"])) + 4.0 * t.n_layers * t.d_model * N
        m += fwd if v == "kd" else 2.0 * fwd + 6.0 * t.d_model * C
    return m


class CoCoMixLM(ZooLM):
    params_fn, flops_fn = staticmethod(cocomix_params), staticmethod(cocomix_flops_per_token)
    objects = ("teacher", "sae")  # build_model("cocomix", size, teacher=model, sae=sae) passes them through

    def __init__(self, config: ZooConfig, *, teacher: Optional[nn.Module] = None, sae: Optional[TopKSAE] = None):
        super().__init__(config)
        ex, d = config.extra, config.d_model
        self.variant = ex["variant"]
        self.insert_layer, self.n_sae, self.teacher_layer = _dims(config)
        self.backbone = Backbone(backbone_config(config))
        if self.variant == "cocomix":
            if ex["k_concept"] > self.n_sae or ex["k_attr"] > self.n_sae:
                raise ConfigError(f"k_concept={ex['k_concept']} / k_attr={ex['k_attr']} exceed sae_width={self.n_sae}")
            self.concept_head = nn.Linear(d, self.n_sae)  # M (Eq. 2)
            self.compress = nn.Linear(self.n_sae, d)  # W, b (Eq. 3)
        elif self.variant == "pause":
            self.pause = nn.Parameter(torch.randn(d) * 0.02)
        self._frozen: dict[str, Any] = {}  # teacher and SAE: not parameters, not in state_dict
        if self.variant != "pause" and (teacher is not None or sae is not None):
            self.attach_teacher(teacher, sae)

    @property
    def needs_teacher(self) -> bool:
        """True while a variant that trains against the teacher has none attached."""
        return self.variant != "pause" and not self._frozen

    def attach_teacher(self, teacher: Optional[nn.Module], sae: Optional[TopKSAE], *,
                       sae_layer: Optional[int] = None) -> None:
        """Attach the frozen teacher (and, for ``cocomix``, its SAE trained at ``sae_layer``)."""
        if teacher is None:
            raise ValueError(f"{self.config.family} needs a frozen teacher: pass teacher= (and sae= for cocomix)")
        ex = self.config.extra
        if self.variant == "cocomix" and sae is None:
            raise ValueError("cocomix needs the teacher's SAE: pass sae=")
        if sae_layer is not None and sae_layer != self.teacher_layer:
            raise ValueError(f"SAE was trained at teacher layer {sae_layer}, config says teacher_layer={self.teacher_layer}")
        if teacher.config.vocab_size != self.config.vocab_size:
            raise ValueError(f"teacher vocab_size={teacher.config.vocab_size} != student vocab_size={self.config.vocab_size}")
        t = SIZES[ex["teacher_size"]]
        if (teacher.config.d_model, teacher.config.n_layers) != (t.d_model, t.n_layers):
            raise ValueError(f"teacher is d={teacher.config.d_model}, L={teacher.config.n_layers} but "
                             f"teacher_size={ex['teacher_size']!r} is d={t.d_model}, L={t.n_layers}")
        if sae is not None and sae.width != self.n_sae:
            raise ValueError(f"SAE width {sae.width} != sae_width={self.n_sae}")
        self._frozen = {"teacher": teacher.eval().requires_grad_(False), "sae": sae}

    def _apply(self, fn, *args, **kwargs):  # .to()/.cuda() also move the frozen teacher and SAE
        super()._apply(fn, *args, **kwargs)
        for m in self._frozen.values():
            if m is not None:
                m._apply(fn, *args, **kwargs)
        return self

    def forward(self, tokens: torch.Tensor, *, chunk_ids=None, chunk_labels=None) -> ModelOutput:
        """Logits; ``parts`` holds the predicted concept logits z (``concept_logits``) for the loss."""
        bb, L = self.backbone, self.config.n_layers
        x = bb.embed(tokens)
        B, T, d = x.shape
        if T > self.config.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds max_seq_len {self.config.max_seq_len}")
        cos, sin = bb.rope_cos[:T].to(x.dtype), bb.rope_sin[:T].to(x.dtype)
        aux: dict[str, torch.Tensor] = {}
        for i in range(L):
            if i == self.insert_layer and self.variant != "kd":
                if self.variant == "cocomix":
                    z = aux["concept_logits"] = self.concept_head(x)  # z_t = M(h_t)
                    mix = self.compress(topk_keep(z, self.config.extra["k_concept"]))  # ĉ_t (Eq. 3)
                else:
                    mix = self.pause.expand(B, T, d)
                x = torch.stack([x, mix], dim=2).reshape(B, 2 * T, d)  # (h_1, ĉ_1, …, h_T, ĉ_T)
                # h_t and ĉ_t share RoPE position t, keeping the lower layers' relative distances
                cos, sin = cos.repeat_interleave(2, 0), sin.repeat_interleave(2, 0)
            x = bb.blocks[i](x, cos, sin, "causal", i, None, False)
        h = bb.norm(x)
        if h.size(1) == 2 * T:
            h = h[:, 1::2]  # predict x_{t+1} after ĉ_t
        return ModelOutput(logits=F.linear(h, bb.embed.weight), hidden=h, parts=aux)

    def extra_loss(self, out: ModelOutput, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        ex = self.config.extra
        if self.needs_teacher:
            raise ValueError(f"{self.config.family} needs a frozen teacher for its training loss: build it with "
                             "teacher=/sae=, call attach_teacher(), or let the trainer attach the "
                             "teacher_checkpoint/sae_checkpoint of orchestration.teachers.prepare_cocomix_teacher()")
        if self.variant == "cocomix":
            targets = concept_targets(self._frozen["teacher"], self._frozen["sae"], self.teacher_layer, batch.tokens,
                                      ex["k_attr"])  # [B, T-1, k_attr]
            z = out.parts["concept_logits"][:, :-1]
            logp = F.log_softmax(z.float(), dim=-1)
            ce = -logp.gather(-1, targets).mean(-1)  # (1/K_attr) Σ_i CE(z_t, i) (Eq. 2)
            if batch.valid is not None:
                keep = (batch.valid[:, 1:] & batch.valid[:, :-1]).float()
                ce = (ce * keep).sum() / keep.sum().clamp_min(1)
            else:
                ce = ce.mean()
            return {"concept": ex["lam"] * ce}
        if self.variant == "kd":
            with torch.no_grad():
                # run(): the unvalidated forward (the batch was checked once by check_batch), so
                # no host read of token values breaks a compiled graph here
                p_teacher = F.log_softmax(_teacher_logits(self._frozen["teacher"], batch.tokens).float(), -1)
            kl = F.kl_div(F.log_softmax(out.logits.float(), -1), p_teacher, log_target=True, reduction="none").sum(-1)
            return {"kd": ex["lambda_kd"] * kl.mean()}
        return {}
