"""Neuron-level auto-interpretability of CRATE's ISTA codes (and its GPT baseline's MLP neurons)
through the judges' explain/simulate scorer (CRATE-LM §5.3, Algorithm 1); a metric, so that
models never import judges."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch

from interpscale.models.zoo.crate import activation_sparsity, unit_activations


def crate_autointerp(model: Any, tokens: torch.Tensor, decode: Callable[[int], str], layer: int, *,
                     units: Optional[Sequence[int]] = None, n_units: int = 16, judge: Any = None,
                     methods: Sequence[str] = ("top_and_random", "random_only"), seed: int = 0) -> dict[str, Any]:
    """Explain/simulate scores of ``layer``'s units on the excerpts ``tokens`` [B, T] (B >= 15:
    5 explain + 5 top + 5 random) by any judges backend, plus the layer's activation sparsity:
    ``{"result": AutoInterpResult, "units", "sparsity"}``."""
    from interpscale.judges import score_autointerp  # judges never import torch; import lazily

    acts, units = unit_activations(model, tokens, layer, units, n_units=n_units, seed=seed)
    excerpts = [[decode(int(t)) for t in row] for row in tokens]
    result = score_autointerp(excerpts, acts, judge=judge, methods=methods, seed=seed)
    sparsity = activation_sparsity([torch.from_numpy(acts)])[0]
    return {"result": result, "units": units, "sparsity": sparsity}
