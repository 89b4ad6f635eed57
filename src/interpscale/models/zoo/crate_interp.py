"""The units CRATE-LM's auto-interpretability reads (CRATE-LM §5.3): ISTA codes of ``crate``,
post-GELU MLP neurons of ``crate-gpt``. Scoring them with the judges' explain/simulate
protocol is a metric: ``interpscale.metrics.autointerp.crate_autointerp``."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import torch


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
