"""The model zoo: the four Steerling families plus the other seeds' models in ``zoo/`` (docs/models.md,
docs/zoo.md); your own family registers the same way (docs/own-model.md)."""

from interpscale.models.accounting import backbone_params, concept_overhead_fraction, concept_params
from interpscale.models.checkpoint import load_checkpoint, save_checkpoint
from interpscale.models.config import PAPER_SIZES, SIZES, TINY_SIZES, ModelConfig, SizePreset, make_config
from interpscale.models.plugins import ENTRY_POINT_GROUP, load_plugins
from interpscale.models.protocol import DataFields, FamilyModel, LanguageModel
from interpscale.models.registry import (FAMILIES, FamilySpec, build_model, flops_per_token, get_family,
                                         params_nonembedding, register_family)
import interpscale.models.lm  # noqa: F401,E402  (registers ar, cdlm, ...)
import interpscale.models.zoo  # noqa: E402,F401  (registers crate, mxd, ...; imports submodules only, no cycle)
import interpscale.models.hf  # noqa: E402,F401  (registers hf:llama, ...; transformers imported only to build)

__all__ = [
    "FAMILIES", "SIZES", "PAPER_SIZES", "TINY_SIZES", "FamilySpec", "ModelConfig", "SizePreset",
    "build_model", "register_family", "get_family", "make_config", "params_nonembedding",
    "flops_per_token", "backbone_params", "concept_params", "concept_overhead_fraction",
    "save_checkpoint", "load_checkpoint", "DataFields", "FamilyModel", "LanguageModel", "load_plugins",
    "ENTRY_POINT_GROUP",
]
