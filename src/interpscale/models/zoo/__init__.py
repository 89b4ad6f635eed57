"""The other seeds' architectures as registered families (docs/zoo.md). The catalogue maps a
family to (model class, defaults of its ``extra`` knobs, description); the class's ``params_fn`` /
``flops_fn`` price it unbuilt. Imports only submodules of ``interpscale.models``."""

from __future__ import annotations

from typing import Any

from interpscale.models.registry import register_class
from interpscale.models.zoo.cocomix import COCOMIX_DEFAULTS, CoCoMixLM
from interpscale.models.zoo.common import ZooConfig, make_zoo_config, zoo_fields
from interpscale.models.zoo.crate import CRATE_DEFAULTS, CRATELM
from interpscale.models.zoo.gpt2 import MXD_DEFAULTS, GPTLM, MxDLM
from interpscale.models.zoo.reetym import REETYM_DEFAULTS, ReEtymLM

ZOO_FAMILIES: dict[str, tuple[type, dict, str]] = {
    "crate": (CRATELM, CRATE_DEFAULTS, "CRATE-LM: MSSA attention + two-step overcomplete ISTA (white-box transformer)"),
    "crate-gpt": (GPTLM, {"expansion": 4}, "GPT-2 block baseline matched to CRATE (CRATE-LM Table 1)"),
    "mxd": (MxDLM, MXD_DEFAULTS, "GPT-2 blocks whose MLPs are Mixture-of-Decoders layers trained end to end"),
    "reetym": (ReEtymLM, REETYM_DEFAULTS,
               "Steerling backbone with the factorised recipe×basis tied embedding (reEtym)"),
    "cocomix": (CoCoMixLM, COCOMIX_DEFAULTS,
                "CoCoMix: predict a frozen teacher's SAE concepts and interleave them as continuous vectors"),
    "cocomix-pause": (CoCoMixLM, COCOMIX_DEFAULTS | {"variant": "pause"},
                      "CoCoMix's pause-token baseline (learned vector interleaved)"),
    "cocomix-kd": (CoCoMixLM, COCOMIX_DEFAULTS | {"variant": "kd"},
                   "CoCoMix's knowledge-distillation baseline (λ_KD·KL to the teacher)"),
}


def zoo_config(family: str, size: str, **overrides: Any) -> ZooConfig:
    overrides = {k: v for k, v in overrides.items() if k not in CoCoMixLM.objects}  # passed to the model
    return make_zoo_config(family, size, ZOO_FAMILIES[family][1], **overrides)


for _name, (_cls, _defaults, _desc) in ZOO_FAMILIES.items():
    register_class(_name, _cls, zoo_config, description=_desc, config_fields=zoo_fields(_defaults))
