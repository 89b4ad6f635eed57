"""Registers the four Steerling families: ar, cdlm, ar+concept, cdlm+concept (§8.1)."""

from __future__ import annotations

from dataclasses import fields
from functools import partial
from typing import Any

from interpscale import paper
from interpscale.models.accounting import flops_per_token_cfg, params_cfg
from interpscale.models.config import ModelConfig, make_config
from interpscale.models.protocol import DataFields
from interpscale.models.registry import register_family

STEERLING_FAMILIES = paper.PAPER_FAMILIES  # name -> (diffusion, concept, description), §8.1
CONFIG_FIELDS = frozenset(f.name for f in fields(ModelConfig)) - {"family", "size"}


def steerling_config(family: str, size: str, *, data: DataFields = DataFields(), **overrides: Any) -> ModelConfig:
    """The config as built: the data's fields, then the overrides."""
    return make_config(family, size, **{**data.config_fields(concept=STEERLING_FAMILIES[family].concept), **overrides})


def _build(family: str, size: str, **kw: Any):
    from interpscale.models.lm import SteerlingLM  # the nn code is imported only when building

    return SteerlingLM(steerling_config(family, size, **kw))


def _params(family: str, size: str, **kw: Any) -> int:
    return params_cfg(steerling_config(family, size, **kw), concept=STEERLING_FAMILIES[family].concept)


def _flops(family: str, size: str, seq_len: int, **kw: Any) -> float:
    return flops_per_token_cfg(steerling_config(family, size, **kw), seq_len, concept=STEERLING_FAMILIES[family].concept)


for _name, _f in STEERLING_FAMILIES.items():
    register_family(
        _name, partial(_build, _name), params_fn=partial(_params, _name), flops_fn=partial(_flops, _name),
        is_diffusion=_f.diffusion, is_concept=_f.concept, description=_f.description, config_fields=CONFIG_FIELDS,
        config_fn=partial(steerling_config, _name), overwrite=True,
    )
