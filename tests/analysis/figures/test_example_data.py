"""The bundled example table: reproducible, paper-shaped, and its laws recover the paper's tables."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from interpscale.analysis import example_data as E
from interpscale.scaling import fit_chinchilla, fit_isoflop

DESIGN_COLUMNS = ["run_id", "family", "size", "slice_flops", "flops", "params", "tokens", "seq_len", "step",
                  "annealed", "estimator", "loss", "loss_se", "concept_loss", "concept_independence",
                  "concept_contribution", "known_concept_alignment"]


@pytest.fixture(scope="module")
def table():
    return E.example_results()


@pytest.fixture(scope="module")
def exact():
    return E.generate_example_results(noise=0.0)


def test_bundled_csv_equals_generator(table):
    fresh = E.generate_example_results()
    assert list(table.columns) == list(fresh.columns)
    for col in fresh.columns:
        if pd.api.types.is_numeric_dtype(fresh[col]) and fresh[col].dtype != bool:
            np.testing.assert_allclose(table[col].to_numpy(float), fresh[col].to_numpy(float), rtol=1e-5, err_msg=col)
        else:
            assert table[col].astype(str).tolist() == fresh[col].astype(str).tolist(), col


def test_design_columns_and_paper_grid(table):
    assert set(DESIGN_COLUMNS) <= set(table.columns)
    for fam, targets in E.SLICES.items():  # Table 24 slice targets
        sub = E.example_fit_table(table)
        sub = sub[sub["family"] == fam]
        assert sorted(sub["slice_flops"].unique()) == sorted(targets)
        assert (abs(sub["flops"] / sub["slice_flops"] - 1) <= 0.15).all()  # App. G: within ±15%
        assert sub.groupby("slice_flops").size().between(4, 6).all()  # four to six sizes per slice
    concept = table[table["family"] == "ar+concept"].drop_duplicates("size").set_index("size")["params"]
    assert concept["10M"] == pytest.approx(82.8e6, rel=0.005)  # Table 23 "+Concept total"
    assert concept["1.5B"] == pytest.approx(1718e6, rel=0.005)


@pytest.mark.parametrize("family", E.FAMILIES)
def test_exact_laws_recover_table6(exact, family):
    rows = E.example_fit_table(exact)
    fit = fit_isoflop(rows[rows["family"] == family], n_boot=0)
    assert fit.alpha_P == pytest.approx(E.PAPER_TABLE6[family]["alpha_P"], abs=0.002)
    assert fit.alpha_L == pytest.approx(E.PAPER_TABLE6[family]["alpha_L"], abs=0.002)


def test_exact_laws_recover_tables_27_28_29(exact):
    for est in ("fixed_grid", "per_block"):
        fit = fit_isoflop(exact[exact["estimator"] == est], n_boot=0)
        assert fit.alpha_P == pytest.approx(E.PAPER_TABLE27[est]["alpha_P"], abs=0.002)
        assert fit.alpha_L == pytest.approx(E.PAPER_TABLE27[est]["alpha_L"], abs=0.002)
    for t, (alpha_p, alpha_l) in E.PAPER_TABLE28.items():
        fit = fit_isoflop(exact[np.isclose(exact["mask_rate"], t)], n_boot=0)
        assert (fit.alpha_P, fit.alpha_L) == pytest.approx((alpha_p, alpha_l), abs=0.002)
    fit = fit_isoflop(exact[~exact["annealed"]], n_boot=0)
    assert fit.alpha_P == pytest.approx(E.PAPER_TABLE29[False]["alpha_P"], abs=0.002)


def test_noisy_table_stays_near_table6(table):
    rows = E.example_fit_table(table)
    for fam in E.FAMILIES:
        sub = rows[rows["family"] == fam]
        iso = fit_isoflop(sub, n_boot=0)
        joint = fit_chinchilla(sub["params"], sub["tokens"], sub["loss"], grid="coarse", n_boot=0)
        ref = E.PAPER_TABLE6[fam]
        assert iso.alpha_P == pytest.approx(ref["alpha_P"], abs=0.04)
        assert iso.alpha_L == pytest.approx(ref["alpha_L"], abs=0.003)
        assert joint.L_inf == pytest.approx(ref["L_inf"], abs=0.05)


def test_estimator_ordering_matches_appendix_h(table):
    # App. H.2: at every slice fixed-rate (t = 0.5) is lowest and per-block highest
    cdlm = table[(table["family"] == "cdlm") & table["annealed"]]
    cdlm = cdlm[cdlm["mask_rate"].isna() | np.isclose(cdlm["mask_rate"], 0.5)]
    means = cdlm.groupby(["slice_flops", "estimator"])["loss"].mean().unstack()
    order = means[["fixed_rate", "fixed_grid", "mdlm_elbo", "per_block"]].to_numpy()
    assert (np.diff(order, axis=1) > 0).all()


def test_metrics_only_on_concept_families_and_in_range(table):
    base = table[table["family"].isin(["ar", "cdlm"])]
    assert base[list(E.METRICS)].isna().all().all()
    concept = table[table["family"].str.endswith("+concept") & table["estimator"].isin(["ar_ce", "mdlm_elbo"])]
    assert concept[list(E.METRICS)].notna().all().all()
    assert concept["concept_contribution"].between(0, 1).all()
    assert concept["known_concept_alignment"].between(1, 5).all()
    assert (concept[["concept_loss", "concept_independence"]] > 0).all().all()
    pre = concept[~concept["annealed"]]["concept_independence"]
    post = concept[concept["annealed"] & (concept["family"] == "cdlm+concept")]["concept_independence"]
    assert 2.5 < pre.mean() / post.mean() < 10  # Table 30 / App. I.2: 3-10x higher before the anneal


def test_generation_is_deterministic_and_seeded():
    a = E.generate_example_results(seed=3)
    b = E.generate_example_results(seed=3)
    c = E.generate_example_results(seed=4)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a["loss"], c["loss"])


def test_example_runs_write_metrics_jsonl(tmp_path):
    runs = E.write_example_runs(tmp_path)
    assert len(runs) == len(E.example_fit_table().query("slice == 1"))
    lines = (runs[0] / "metrics.jsonl").read_text().splitlines()
    rec = [json.loads(line) for line in lines]
    assert {"step", "loss", "lr", "tokens"} <= set(rec[0])
    steps = [r["step"] for r in rec]
    assert steps == sorted(steps) and rec[-1]["lr"] == pytest.approx(0.0, abs=1e-5)  # WSD decays to zero
