"""One rule for every family's config: heads derived alike, special ids spelled alike, Table 23 from the paper."""

from __future__ import annotations

import pytest

from interpscale import paper
from interpscale.models import SIZES, build_model
from interpscale.models.config import ModelConfig, make_config
from interpscale.models.zoo import zoo_config


@pytest.mark.parametrize("size,d_model", [("10M", 640), ("10M", 96), ("nano", 48), ("nano", 50)])
def test_steerling_and_zoo_configs_derive_heads_alike(size, d_model):
    ours = make_config("ar", size, d_model=d_model).n_heads
    assert zoo_config("crate", size, d_model=d_model).n_heads == ours
    assert d_model % ours == 0


def test_special_ids_are_spelled_alike_and_the_old_name_is_gone():
    for cfg in (make_config("cdlm", "nano", mask_id=7), zoo_config("crate", "nano", mask_id=7)):
        assert cfg.mask_id == 7 and not hasattr(cfg, "mask_token_id") and "mask_token_id" not in cfg.to_dict()
    with pytest.raises(ValueError, match="mask_token_id"):  # the alias's deprecation release has passed
        make_config("cdlm", "nano", mask_token_id=7)
    zoo = build_model("crate", "nano", pad_id=5, eos_id=6, eoc_id=8, mask_id=9).config
    assert (zoo.pad_id, zoo.eos_id, zoo.eoc_id, zoo.mask_id) == (5, 6, 8, 9)


def test_paper_sizes_are_table_23():
    for size, (L, d, P, total) in paper.TABLE23.items():
        s = SIZES[size]
        assert (s.n_layers, s.d_model, s.size) == (L, d, size) and isinstance(s, ModelConfig)
