"""Issue 44.4: the adaptive sweep reaches below its ladder — generated shapes (fewer layers,
narrower widths) below the preset's smallest size, down to L1d2, the smallest that trains — and
names each slice whose optimum lies below that with the slice that would bracket it. The
sweeps here train nothing: a stub sweep returns a planted loss table (a parabola in ln P around
N*(C) = N0 (C / 2e9)^0.5), so every decision is checked against a known optimum."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from interpscale.orchestration import adaptive
from interpscale.orchestration.adaptive import (LADDER, Budget, Limits, SliceState, _judge, adaptive_sweep,
                                                floor_budget, shapes_below)

ROOT = Path(__file__).resolve().parents[2]
REALTEXT = ROOT / "tests" / "data" / "realtext"
# the quick demo's sizes and budgets on the real-text fixture (tests/data/realtext, PSF licence)
SIZED = f"""\
[plan]
families = ["ar"]
sizes = ["L1d16", "L1d24", "L1d32", "nano"]
slices = [2e9, 4e9, 8e9]
seq_len = 32
batch_tokens = 256
tolerance = 0.15

[model]
vocab_size = 320

[train]
vocab_size = 320

[data]
kind = "jsonl"
path = "{REALTEXT / 'python-docs.jsonl'}"
concepts = "{REALTEXT / 'concepts.json'}"
"""


def test_the_generated_shapes_below_a_size_have_no_more_layers_and_no_more_width():
    table = pd.DataFrame({"size": ["nano", "L1d16", "L1d24"], "P": [3.3e4, 4.2e3, 9.3e3]})
    assert shapes_below(table, ["nano", "L1d16", "L1d24"]) == ["L1d2", "L1d4", "L1d6", "L1d8", "L1d12"]
    nano = shapes_below(table[table["size"] == "nano"], ["nano"])
    assert nano == ["L1d2", "L1d4", "L1d6", "L1d8", "L1d12", "L1d16", "L1d24", "L1d32"]
    assert LADDER[0] == ("L1d2", 1, 2, 1)  # one layer, one head of width 2: the smallest RoPE trains
    assert shapes_below(pd.DataFrame({"size": ["L1d2"], "P": [74.0]}), ["L1d2"]) == []


class StubSweep:
    """``Sweep`` without training: every run planned so far, its final loss planted."""

    planted = None  # (family, C, P) -> loss
    runs: list = []

    @classmethod
    def from_plan(cls, plan, out_dir, **_):
        StubSweep.runs = list({r.run_id: r for r in [*StubSweep.runs, *plan.runs]}.values())
        return cls()

    def launch(self):
        return None

    def status(self):
        return pd.DataFrame({"run_id": [r.run_id for r in StubSweep.runs], "state": "done"})

    def collect(self):
        return pd.DataFrame([{"run_id": r.run_id, "family": r.family, "slice_flops": r.slice_flops, "params": r.params,
                              "loss": StubSweep.planted(r.family, r.slice_flops, r.params) + 1e-3 * (r.seed % 2),
                              "loss_se": 0.004, "annealed": True, "step": 10} for r in StubSweep.runs])


def _planted(n0):
    def loss(family, c, p):
        return 3.0 + 0.08 * (math.log(p) - math.log(n0 * (c / 2e9) ** 0.5)) ** 2
    return loss


def _sweep(tmp_path, monkeypatch, n0, **kw):
    from interpscale.scaling.isoflop import slice_minimum

    (tmp_path / "p.toml").write_text(SIZED)
    StubSweep.runs, StubSweep.planted = [], _planted(n0)
    monkeypatch.setattr(adaptive, "Sweep", StubSweep)
    return adaptive_sweep(tmp_path / "p.toml", tmp_path / "sw", slice_minimum=slice_minimum, **kw)


def test_a_slice_whose_optimum_lies_below_the_presets_sizes_is_bracketed_with_generated_shapes(tmp_path,
                                                                                                monkeypatch):
    """Planted N* = 900 params at 2e9 (between L1d6 and L1d8), x2 per 4x compute: the quick
    demo's sizes (smallest L1d16, 4.2e3 params) leave every slice's minimum at its smallest;
    the sweep walks down the generated shapes until each slice brackets its optimum."""
    res = _sweep(tmp_path, monkeypatch, 900.0, budget=10.0)
    assert res.all_bracketed, res.summary()
    by_c = {s.slice_flops: s for s in res.slices}
    for c, s in by_c.items():
        true = 900.0 * (c / 2e9) ** 0.5
        assert s.sizes[0] not in ("L1d16", "L1d24", "L1d32", "nano")  # reached below the preset's ladder
        assert s.params[s.sizes[0]] < true < s.params[s.sizes[-1]]
        assert abs(math.log(s.P_star / true)) < 0.1, (c, s.P_star, true)
    assert by_c[2e9].sizes[:2] == ["L1d6", "L1d8"]  # the lowest loss at L1d8, the vertex inside
    res.check()  # all bracketed: no error


def test_a_slice_whose_optimum_lies_below_the_smallest_trainable_shape_is_named_with_the_slice_that_would_bracket_it(
        tmp_path, monkeypatch):
    """Planted N* = 40 params at 2e9, 80 at 8e9 (L1d2 has 74): the 2e9 and 4e9 slices end at
    L1d2 and are named with the compute at which Eq. 1 through the bracketed 8e9 slice puts N*
    at L1d4; the command's one line (exit 1) says so."""
    from interpscale.errors import FailedWork

    res = _sweep(tmp_path, monkeypatch, 40.0, budget=20.0)
    by_c = {s.slice_flops: s for s in res.slices}
    below = [c for c, s in by_c.items() if s.below_floor]
    assert below == [2e9, 4e9], res.summary()
    anchor = by_c[8e9]
    assert anchor.bracketed and anchor.sizes[0] == "L1d2"
    p4 = anchor.params["L1d4"]
    want = 8e9 * (p4 / anchor.P_star) ** (1 / adaptive.alpha_p("ar"))
    for c in below:
        s = by_c[c]
        assert s.done and not s.bracketed and s.sizes[0] == "L1d2"
        assert "its optimum lies below L1d2, the smallest trainable shape" in s.reason
        assert s.remedy.startswith(f"a slice of about {want:.2g} FLOPs ([plan] slices; Eq. 1 with alpha_P 0.528 "
                                   f"through ar C=8e+09's P*=")
        assert want > c * (p4 / s.params["L1d2"]) ** (1 / 0.528)  # above the bound the slice itself sets
    with pytest.raises(FailedWork) as err:
        res.check()
    line = str(err.value)
    assert "\n" not in line and line.startswith("adaptive sweep: 2 of 3 slices not bracketed: ar C=2e+09:")
    assert "ar C=4e+09: lowest loss at the smallest size; its optimum lies below L1d2" in line


def test_with_no_bracketed_slice_the_floor_names_the_bound_its_own_slice_sets():
    ladder = ["L1d2", "L1d4", "L1d6"]
    s = SliceState("ar", 1e9, ladder, ["L1d2", "L1d4", "L1d6"], 50.0, status={n: "ok" for n in ladder},
                   params={"L1d2": 74.0, "L1d4": 276.0, "L1d6": 606.0})
    rows = pd.DataFrame({"run_id": ladder, "params": [74.0, 276.0, 606.0], "loss": [3.0, 3.1, 3.3],
                         "annealed": True, "step": 10})
    _judge(s, rows, ladder, lambda p, loss: {"P_star": p[0], "interior": False, "reason": "edge"}, Limits(),
           Budget(1e12))
    assert s.done and s.below_floor and not s.bracketed
    bound = 1e9 * (276.0 / 74.0) ** (1 / 0.528)
    assert s.remedy == (f"a slice of at least {bound:.2g} FLOPs ([plan] slices; Eq. 1 with alpha_P 0.528 puts N* "
                        f"at L1d4)")
    assert floor_budget(s, [s]) == s.remedy
    # a ladder that ends above the floor at its larger end still says "a wider grid"
    top = SliceState("ar", 1e9, ladder, ["L1d2", "L1d4", "L1d6"], 50.0, status={n: "ok" for n in ladder},
                     params=dict(s.params))
    _judge(top, rows.assign(loss=[3.3, 3.1, 3.0]), ladder, lambda p, loss: {"P_star": p[-1], "interior": False,
                                                                             "reason": "edge"}, Limits(), Budget(1e12))
    assert not top.below_floor and "no larger size than L1d6" in top.reason and top.remedy.startswith("a wider grid")


def test_the_ladder_reaches_below_the_presets_sizes_and_leaves_out_a_shape_the_family_refuses(tmp_path, monkeypatch):
    (tmp_path / "p.toml").write_text(SIZED)
    _, _, states = adaptive._first_states(tmp_path / "p.toml", None, 3, None)
    s = states[0]
    assert s.sizes == ["L1d16", "L1d24", "L1d32"]  # the first grid: the preset's own sizes
    assert s.ladder[:6] == ["L1d2", "L1d4", "L1d6", "L1d8", "L1d12", "L1d16"] and s.ladder[-1] == "nano"
    assert s.params["L1d2"] < s.params["L1d4"] < s.params["L1d16"] and s.status["L1d2"] == "ok"
    plan = adaptive._plan

    def refuses_l1d2(tree, family, c, sizes, ladder, strict, priced=False):  # a plugin model that needs d >= 4
        if "L1d2" in sizes:
            raise ValueError("d_model must be >= 4")
        return plan(tree, family, c, sizes, ladder, strict, priced)

    monkeypatch.setattr(adaptive, "_plan", refuses_l1d2)
    _, _, states = adaptive._first_states(tmp_path / "p.toml", None, 3, None)
    assert states[0].ladder[0] == "L1d4" and "L1d2" not in states[0].params


def test_the_command_exits_1_with_one_line_naming_each_slice_below_the_floor(tmp_path, monkeypatch, capsys):
    """`sweep launch --adaptive` end to end (the stub sweep trains nothing): exit 1, the table
    and the summary on stdout, and one stderr line naming the 2e9 and 4e9 slices and the slice
    compute that would bracket them; `SWEEP/adaptive.json` records them as below the floor."""
    import json

    from interpscale.cli import main

    (tmp_path / "p.toml").write_text(SIZED)
    StubSweep.runs, StubSweep.planted = [], _planted(40.0)
    monkeypatch.setattr(adaptive, "Sweep", StubSweep)
    code = main(["sweep", "launch", "--adaptive", "--budget", "20", "--preset", str(tmp_path / "p.toml"),
                 "--out", str(tmp_path / "sw")])
    out, err = capsys.readouterr()
    assert code == 1 and "adaptive sweep: 1 of 3 slices bracket their optimum" in out
    line = [ln for ln in err.splitlines() if "not bracketed" in ln]
    assert len(line) == 1 and "2 of 3 slices not bracketed: ar C=2e+09:" in line[0]
    assert line[0].count("its optimum lies below L1d2, the smallest trainable shape (would bracket it: a slice of "
                         "about 8.4e+10 FLOPs") == 2
    report = json.loads((tmp_path / "sw" / "adaptive.json").read_text())
    assert [s["below_floor"] for s in report["slices"]] == [True, True, False]
