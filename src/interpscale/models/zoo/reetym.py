"""reEtym: the token embedding factorised as W_recipe (V×S) · W_basis (S×d), tied to the head
(docs/zoo.md); its interventions (§3.5 / App. E; context managers that restore the model on exit,
so no edit leaks into the next experiment) and signal-space statistics (App. D Exp. 2, 3, 5), each
paired with the random-matrix control the paper left out (or ran once)."""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass
from typing import Iterator, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from interpscale.models.lm import backbone_params, steerling_price
from interpscale.models.backbone import Backbone
from interpscale.models.config import ModelConfig
from interpscale.models.types import ModelOutput
from interpscale.models.zoo.common import BACKBONE_DEFAULTS, ZooConfig, ZooLM, backbone_config
from interpscale.models.zoo.replace import override_output

# reEtym Table 5: name -> (layers, d_model, heads, kv_heads, d_ff, S, published params).
# Vocabulary padded to 50,304 (App. B); backbone is "GPT-2-New" (RoPE, SwiGLU, RMSNorm).
REETYM_TABLE5 = {
    "reEtyM-1-Small": (6, 512, 8, 8, 1536, 512, 46.47e6),
    "reEtyM-1-Lite": (32, 1024, 16, 4, 2816, 1024, 413.34e6),
    "reEtyM-1": (32, 1024, 16, 16, 2816, 1024, 463.67e6),
    "reEtyM-1-Big": (36, 1024, 16, 16, 2816, 1024, 515.06e6),
}
REETYM_VOCAB = 50304


class EtymEmbedding(nn.Module):
    """E = W_recipe · W_basis (Eq. 1-2), used for input lookup and the tied output head."""

    def __init__(self, vocab_size: int, d_model: int, n_signals: int | None = None, *, v_s: float = 0.02):
        super().__init__()
        S = d_model if n_signals is None else n_signals
        self.recipe = nn.Parameter(torch.empty(vocab_size, S))  # W_recipe [V, S]
        self.basis = nn.Parameter(torch.empty(S, d_model))  # W_basis [S, d]
        self.reset_parameters(v_s)

    @torch.no_grad()
    def reset_parameters(self, v_s: float = 0.02) -> None:
        # σ = sqrt(V_s/√S) so that Var(E_ij) = S·σ⁴ = V_s² (App. A.1, Eq. 4-6)
        sigma = math.sqrt(v_s / math.sqrt(self.recipe.size(1)))
        nn.init.normal_(self.recipe, std=sigma)
        nn.init.normal_(self.basis, std=sigma)

    @property
    def n_signals(self) -> int:
        return self.recipe.size(1)

    def vocab_matrix(self) -> torch.Tensor:
        """W_vocab = W_recipe · W_basis [V, d], rebuilt on every call."""
        return self.recipe @ self.basis

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.recipe[tokens] @ self.basis  # e_i = Σ_k R_ik B_k (Eq. 2)

    def signals(self, h: torch.Tensor) -> torch.Tensor:
        """Signal activations s = h·W_basisᵀ [..., S]."""
        return h @ self.basis.t()

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.signals(h) @ self.recipe.t()  # = h·(W_recipe·W_basis)ᵀ


def reetym_params(n_layers: int, d: int, n_heads: int, kv_heads: int, d_ff: int, n_signals: int,
                  vocab_size: int = REETYM_VOCAB) -> dict[str, int]:
    """Analytic parameter counts: ``embedding`` (V·S + S·d), ``nonembedding`` (the backbone's
    layers, no QK-norm, + final norm) and ``total`` — the quantity Table 5 reports."""
    emb = vocab_size * n_signals + n_signals * d
    cfg = ModelConfig(family="reetym", size="", n_layers=n_layers, d_model=d, n_heads=n_heads,
                      n_kv_heads=kv_heads, vocab_size=vocab_size, mlp_ratio=d_ff / d, qk_norm=False)
    non = backbone_params(cfg)
    return {"embedding": emb, "nonembedding": non, "total": emb + non}


# ---- the reetym family: the Steerling backbone with the factorised tied embedding -----
REETYM_DEFAULTS = {"n_signals": None, "v_s": 0.02, **BACKBONE_DEFAULTS}


def n_signals(c: ZooConfig) -> int:
    return c.extra["n_signals"] or c.d_model  # S = d in every paper config


def reetym_nonembedding_params(c: ZooConfig) -> int:
    """The backbone's P; W_recipe and W_basis are the (tied) embedding."""
    return backbone_params(backbone_config(c))


def reetym_flops_per_token(c: ZooConfig, seq_len: int) -> float:
    """Eq. 23 of the backbone plus the factorisation's extra matmuls: R[t]·B at the input
    and h·Bᵀ at the head, 2·S·d each forward, ×3 with the backward: 12·S·d."""
    return steerling_price(backbone_config(c), seq_len, concept=False)[1] + 12.0 * n_signals(c) * c.d_model


class ReEtymLM(ZooLM):
    """The Steerling backbone (the paper's "GPT-2-New") with an :class:`EtymEmbedding` embedding and head."""

    params_fn, flops_fn = staticmethod(reetym_nonembedding_params), staticmethod(reetym_flops_per_token)

    def __init__(self, config: ZooConfig):
        super().__init__(config)
        self.backbone = Backbone(backbone_config(config))
        del self.backbone.embed  # replaced by the factorised embedding
        self.etym = EtymEmbedding(config.vocab_size, config.d_model, n_signals(config), v_s=config.extra["v_s"])

    def forward(self, tokens: torch.Tensor, *, chunk_ids=None, chunk_labels=None) -> ModelOutput:
        h = self.backbone(None, kind="causal", embeds=self.etym(tokens))
        return ModelOutput(logits=self.etym.logits(h), hidden=h)

    @torch.no_grad()
    def signal_activations(self, tokens: torch.Tensor, layers: bool = False) -> torch.Tensor:
        """s = h·W_basisᵀ of the final hidden state [B, T, S], or of every layer's output
        [L+1, B, T, S] (embedding first) when ``layers`` (App. D Exp. 8)."""
        if not layers:
            return self.etym.signals(self(tokens).hidden)
        states = [self.etym(tokens)]
        hooks = [blk.register_forward_hook(lambda _m, _i, out: states.append(out)) for blk in self.backbone.blocks]
        try:
            self(tokens)
        finally:
            for hk in hooks:
                hk.remove()
        return self.etym.signals(torch.stack(states))


# ---- interventions ------------------------------------------------------------------
@contextlib.contextmanager
def _restoring(param: torch.Tensor) -> Iterator[None]:
    saved = param.detach().clone()
    try:
        yield
    finally:
        with torch.no_grad():
            param.copy_(saved)


@contextlib.contextmanager
def recipe_edit(emb: EtymEmbedding, delta: torch.Tensor, token_ids: Sequence[int] | None = None) -> Iterator[None]:
    """W_recipe[i] += delta for ``token_ids`` (token-local edit) or for every token
    (the paper's global recipe shift, e.g. α(v_pos − v_neg)). Restored on exit."""
    if delta.shape != (emb.n_signals,):
        raise ValueError(f"delta must have shape ({emb.n_signals},), got {tuple(delta.shape)}")
    with _restoring(emb.recipe), torch.no_grad():
        rows = slice(None) if token_ids is None else torch.as_tensor(list(token_ids))
        emb.recipe[rows] += delta
        yield


@contextlib.contextmanager
def basis_edit(emb: EtymEmbedding, signal_id: int, new_row: torch.Tensor) -> Iterator[None]:
    """Replace W_basis[k] (a global edit reaching every token that uses signal k)."""
    if not 0 <= signal_id < emb.n_signals:
        raise ValueError(f"signal_id {signal_id} out of range [0, {emb.n_signals})")
    with _restoring(emb.basis), torch.no_grad():
        emb.basis[signal_id] = new_row
        yield


@contextlib.contextmanager
def ablate_signals(emb: EtymEmbedding, signal_ids: Sequence[int]) -> Iterator[None]:
    """Zero W_basis rows of ``signal_ids``: the signals vanish from every input embedding
    and from the tied head. Restored on exit."""
    ids = list(signal_ids)
    if any(not 0 <= k < emb.n_signals for k in ids):
        raise ValueError(f"signal ids {ids} out of range [0, {emb.n_signals})")
    with _restoring(emb.basis), torch.no_grad():
        emb.basis[ids] = 0.0
        yield


def inject(layer: nn.Module, vector: torch.Tensor, alpha: float = 1.0) -> contextlib.AbstractContextManager:
    """h_ℓ ← h_ℓ + α·v on the output of ``layer`` while active (zero-parameter injection; pass
    ``emb.basis[k]`` to inject signal k, or ``recipe[target] @ basis`` to steer)."""
    def add(_inp, out):
        return (out[0] + alpha * vector, *out[1:]) if isinstance(out, tuple) else out + alpha * vector

    return override_output(layer, add)


# ---- statistics -------------------------------------------------------------------
@dataclass(frozen=True)
class ControlledStat:
    """A statistic of the trained matrix next to the same statistic on ``n_controls``
    Gaussian matrices of equal shape and scale (mean and standard deviation)."""

    name: str
    value: float
    control_mean: float
    control_sd: float
    n_controls: int

    @property
    def z(self) -> float:
        return (self.value - self.control_mean) / self.control_sd if self.control_sd > 0 else math.inf

    def to_dict(self) -> dict:
        return asdict(self)


def threshold_activation_rate(recipe: torch.Tensor) -> tuple[float, float]:
    """Mean and sd over tokens of the fraction of signals with |R_ik| > τ = μ + σ, μ and σ
    the mean and sd of |R| over the whole matrix (Exp. 2)."""
    a = recipe.detach().float().abs()
    tau = a.mean() + a.std()
    rate = (a > tau).float().mean(dim=1)
    return float(rate.mean()), float(rate.std())


def effective_rank(matrix: torch.Tensor) -> float:
    """exp(−Σ p_i log p_i), p_i = s_i/Σ s_j over the singular values (Exp. 3)."""
    s = torch.linalg.svdvals(matrix.detach().float())
    p = s / s.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def analogy_topk(recipe: torch.Tensor, analogies: Sequence[tuple[int, int, int, int]], k: int = 5) -> float:
    """Hit rate of b − a + c ≈ d (ids a, b, c, expected d) by cosine over recipe rows, with
    the three operands excluded from retrieval (Exp. 5)."""
    if not analogies:
        raise ValueError("analogies is empty")
    R = F.normalize(recipe.detach().float(), dim=-1)
    hits = 0
    for a, b, c, d in analogies:
        sims = R @ F.normalize(R[b] - R[a] + R[c], dim=0)
        sims[[a, b, c]] = -math.inf  # operand exclusion
        hits += int(d in sims.topk(k).indices.tolist())
    return hits / len(analogies)


def signal_statistics(emb: EtymEmbedding, analogies: Sequence[tuple[int, int, int, int]] = (), *, k: int = 5,
                      n_controls: int = 8, seed: int = 0) -> dict[str, ControlledStat]:
    """The three signal-space statistics with Gaussian-matrix controls: activation rate of
    W_recipe, effective rank of W_basis (control N(0, 1) as in the paper, but n_controls
    draws), and analogy hit rate (only when ``analogies`` are given)."""
    R, B = emb.recipe.detach(), emb.basis.detach()
    todo = [("activation_rate", lambda m: threshold_activation_rate(m)[0], R, False),
            ("effective_rank", effective_rank, B, True)]
    if analogies:
        todo.append(("analogy_topk", lambda m: analogy_topk(m, analogies, k), R, False))
    out = {}
    for i, (name, fn, m, unit) in enumerate(todo):
        value, gen = fn(m), torch.Generator().manual_seed(seed + i)
        std = 1.0 if unit else float(m.float().std())
        controls = [fn(torch.randn(m.shape, generator=gen) * std) for _ in range(n_controls)]
        c = torch.tensor(controls, dtype=torch.float64)
        out[name] = ControlledStat(name, float(value), float(c.mean()), float(c.std()) if n_controls > 1 else 0.0,
                                   n_controls)
    return out
