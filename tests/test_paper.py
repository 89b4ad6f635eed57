"""The paper's constants and counts (interpscale.paper) against its printed tables, and every
other place that counts (models.lm's Steerling price, models.pricing, the example table) against them."""

import math

import pytest

from interpscale import paper


def _alt_concept_params(d, n=paper.N_KNOWN, m=paper.N_UNKNOWN, r=paper.RANK):
    return 2 * d * n + d * r + 2 * r * m  # the other candidate: 2dn + dR + 2Rm


def test_concept_module_params_reproduce_table23_totals():
    """2dn + 2dR + 2Rm gives Table 23's "+Concept total" within the printing precision
    (backbone and total each rounded: |error| <= one unit of the last printed digit) at
    every size; 2dn + dR + 2Rm does not (it misses every size but 1.5B)."""
    misses_alt = []
    for size, (L, d, p, total) in paper.TABLE23.items():
        tol = paper.TABLE23_PRECISION[size]
        assert abs(p + paper.concept_module_params(d) - total) <= tol, size
        if abs(p + _alt_concept_params(d) - total) > tol:
            misses_alt.append(size)
    assert misses_alt == [s for s in paper.TABLE23 if s != "1.5B"]


def test_concept_counts_analytic():
    d, n, m, r = 10, 3, 9, 2
    assert paper.concept_module_params(d, n, m, r) == 2 * 10 * 3 + 2 * 10 * 2 + 2 * 2 * 9
    assert paper.concept_module_params(d, n, m, 0) == 2 * 10 * 3 + 2 * 10 * 9  # dense U
    assert paper.concept_module_flops(d, n, m, r) == 6 * (2 * 10 * 3) + 6 * (2 * 10 * 2 + 2 * 9)  # Eq. 24
    assert paper.flops_per_token(1000, 2, 10, 8) == 6 * 1000 + 12 * 2 * 10 * 8  # Eq. 23
    assert paper.flops_per_token(1000, 2, 10, 8, concept=True, n=n, m=m, rank=r) == pytest.approx(
        6 * 1000 + 12 * 2 * 10 * 8 + paper.concept_module_flops(d, n, m, r))
    with pytest.raises(ValueError, match="seq_len"):
        paper.flops_per_token(1000, 2, 10, 0)


def test_section_8_1_overhead_at_10M():
    L, d, p, _ = paper.TABLE23["10M"]
    c = paper.concept_module_params(d)
    assert c / (c + p) == pytest.approx(paper.CONCEPT_OVERHEAD["10M"], abs=0.01)  # "~89% at 10M"


def test_steerling_8b_compute_exceeds_6ND_by_the_eq23_24_terms():
    s = paper.STEERLING_8B
    assert s["flops"] == paper.STEERLING_8B_COMPUTE == 7.6e22
    six_nd = 6 * s["params"] * s["tokens"]  # 6.48e22; attention (12LdN) and concept heads add the rest
    assert six_nd < s["flops"] < 1.25 * six_nd


def test_models_presets_and_accounting_use_the_paper():
    from interpscale.models import SIZES, flops_per_token
    from interpscale.models.lm import backbone_params, concept_params
    from interpscale.models.config import PAPER_N_CONCEPTS, make_config

    assert PAPER_N_CONCEPTS == paper.N_KNOWN
    for size, (L, d, p, total) in paper.TABLE23.items():
        preset = SIZES[size]
        assert (preset.n_layers, preset.d_model, preset.size) == (L, d, size)  # P and the total: Table 23 itself
        cfg = make_config("cdlm+concept", size)
        assert concept_params(cfg) == paper.concept_module_params(d)
        P = backbone_params(cfg)
        for fam, concept in (("cdlm", False), ("cdlm+concept", True)):
            assert flops_per_token(fam, size, paper.SEQ_LEN) == pytest.approx(
                paper.flops_per_token(P, L, d, paper.SEQ_LEN, concept=concept), rel=1e-12)


def test_example_table_uses_the_paper():
    from interpscale.analysis import example_data as E

    assert E.SLICES is paper.TABLE24 and E.PAPER_TABLE6 is paper.TABLE6 and not hasattr(E, "STEERLING_8B")  # paper.STEERLING_8B, no alias
    L, d, p, _ = paper.TABLE23["85M"]
    assert E.total_params("85M", True) == p + paper.concept_module_params(d)
    assert math.isclose(E._flops_per_token("85M", True), 6 * p + 12 * L * d * 4096 + paper.concept_module_flops(d))
