"""The model zoo: the four Steerling families plus the other seeds' models in ``zoo/`` (docs/models.md,
docs/zoo.md); your own family registers the same way (docs/own-model.md). Every family is priced
through one entry, :func:`price` (``models.pricing``)."""

from interpscale.models.checkpoint import load_checkpoint, save_checkpoint
from interpscale.models.config import PAPER_SIZES, SIZES, TINY_SIZES, ModelConfig, make_config
from interpscale.models.plugins import ENTRY_POINT_GROUP, load_plugins
from interpscale.models.pricing import Price, flops_per_token, params_nonembedding, price
from interpscale.models.protocol import FamilyModel, LanguageModel
from interpscale.models.registry import FAMILIES, FamilySpec, build_model, get_family, register_family
from interpscale.models.types import DataFields
from interpscale.models.lm import backbone_params, concept_overhead_fraction, concept_params  # registers ar, cdlm, ...
import interpscale.models.zoo  # noqa: E402,F401  (registers crate, mxd, ...; imports submodules only, no cycle)
import interpscale.models.hf  # noqa: E402,F401  (registers hf:llama, ...; transformers imported only to build)

__all__ = [
    "FAMILIES", "SIZES", "PAPER_SIZES", "TINY_SIZES", "FamilySpec", "ModelConfig", "Price", "price",
    "build_model", "register_family", "get_family", "make_config", "params_nonembedding",
    "flops_per_token", "backbone_params", "concept_params", "concept_overhead_fraction",
    "save_checkpoint", "load_checkpoint", "DataFields", "FamilyModel", "LanguageModel", "load_plugins",
    "ENTRY_POINT_GROUP",
]
