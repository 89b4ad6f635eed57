"""Evaluation: validation-loss estimators, interpretability metrics, soft MMLU, lm-eval adapter.

The lm-evaluation-harness adapter lives in :mod:`interpscale.metrics.lm_eval_adapter`
(imported lazily: it pulls in lm_eval); :func:`run_lm_eval` here forwards to it.
"""

from interpscale.metrics.loss import (
    DIFFUSION_ESTIMATORS,
    ESTIMATORS,
    LossEstimate,
    estimate_loss,
    estimate_losses,
    passes_per_batch,
    per_mask_rate_losses,
)
from interpscale.metrics.masking import GRID_RATES

__all__ = [
    "DIFFUSION_ESTIMATORS",
    "ESTIMATORS",
    "GRID_RATES",
    "LossEstimate",
    "estimate_loss",
    "estimate_losses",
    "passes_per_batch",
    "per_mask_rate_losses",
]
