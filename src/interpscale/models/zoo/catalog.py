"""The zoo's catalogue: registers the zoo families with the models registry (analytic params/FLOPs included).

Each entry: family name -> (model class, defaults of its ``extra`` knobs, analytic params
and FLOPs of a ``ZooConfig``, description). The analytic functions never allocate.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from interpscale import paper
from interpscale.models.registry import register_family
from interpscale.models.zoo.common import ZooConfig, make_zoo_config, zoo_fields
from interpscale.models.zoo.cocomix import COCOMIX_DEFAULTS, CoCoMixLM, cocomix_flops_per_token, cocomix_params
from interpscale.models.zoo.crate import CRATE_DEFAULTS, CRATELM, crate_flops_per_token, crate_nonembedding_params
from interpscale.models.zoo.gpt2 import GPTLM, MxDLM, gpt_nonembedding_params, mxd_lm_flops, mxd_lm_params
from interpscale.models.zoo.reetym import REETYM_DEFAULTS, ReEtymLM, reetym_flops_per_token, reetym_nonembedding_params

MXD_DEFAULTS = {"hidden_ratio": 4, "n_experts": None, "k": 32, "glu": False}


def _gpt_flops(c: ZooConfig, seq_len: int) -> float:
    return 6.0 * gpt_nonembedding_params(c) + paper.attention_flops(c.n_layers, c.d_model, seq_len)


# name -> (class, extra defaults, params(cfg), flops(cfg, seq_len), description)
ZOO_FAMILIES: dict[str, tuple[type, dict, Callable, Callable, str]] = {
    "crate": (CRATELM, CRATE_DEFAULTS, crate_nonembedding_params, crate_flops_per_token,
              "CRATE-LM: MSSA attention + two-step overcomplete ISTA (white-box transformer)"),
    "crate-gpt": (GPTLM, {"expansion": 4}, gpt_nonembedding_params, _gpt_flops,
                  "GPT-2 block baseline matched to CRATE (CRATE-LM Table 1)"),
    "mxd": (MxDLM, MXD_DEFAULTS, mxd_lm_params, mxd_lm_flops,
            "GPT-2 blocks whose MLPs are Mixture-of-Decoders layers trained end to end"),
    "reetym": (ReEtymLM, REETYM_DEFAULTS, reetym_nonembedding_params,
               reetym_flops_per_token, "Steerling backbone with the factorised recipe×basis tied embedding (reEtym)"),
    "cocomix": (CoCoMixLM, COCOMIX_DEFAULTS, cocomix_params, cocomix_flops_per_token,
                "CoCoMix: predict a frozen teacher's SAE concepts and interleave them as continuous vectors"),
    "cocomix-pause": (CoCoMixLM, COCOMIX_DEFAULTS | {"variant": "pause"}, cocomix_params,
                      cocomix_flops_per_token, "CoCoMix's pause-token baseline (learned vector interleaved)"),
    "cocomix-kd": (CoCoMixLM, COCOMIX_DEFAULTS | {"variant": "kd"}, cocomix_params,
                   cocomix_flops_per_token, "CoCoMix's knowledge-distillation baseline (λ_KD·KL to the teacher)"),
}
FROZEN_OBJECTS = ("teacher", "sae")  # build_model("cocomix", size, teacher=model, sae=sae) passes objects through


def zoo_config(family: str, size: str, **overrides: Any) -> ZooConfig:
    overrides = {k: v for k, v in overrides.items() if k not in FROZEN_OBJECTS}
    return make_zoo_config(family, size, ZOO_FAMILIES[family][1], **overrides)


def _build(family: str, size: str, **overrides: Any):
    objects = {k: overrides[k] for k in FROZEN_OBJECTS if k in overrides}
    return ZOO_FAMILIES[family][0](zoo_config(family, size, **overrides), **objects)


def _params(family: str, size: str, **overrides: Any) -> int:
    return int(ZOO_FAMILIES[family][2](zoo_config(family, size, **overrides)))


def _flops(family: str, size: str, seq_len: int, **overrides: Any) -> float:
    if int(seq_len) <= 0:
        raise ValueError(f"seq_len must be a positive int, got {seq_len!r}")
    return float(ZOO_FAMILIES[family][3](zoo_config(family, size, **overrides), int(seq_len)))


def register() -> None:
    for name, (_, _, _, _, desc) in ZOO_FAMILIES.items():
        register_family(name, partial(_build, name), params_fn=partial(_params, name), flops_fn=partial(_flops, name),
                        description=desc, config_fields=zoo_fields(ZOO_FAMILIES[name][1]),
                        config_fn=partial(zoo_config, name), overwrite=True)
