"""Issue 29.1: the adaptive sweep — its prior first grid, its rule for adding sizes, and a
sweep of plain English generated from the interpreter's docstrings. The real-text fixture's
sweep (configs/pydocs-adaptive.toml, minutes of training) is measured by hand in docs/data.md;
the ladder below the preset's sizes is tested on planted losses in test_adaptive_below.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from interpscale.orchestration.adaptive import (Budget, Limits, SliceState, _judge, alpha_p, noise_fit, prior_params,
                                                run_noise, size_table)

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
    from interpscale.orchestration.adaptive import first_grid

    p = first_grid(PRESET)  # no [plan] sizes: the prior-centred first grid (what `plan` shows)
    assert len(p.runs) == 18 and (p.table["status"] == "ok").all()
    for (fam, c), g in p.table.groupby(["family", "C_target"]):
        assert len(g) == 3, (fam, c)
        tpp = sorted(g["tokens_per_param"])
        if c == 2e9:  # calibrated at the first slice: its middle size is the nearest to 100 tokens/param
            assert tpp[0] < 100 < tpp[2]


def _slice(sizes, ladder=("a", "b", "c", "d", "e"), status=None):
    return SliceState("ar", 1e9, list(ladder), list(sizes), 1.0,
                      status=status or {n: "ok" for n in ladder})


P = {"a": 1e3, "b": 2e3, "c": 4e3, "d": 8e3, "e": 1.6e4}


def _rows(sizes, losses, se=None, seed=0):
    return pd.DataFrame({"family": "ar", "slice_flops": 1e9, "run_id": [f"{x}{seed}" for x in sizes],
                         "params": [P[x] for x in sizes], "loss": losses, "annealed": True, "step": 10,
                         **({"loss_se": se} if se is not None else {})})


def _edge(params, loss):
    i = int(pd.Series(loss).argmin())
    inner = 0 < i < len(loss) - 1
    return {"P_star": params[i], "interior": inner, "reason": "" if inner else "minimum at edge"}


def _judged(s, rows, limits=Limits(3, 2, 2.0), budget=None):
    budget = budget or Budget(1e12)
    _judge(s, rows, list(rows["run_id"]), _edge, limits, budget)
    return budget


def test_an_edge_minimum_adds_the_next_size_until_bracketed_or_a_stated_reason():
    s = _slice(["b", "c", "d"])
    _judged(s, _rows("bcd", [3.0, 3.2, 3.4]))  # lowest at the smallest: go smaller
    assert s.sizes == ["a", "b", "c", "d"] and s.added == 1 and not s.done
    _judged(s, _rows("abcd", [3.1, 3.0, 3.2, 3.4]))
    assert s.done and s.bracketed and s.reason == "" and s.P_star == 2e3
    low = _slice(["a", "b", "c"])
    _judged(low, _rows("abc", [3.0, 3.1, 3.2]))
    assert low.done and not low.bracketed and low.below_floor  # the ladder's smallest: the smallest trainable shape
    assert "its optimum lies below a, the smallest trainable shape" in low.reason
    assert low.remedy == "a larger slice ([plan] slices)"  # no sizes priced: the slice's compute is not named
    blocked = _slice(["a", "b", "c"], status={"a": "ok", "b": "ok", "c": "ok", "d": "infeasible: C off by +20%",
                                              "e": "ok"})
    _judged(blocked, _rows("abc", [3.4, 3.2, 3.0]))
    assert blocked.done and "next larger size d is infeasible" in blocked.reason
    assert blocked.remedy.startswith("more steps per run")
    missing = _slice(["a", "b", "c"])
    _judge(missing, _rows("ab", [3.0, 3.1]), ["a0", "b0", "c0"], _edge, Limits(), Budget(1e12))
    assert missing.done and "1 of its runs produced no result" in missing.reason


def test_past_the_size_limit_only_in_the_trend_direction_and_while_the_budget_allows():
    s = _slice(["c", "d", "e"], ladder=("a", "b", "c", "d", "e"))
    budget = _judged(s, _rows("cde", [3.0, 3.1, 3.2]), Limits(max_added=0), Budget(limit=4e9, used=3e9))
    assert s.sizes == ["b", "c", "d", "e"] and not s.done and budget.used == 4e9
    assert any("past the limit of 0 added sizes: the trend points smaller" in h for h in s.history)
    _judged(s, _rows("bcde", [2.9, 3.0, 3.1, 3.2]), Limits(max_added=0), budget)  # the budget is spent now
    assert s.done and not s.bracketed and "the limit of 0 added sizes is reached and the budget" in s.reason
    assert s.remedy.startswith("a larger budget (at least 1.25x the current one) or --max-added 2")


def test_a_weighted_parabola_matches_numpy_and_statsmodels():
    """noise_fit against two references: numpy's weighted polyfit (coefficients, unscaled
    covariance) and statsmodels' WLS (with the scatter scaled in when chi2 > 1)."""
    import numpy as np
    import statsmodels.api as sm

    rng = np.random.default_rng(3)
    Pn = np.geomspace(1e3, 1e5, 7)
    u = np.log(Pn) - np.log(Pn).mean()
    se = rng.uniform(0.01, 0.03, 7)
    y = 3.0 + 0.05 * u + 0.04 * u ** 2 + rng.normal(0, se)
    fit = noise_fit(Pn, y, se)
    coef, cov = np.polyfit(u, y, 2, w=1 / se, cov="unscaled")
    wls = sm.WLS(y, np.column_stack([np.ones_like(u), u, u ** 2]), weights=1 / se ** 2).fit()
    chi2 = float(np.sum((wls.resid / se) ** 2)) / 4
    assert fit["c"] == pytest.approx(coef[0], rel=1e-9) and fit["c"] == pytest.approx(wls.params[2], rel=1e-9)
    want = math.sqrt(cov[0, 0]) * math.sqrt(max(1.0, chi2))
    assert fit["c_se"] == pytest.approx(want, rel=1e-6)
    line = sm.WLS(y, np.column_stack([np.ones_like(u), u]), weights=1 / se ** 2).fit()
    assert fit["b"] == pytest.approx(line.params[1], rel=1e-9)


def test_seeds_and_evaluation_noise_make_each_sizes_uncertainty():
    rows = pd.concat([_rows("abc", [3.0, 2.9, 3.1], se=[0.2, 0.0, 0.0]),
                      _rows("abc", [3.2, 2.9, 3.1], se=[0.2, 0.0, 0.0], seed=1)])
    tab = size_table(rows)
    assert list(tab["n"]) == [2, 2, 2] and tab["loss"].tolist() == pytest.approx([3.1, 2.9, 3.1])
    pooled = (0.1 ** 2 * 2) / 3  # the seeds' squared deviations over 3 degrees of freedom
    assert tab["se"][1] == pytest.approx(math.sqrt(pooled / 2))  # loss_se 0 (a deterministic estimator): the seeds'
    assert tab["se"][0] == pytest.approx(0.2 / math.sqrt(2))  # the evaluation's own se when larger
    one = size_table(_rows("abc", [3.0, 2.9, 3.1], se=[0.0, 0.0, 0.0]))
    assert one["se"].isna().all()  # one seed and no reported se: unknown, the parabola's scatter decides


def test_run_noise_pools_seeds_and_parabola_scatter_to_the_true_spread():
    """Synthetic ground truth: 40 slices of five sizes x two seeds around a known parabola with
    run noise sigma = 0.03; the pooled estimate recovers sigma (280 degrees of freedom)."""
    import numpy as np

    rng = np.random.default_rng(0)
    slices = []
    for _ in range(40):
        u = np.log([P[x] for x in "abcde"]) - np.log(P["c"])
        rows = [_rows("abcde", 3.0 + 0.1 * u ** 2 + 0.05 * u + rng.normal(0, 0.03, 5), seed=k) for k in (0, 1)]
        slices.append(pd.concat(rows))
    assert run_noise(slices) == pytest.approx(0.03, rel=0.1)
    assert math.isnan(run_noise([_rows("abc", [3.0, 2.9, 3.1])]))  # one seed, three sizes: no degree of freedom
    tab = size_table(_rows("abc", [3.0, 2.9, 3.1]), noise=0.03)
    assert tab["se"].tolist() == pytest.approx([0.03] * 3)  # the family's noise stands in


def test_a_flat_noisy_slice_widens_then_replicates_then_names_what_would_bracket_it():
    """Synthetic ground truth: a slice whose losses differ by less than their noise. The sweep
    widens the grid, replicates every size, then stops naming more steps or another seed."""
    s = _slice(["b", "c", "d"])
    noisy = [0.05, 0.05, 0.05]
    _judged(s, _rows("bcd", [3.02, 3.0, 3.01], se=noisy))
    assert s.sizes == ["a", "b", "c", "d", "e"] and s.added == 2 and not s.done  # a wider grid first
    assert "is not significant" in s.history[-1]
    _judged(s, _rows("abcde", [3.03, 3.02, 3.0, 3.01, 3.02], se=[0.05] * 5))
    assert s.seeds == 2 and not s.done  # no room to widen: a replicate of every size
    rows = pd.concat([_rows("abcde", [3.03, 3.02, 3.0, 3.01, 3.02], se=[0.05] * 5),
                      _rows("abcde", [3.02, 3.03, 3.01, 3.0, 3.03], se=[0.05] * 5, seed=1)])
    _judged(s, rows)
    assert s.done and not s.bracketed and "is not significant" in s.reason
    assert s.remedy == "more steps per run (a larger slice, or more [train] eval_batches) or another replicate " \
                       "seed of every size (--max-seeds 3)"
    clear = _slice(["b", "c", "d"])  # the same shape with small uncertainties: bracketed at once
    _judged(clear, _rows("bcd", [3.02, 3.0, 3.01], se=[0.001] * 3))
    assert clear.bracketed and clear.curvature > 2 * clear.curvature_se


def test_a_round_reopens_a_slice_the_familys_noise_no_longer_supports_and_probes_unknown_noise():
    from types import SimpleNamespace

    from interpscale.orchestration.adaptive import _judge_round

    shallow, wide = _slice(["b", "c", "d"]), _slice(["a", "b", "c", "d", "e"])
    wide.slice_flops = 2e9
    shallow.done = shallow.bracketed = True  # bracketed in an earlier round, before any noise was known
    df = pd.concat([_rows("bcd", [3.01, 3.0, 3.01]),
                    _rows("abcde", [3.1, 2.95, 3.05, 2.9, 3.1], seed=9).assign(slice_flops=2e9)])
    per = {shallow.name: [SimpleNamespace(run_id=f"{x}0") for x in "bcd"],
           wide.name: [SimpleNamespace(run_id=f"{x}9") for x in "abcde"]}
    _judge_round([shallow, wide], df, per, _edge, Limits(max_added=3), Budget(1e12))
    assert not shallow.bracketed and shallow.history[0].startswith("reopened: the family's run noise is")
    assert shallow.added == 2 and shallow.sizes == list("abcde")  # widened on both sides to see past the noise
    alone = _slice(["b", "c", "d"])  # one seed, three sizes, no other slice: noise unknown -> measured once
    _judge_round([alone], _rows("bcd", [3.1, 3.0, 3.1]), {alone.name: [SimpleNamespace(run_id=f"{x}0") for x in "bcd"]},
                 _edge, Limits(), Budget(1e12))
    assert alone.seeds == 2 and not alone.done and "run noise is unknown" in alone.history[-1]


def test_a_sweep_that_does_not_bracket_exits_1_naming_each_slice():
    from interpscale.errors import FailedWork
    from interpscale.orchestration.adaptive import AdaptiveResult

    ok, bad = _slice(["a", "b", "c"]), _slice(["c", "d", "e"])
    ok.bracketed = True
    bad.reason, bad.remedy = "lowest loss at the largest size; the size ladder has no larger size than e", "a wider grid"
    res = AdaptiveResult(None, [ok, bad], rounds=2)
    with pytest.raises(FailedWork, match=r"1 of 2 slices not bracketed: ar C=1e\+09: lowest loss at the largest "
                                         r"size; .* \(would bracket it: a wider grid\)"):
        res.check()
    assert "would bracket it: a wider grid" in res.summary()


def stdlib_docstring_prose(out: Path, limit_bytes: int | None = None) -> int:
    """Plain English text generated from the running interpreter's own library (not
    committed): the prose paragraphs of every module, class and function docstring of
    Lib/*.py and Lib/*/*.py (parsed with ast, nothing imported; no code examples, no indented
    or mostly-symbol lines), one paragraph per document; returns the bytes written."""
    import ast
    import re
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    paras: list[str] = []
    for f in sorted(root.glob("*.py")) + sorted(root.glob("[a-z]*/*.py")):
        if f.name.startswith("test") or f.parent.name.startswith("test"):
            continue
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                           ast.ClassDef)))]:
            for para in re.split(r"\n\s*\n", ast.get_docstring(node) or ""):
                lines = para.splitlines()
                if len(para) < 80 or any(ln.startswith((" ", "\t", ">>>")) for ln in lines):
                    continue
                if sum(c.isalpha() or c in " ,.;:'()-\n" for c in para) >= 0.9 * len(para):
                    paras.append(" ".join(ln.strip() for ln in lines))
    text = "\n\n".join(paras)[:limit_bytes] + "\n"
    out.write_text(text, encoding="utf-8")
    return len(text.encode("utf-8"))


PROSE_PRESET = """\
[plan]
families = ["ar"]
slices = [1e10, 2e10, 4e10]
seq_len = 64
batch_tokens = 512

[model]
vocab_size = 512

[train]
lr = 1e-2
vocab_size = 512
eval_batches = 4
log_every = 25

[data]
kind = "text"
path = "prose.txt"

[launch]
executor = "local"
max_parallel = 2
runs_per_job = 3
"""


@pytest.mark.slow
def test_adaptive_sweep_of_plain_english_brackets_every_slice_or_names_them(tmp_path, capsys):
    """Issue 37.7 acceptance: an `ar` sweep (vocabulary 512, seq 64, slices 1e10-4e10) on
    ~880 kB of plain English generated from the interpreter's docstrings brackets every slice,
    or exits 1 naming each slice it could not and what would bracket it."""
    from interpscale.cli import main

    if stdlib_docstring_prose(tmp_path / "prose.txt") < 200_000:
        pytest.skip("this interpreter's library has too little docstring prose")
    (tmp_path / "prose.toml").write_text(PROSE_PRESET)
    out = tmp_path / "sw"
    code = main(["sweep", "launch", "--adaptive", "--preset", str(tmp_path / "prose.toml"), "--out", str(out)])
    report = json.loads((out / "adaptive.json").read_text())
    slices = report["slices"]
    assert len(slices) == 3 and all(s["done"] for s in slices)
    if report["all_bracketed"]:
        assert code == 0
        assert all(math.isfinite(s["P_star"]) and s["curvature"] > 0 for s in slices)
    else:
        err = capsys.readouterr().err
        assert code == 1, "a sweep that leaves a slice unbracketed must not exit 0"
        for s in slices:
            if not s["bracketed"]:
                assert f"ar C={s['slice_flops']:.3g}" in err and s["remedy"] and s["remedy"] in err
