"""reEtym interventions (§3.5 / App. E; context managers that restore the model on exit, so no
edit leaks into the next experiment) and signal-space statistics (App. D Exp. 2, 3, 5), each
paired with the random-matrix control the paper left out (or ran once)."""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass
from typing import Iterator, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from interpscale.models.zoo.reetym import EtymEmbedding
from interpscale.models.zoo.replace import override_output


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


def _controls(like: torch.Tensor, n: int, seed: int, *, unit: bool = False) -> Iterator[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    std = 1.0 if unit else float(like.float().std())
    for _ in range(n):
        yield torch.randn(like.shape, generator=gen) * std


def _summarise(name: str, value: float, controls: list[float]) -> ControlledStat:
    c = torch.tensor(controls, dtype=torch.float64)
    sd = float(c.std()) if len(controls) > 1 else 0.0
    return ControlledStat(name, float(value), float(c.mean()), sd, len(controls))


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
    return {name: _summarise(name, fn(m), [fn(c) for c in _controls(m, n_controls, seed + i, unit=unit)])
            for i, (name, fn, m, unit) in enumerate(todo)}
