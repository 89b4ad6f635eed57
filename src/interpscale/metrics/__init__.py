"""Evaluation: validation-loss estimators, interpretability metrics, soft MMLU, the lm-eval
adapter (``lm_eval_adapter``, imported lazily by :func:`run_lm_eval`: it pulls in lm_eval)."""

from interpscale.metrics.bpb import bits_per_byte, scored_bytes
from interpscale.metrics.interp import (alignment_inputs, concept_contribution, concept_independence,
                                        concept_top_tokens, interp_metrics, known_concept_alignment)
from interpscale.metrics.likelihood import SoftScoreResult, encode_pair, loglikelihood, mmlu_soft_score, soft_score
from interpscale.metrics.loss import (DIFFUSION_ESTIMATORS, ESTIMATOR_REGISTRY, ESTIMATORS, GRID_RATES, LossEstimate,
                                      estimate_loss, estimate_losses, get_estimator, passes_per_batch,
                                      per_mask_rate_losses, register_estimator)


def run_lm_eval(checkpoint, tasks, *, out_dir, limit=None, **kwargs):
    """Run lm-evaluation-harness ``tasks`` on a checkpoint (see ``lm_eval_adapter.run_lm_eval``)."""
    from interpscale.metrics.lm_eval_adapter import run_lm_eval as _run

    return _run(checkpoint, tasks, out_dir=out_dir, limit=limit, **kwargs)


__all__ = [
    "DIFFUSION_ESTIMATORS", "ESTIMATORS", "ESTIMATOR_REGISTRY", "GRID_RATES", "get_estimator", "register_estimator", "LossEstimate", "SoftScoreResult",
    "alignment_inputs", "bits_per_byte", "scored_bytes", "concept_contribution", "concept_independence", "concept_top_tokens",
    "encode_pair", "estimate_loss", "estimate_losses", "interp_metrics", "known_concept_alignment",
    "loglikelihood", "mmlu_soft_score", "passes_per_batch", "per_mask_rate_losses", "run_lm_eval",
    "soft_score",
]
