"""The model zoo: the four Steerling families plus the other seeds' models in ``zoo/``.

>>> from interpscale.models import build_model, FAMILIES, SIZES
>>> model = build_model("cdlm+concept", "tiny", n_concepts=8)

Analytic counts (``params_nonembedding``, ``flops_per_token``) never allocate.
"""

from interpscale.models.accounting import backbone_params, concept_overhead_fraction, concept_params
from interpscale.models.checkpoint import load_checkpoint, save_checkpoint
from interpscale.models.config import PAPER_SIZES, SIZES, TINY_SIZES, ModelConfig, SizePreset, make_config
from interpscale.models.registry import (
    FAMILIES,
    FamilySpec,
    build_model,
    flops_per_token,
    get_family,
    params_nonembedding,
    register_family,
)
import interpscale.models.steerling  # noqa: F401,E402  (registers ar, cdlm, ...)

# The zoo registers its families on import. It imports interpscale.models.registry /
# .types / .config directly (never this package), so there is no import cycle, and an
# error inside it propagates instead of silently dropping families.
import interpscale.models.zoo  # noqa: E402,F401

__all__ = [
    "FAMILIES", "SIZES", "PAPER_SIZES", "TINY_SIZES", "FamilySpec", "ModelConfig", "SizePreset",
    "build_model", "register_family", "get_family", "make_config", "params_nonembedding",
    "flops_per_token", "backbone_params", "concept_params", "concept_overhead_fraction",
    "save_checkpoint", "load_checkpoint",
]
