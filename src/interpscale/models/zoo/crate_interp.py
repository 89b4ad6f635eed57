"""Neuron-level auto-interpretability of CRATE's ISTA codes (and its GPT baseline's MLP
neurons) through the judges' explain/simulate scorer (CRATE-LM §5.3, Algorithm 1)."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from interpscale.models.zoo.crate import activation_sparsity


def unit_activations(model: Any, tokens: torch.Tensor, layer: int, units: Optional[Sequence[int]] = None,
                     *, n_units: int = 16, seed: int = 0) -> tuple[np.ndarray, list[int]]:
    """Activations [units, B, T] of ``layer`` (ISTA codes A₂ for ``crate``, post-GELU
    neurons for ``crate-gpt``) and the unit ids; without ``units``, ``n_units`` ids are
    drawn uniformly at random (seeded), as the paper samples neurons per layer."""
    acts = model.neuron_activations(tokens)
    if not 0 <= layer < len(acts):
        raise ValueError(f"layer {layer} out of range [0, {len(acts)})")
    a = acts[layer]  # [B, T, h]
    h = a.size(-1)
    if units is None:
        units = torch.randperm(h, generator=torch.Generator().manual_seed(seed))[: min(n_units, h)].tolist()
    bad = [u for u in units if not 0 <= u < h]
    if bad:
        raise ValueError(f"unit ids {bad} out of range [0, {h})")
    return a[..., list(units)].permute(2, 0, 1).double().numpy(), list(units)


def crate_autointerp(model: Any, tokens: torch.Tensor, decode: Callable[[int], str], layer: int, *,
                     units: Optional[Sequence[int]] = None, n_units: int = 16, judge: Any = None,
                     methods: Sequence[str] = ("top_and_random", "random_only"), seed: int = 0) -> dict[str, Any]:
    """Explain/simulate scores of ``layer``'s units on the excerpts ``tokens`` [B, T]
    (B >= 15: 5 explain + 5 top + 5 random), plus the layer's activation sparsity.
    ``judge`` is any judges backend (default: the judges' own default, offline lexical
    unless configured); returns ``{"result": AutoInterpResult, "units", "sparsity"}``."""
    from interpscale.judges import score_autointerp  # judges never import torch; import lazily

    acts, units = unit_activations(model, tokens, layer, units, n_units=n_units, seed=seed)
    excerpts = [[decode(int(t)) for t in row] for row in tokens]
    result = score_autointerp(excerpts, acts, judge=judge, methods=methods, seed=seed)
    sparsity = activation_sparsity([torch.from_numpy(acts)])[0]
    return {"result": result, "units": units, "sparsity": sparsity}
