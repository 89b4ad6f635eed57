"""Issue 29.1: the adaptive sweep — its prior first grid, its rule for adding sizes, and a
real-text sweep (tests/data/realtext) of ar and ar+concept that brackets every optimum."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from interpscale.orchestration.adaptive import SliceState, _judge, alpha_p, prior_params

ROOT = Path(__file__).resolve().parents[2]
PRESET = ROOT / "configs" / "pydocs-adaptive.toml"


def test_prior_scales_with_the_familys_alpha_p_from_its_calibration():
    """Eq. (1): N*(C0) is the size trained at the stated tokens per parameter; N* grows as C^alpha_P."""
    table = pd.DataFrame({"P": [1e3, 4e3, 1.6e4], "tokens_per_param": [400.0, 100.0, 25.0]})
    assert prior_params(table, 1e9, 1e9, "ar", 100.0) == pytest.approx(4e3)
    assert prior_params(table, 1e9, 1e9, "ar", 50.0) == pytest.approx(8e3)  # half-way in log
    ratio = prior_params(table, 1e10, 1e9, "ar+concept", 100.0) / prior_params(table, 1e9, 1e9, "ar+concept", 100.0)
    assert ratio == pytest.approx(10 ** 0.621) and alpha_p("ar+concept") == 0.621
    assert alpha_p("no-such-family") == 0.5


def test_a_preset_without_sizes_plans_the_prior_centred_grid():
    from interpscale.orchestration import plan

    p = plan(PRESET)  # no [plan] sizes: the planner asks the adaptive module for the first grid
    assert len(p.runs) == 12 and (p.table["status"] == "ok").all()
    for (fam, c), g in p.table.groupby(["family", "C_target"]):
        assert len(g) == 3, (fam, c)
        tpp = sorted(g["tokens_per_param"])
        if c == 3e9:  # calibrated at the first slice: its middle size is the nearest to 100 tokens/param
            assert tpp[0] < 100 < tpp[2]


def _slice(sizes, ladder=("a", "b", "c", "d", "e"), status=None):
    return SliceState("ar", 1e9, list(ladder), list(sizes), 1.0,
                      status=status or {n: "ok" for n in ladder})


def _rows(sizes, losses):
    P = {"a": 1e3, "b": 2e3, "c": 4e3, "d": 8e3, "e": 1.6e4}
    return pd.DataFrame({"family": "ar", "slice_flops": 1e9, "run_id": list(sizes), "params": [P[s] for s in sizes],
                         "loss": losses, "annealed": True, "step": 10})


def _edge(params, loss):
    i = int(pd.Series(loss).argmin())
    inner = 0 < i < len(loss) - 1
    return {"P_star": params[i], "interior": inner, "reason": "" if inner else "minimum at edge"}


def test_an_edge_minimum_adds_the_next_size_until_bracketed_or_a_stated_reason():
    s = _slice(["b", "c", "d"])
    _judge(s, _rows("bcd", [3.0, 3.2, 3.4]), _edge, max_added=3)  # lowest at the smallest: go smaller
    assert s.sizes == ["a", "b", "c", "d"] and s.added == 1 and not s.done
    _judge(s, _rows("abcd", [3.1, 3.0, 3.2, 3.4]), _edge, max_added=3)
    assert s.done and s.bracketed and s.reason == "" and s.P_star == 2e3
    low = _slice(["a", "b", "c"])
    _judge(low, _rows("abc", [3.0, 3.1, 3.2]), _edge, max_added=3)
    assert low.done and not low.bracketed and "no smaller size" in low.reason
    capped = _slice(["c", "d", "e"][:3], ladder=("a", "b", "c", "d", "e"))
    _judge(capped, _rows("cde", [3.0, 3.1, 3.2]), _edge, max_added=0)
    assert capped.done and "limit of 0 added sizes" in capped.reason
    blocked = _slice(["a", "b", "c"], status={"a": "ok", "b": "ok", "c": "ok", "d": "infeasible: C off by +20%",
                                              "e": "ok"})
    _judge(blocked, _rows("abc", [3.4, 3.2, 3.0]), _edge, max_added=3)
    assert blocked.done and "next larger size d is infeasible" in blocked.reason
    missing = _slice(["a", "b", "c"])
    _judge(missing, _rows("ab", [3.0, 3.1]), _edge, max_added=3)
    assert missing.done and "1 of its runs produced no result" in missing.reason


@pytest.mark.slow
def test_adaptive_sweep_of_real_text_brackets_every_slice_and_fits(tmp_path):
    """Acceptance: `sweep launch --adaptive` on the real-text fixture (ar and ar+concept,
    tiny sizes) ends with every slice bracketing its optimum and `fit` exits 0."""
    from interpscale.cli import main

    out = tmp_path / "sw"
    assert main(["sweep", "launch", "--adaptive", "--preset", str(PRESET), "--out", str(out)]) == 0
    report = json.loads((out / "adaptive.json").read_text())
    summary = {(s["family"], s["slice_flops"]): (s["bracketed"], s["reason"], s["sizes"]) for s in report["slices"]}
    assert report["all_bracketed"], summary
    assert {f for f, _ in summary} == {"ar", "ar+concept"} and len(summary) == 4
    results = out / "results.parquet"
    code = main(["fit", "families", str(results), "--out", str(tmp_path / "fits"), "--annealed", "--n-boot", "10"])
    assert code == 0
    fits = json.loads((tmp_path / "fits" / "fits.json").read_text())
    assert {"ar", "ar+concept"} <= set(json.dumps(fits).split('"')), "a family is missing from fits.json"
    assert all(math.isfinite(s["P_star"]) for s in report["slices"])
