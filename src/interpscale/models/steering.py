"""Concept steering (§6.2) and the steering-training losses (§10.2.4, Eqs. 31–33)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, Sequence

import torch
import torch.nn.functional as F

from interpscale.models.objectives import mean_ce
from interpscale.errors import UserError


@dataclass(frozen=True)
class Steering:
    """What to steer and how (§6.2). ``suppress_inject`` also adds the negative injection (Eq. 18
    with γ < 0), off by default: it can raise anti-aligned logits, which Eq. 21's gate prevents (Fig. 20)."""

    concepts: tuple[int, ...]  # known (or unknown) concept ids, summed and normalised into e_c (§6.2.1)
    kind: Literal["known", "unknown"] = "known"
    tau: float = 1.0  # target peak logit shift: γ = τ / peak(e_c) (Eq. 19)
    gamma: Optional[float] = None  # overrides tau
    layer: Optional[int] = None  # L_inj: e_c joins h^(l) for l >= L_inj (Eq. 18; l = L final); None: L // 2
    suppress: bool = False  # push away: ReLU-gated logit mask of strength ``strength`` (Eq. 21)
    strength: float = 1.0
    suppress_inject: bool = False

    def __post_init__(self):
        object.__setattr__(self, "concepts", tuple(int(c) for c in self.concepts))
        if not self.concepts:
            raise ValueError("Steering needs at least one concept id")
        if self.kind not in ("known", "unknown"):
            raise ValueError(f"Steering.kind must be 'known' or 'unknown', got {self.kind!r}")
        if self.tau <= 0 and self.gamma is None:
            raise ValueError(f"Steering.tau must be > 0, got {self.tau}")
        if self.strength < 0:
            raise ValueError(f"Steering.strength must be >= 0, got {self.strength}")


@dataclass
class SteerState:
    vec: torch.Tensor  # γ·e_c [d] (zero when nothing is injected)
    layer: int
    logit_penalty: Optional[torch.Tensor]  # s·ReLU(a_c) [V] to subtract, or None
    gamma: float


def concept_direction(model, concepts: Sequence[int], kind: str = "known") -> torch.Tensor:
    """e_c = Σ K_c / ‖Σ K_c‖ (unit vector, §6.2.1)."""
    if getattr(model, "concept", None) is None:
        raise UserError(f"family {model.config.family!r} has no concept module to steer")
    emb = model.concept.known_emb if kind == "known" else model.concept.unknown_matrix()
    bad = [c for c in concepts if not 0 <= c < emb.size(0)]
    if bad:
        raise UserError(f"{kind} concept id(s) {bad} out of range [0, {emb.size(0)})")
    v = emb[list(concepts)].sum(0).detach()
    norm = v.norm()
    if float(norm) == 0.0:
        raise ValueError(f"{kind} concepts {list(concepts)} have a zero embedding sum")
    return v / norm


def alignment(model, direction: torch.Tensor) -> torch.Tensor:
    """a_c = W e_c: the direction's contribution to every vocabulary logit (Eq. 20)."""
    return F.linear(direction, model.lm_head.detach())


def calibrate_gamma(model, direction: torch.Tensor, tau: float) -> float:
    """γ = τ / peak(e_c), peak(e_c) = max_y e_cᵀ W_y (Eq. 19)."""
    peak = float(alignment(model, direction).max())
    if peak <= 0:
        raise ValueError(f"direction has no positively aligned token (peak={peak:.3g}); cannot calibrate γ")
    return tau / peak


def steer_state(model, steer: Steering) -> SteerState:
    e = concept_direction(model, steer.concepts, steer.kind)
    gamma = steer.gamma if steer.gamma is not None else calibrate_gamma(model, e, steer.tau)
    layer = model.config.n_layers // 2 if steer.layer is None else int(steer.layer)
    if not 0 <= layer <= model.config.n_layers:
        raise UserError(f"Steering.layer must be in [0, {model.config.n_layers}], got {layer}")
    if steer.suppress:
        penalty = steer.strength * alignment(model, e).clamp(min=0)  # Eq. 21
        g = -abs(gamma) if steer.suppress_inject else 0.0
        return SteerState(g * e, layer, penalty, g)
    return SteerState(gamma * e, layer, None, gamma)


# --- steering training (§10.2.4) ------------------------------------------------------
def steering_training_loss(model, tokens: torch.Tensor, concept: int, attributed: torch.Tensor,
                           token_set: torch.Tensor, *, gamma: float = 1.0, layer: Optional[int] = None,
                           step: int = 0, lambda_respond: float = 1.0, lambda_express: float = 1.0):
    """Eq. 33: L_MDM + λ_r L_respond + λ_e L_express, injecting γ·K_c/‖K_c‖ at the masked
    positions attributed to c (``attributed`` [B, T] bool). Returns (total, parts)."""
    tokens = model.check_tokens(tokens)
    if attributed.shape != tokens.shape:
        raise ValueError(f"attributed shape {tuple(attributed.shape)} != tokens shape {tuple(tokens.shape)}")
    x_t, masked, targets = model.loss_inputs(tokens, step)
    inj = masked & attributed.bool()
    e = concept_direction(model, [concept])
    out = model.run(x_t, steer_vec=gamma * e, steer_mask=inj,
                    steer_layer=model.config.n_layers // 2 if layer is None else layer)
    lm, _ = mean_ce(out.logits, targets)
    if not bool(inj.any()):
        return lm, {"lm": float(lm.detach())}
    l_r = -out.known_act[..., concept][inj].clamp_min(1e-12).log().mean()  # Eq. 31: −mean_{t∈I} log k_{c,t}
    lp = out.logits[inj].float().log_softmax(-1)
    l_e = -torch.logsumexp(lp[:, token_set], dim=-1).mean()  # Eq. 32: −mean_t log Σ_{y∈T_c} softmax(ℓ_t)_y
    total = lm + lambda_respond * l_r + lambda_express * l_e
    return total, {"lm": float(lm.detach()), "respond": float(l_r.detach()), "express": float(l_e.detach())}
