"""``interpscale design`` (issue 44): the noise model against planted noise, the simulated grid is
the plan's, the written preset plans as written, and the command end to end."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from interpscale import design as d
from interpscale.design import achieved, recommend, simulation
from interpscale.orchestration import plan
from interpscale.orchestration.config import Preset

TINY = Path(__file__).parent / "data" / "tiny-demo.toml"


def _grid(slices=(1e9, 4e9, 1.6e10, 6.4e10, 2.56e11, 1.02e12), sizes=7, families=("base", "variant")) -> d.Grid:
    """Sizes a factor 2 apart around DEFAULT_LAW's optimum on each slice (as simulate_pair places them)."""
    law = d.DEFAULT_LAW
    a, b = law["alpha"], law["beta"]
    G = (a * law["A_P"] / (b * law["A_D"])) ** (1 / (a + b))
    rows = []
    for fam in families:
        for C in slices:
            P0 = G * (C / 6) ** (b / (a + b))
            for j in range(sizes):
                P = P0 * 2.0 ** (j - (sizes - 1) / 2)
                rows.append(dict(family=fam, slice_flops=C, params=P, tokens=C / (6 * P), flops=C))
    pts = pd.DataFrame(rows)
    return d.Grid(slices=tuple(slices), sizes_per_slice=sizes, points=pts, compute=float(pts.flops.sum()),
                  n_runs=len(pts), label="test")


@pytest.mark.parametrize("run_sd,slice_sd", [(0.01, 0.0), (0.005, 0.01)])
def test_noise_model_recovers_planted_noise(run_sd, slice_sd):
    grid = _grid(slices=tuple(np.geomspace(1e9, 1e13, 10)), sizes=7)
    truth = d.Truth(law=d.DEFAULT_LAW, multiplier=1.3, pivot=1e11)
    noise = d.NoiseModel(run_sd=run_sd, slice_sd=slice_sd)
    inside_run = inside_slice = 0
    for seed in range(20):
        table = d.simulate(grid, truth, noise, "base", "variant", seed)
        est = d.noise_from_pilot(table)
        inside_run += est.run_ci[0] <= run_sd <= est.run_ci[1]
        inside_slice += (est.slice_ci[0] <= slice_sd <= est.slice_ci[1]) if slice_sd else (est.slice_sd < run_sd)
        assert est.df_run >= 30 and est.source == "pilot"
    assert inside_run >= 15  # a 90% interval: at least 15 of 20 (binomial tail < 2%)
    assert inside_slice >= 14


def test_simulated_variant_has_the_planted_multiplier():
    """Noise-free, the variant's loss at (P, D) on slice C is the base's at (P, D)/sqrt(m(C))."""
    grid = _grid()
    truth = d.Truth(law=d.DEFAULT_LAW, multiplier=1.5, growth=0.1, pivot=1e10)
    t = d.simulate(grid, truth, d.NoiseModel(run_sd=0.0), "base", "variant", 0)
    v = t[t.family == "variant"].iloc[0]
    m = 1.5 * (v.slice_flops / 1e10) ** 0.1
    base = truth.loss(np.array([v.params / math.sqrt(m)]), np.array([v.tokens / math.sqrt(m)]),
                      np.array([v.slice_flops]), False)[0]
    assert v.loss == pytest.approx(base, rel=1e-12)


def test_grid_is_the_plans_and_the_written_preset_plans_as_written(tmp_path):
    grid = d.grid_from_plan(TINY, slices=[2e8, 4e8, 8e8], sizes_per_slice=3)
    runs = plan(Preset.load(TINY, slices={f: [2e8, 4e8, 8e8] for f in ("ar", "ar+concept")})).runs
    assert grid.n_runs == len(runs) and grid.slices == (2e8, 4e8, 8e8)
    assert sorted(grid.points.params) == sorted(float(r.params) for r in runs)
    path = d.write_preset(TINY, grid, tmp_path / "recommended.toml")
    again = plan(str(path))
    assert sorted(float(r.slice_flops) for r in again.runs) == sorted(grid.points.slice_flops)
    assert Preset.load(str(path)).plan.max_sizes_per_slice == 3


def test_assess_tallies_the_analysis(monkeypatch):
    grid = _grid(sizes=5)
    truth = d.Truth(law=d.DEFAULT_LAW, multiplier=1.3)
    kw = dict(base="base", variant="variant", n_boot=20, workers=1)
    gp = d.assess(grid, truth, d.NoiseModel(run_sd=0.003), n_sims=2, **kw)
    for scen in ("constant", "growing"):
        p = gp.scenarios[scen]["p_verdict"]
        assert sum(p.values()) == pytest.approx(1.0) and gp.scenarios[scen]["n"] == 2
    assert 0 <= gp.power <= 1 and 0 <= gp.false_alarm <= 1
    assert gp.scenarios["constant"]["bracketed_slices"] == 1.0  # sizes centred on the optimum
    # a confirmation with 3 sweeps after this screen of 2 adds one per truth (the screen's are the first
    # seeds) and tallies as 3 simulated from scratch
    calls, real = [], d.analyse_once
    monkeypatch.setattr(simulation, "analyse_once", lambda job, seed: calls.append(seed) or real(job, seed))
    confirmed = d.assess(grid, truth, d.NoiseModel(run_sd=0.003), n_sims=3, more_of=gp, **kw)
    assert len(calls) == 2 and confirmed.n_sims == 3
    monkeypatch.undo()
    assert confirmed.scenarios == d.assess(grid, truth, d.NoiseModel(run_sd=0.003), n_sims=3, **kw).scenarios
    ex = d.assess(grid, truth, d.NoiseModel(run_sd=0.003), question="exponent", base="base", n_sims=2, n_boot=20,
                  workers=1)
    assert math.isfinite(ex.alpha_P_halfwidth) and ex.alpha_P_halfwidth > 0


def test_design_command_end_to_end(tmp_path):
    out = tmp_path / "design"
    r = subprocess.run([sys.executable, "-m", "interpscale.cli", "design", str(TINY), "--noise", "0.003",
                        "--question", "exponent", "--sims", "2", "--screen-sims", "2", "--max-grids", "1",
                        "--n-boot", "10", "--workers", "1", "--out", str(out)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert {"design.json", "design.md", "design.png"} <= {p.name for p in out.iterdir()}
    assert "alpha_P half-width" in (out / "design.md").read_text()


@pytest.mark.parametrize("argv,words", [
    (["--noise", "-1"], "--noise: must be a positive number"),
    (["--pilot", "nowhere.csv"], "--pilot: nowhere.csv: no such file"),
    ([], "--pilot RESULTS or --noise SD"),
    (["--noise", "0.01", "--variant", "cdlm"], "is not a family of the preset"),
])
def test_design_bad_input_is_one_line(tmp_path, argv, words):
    r = subprocess.run([sys.executable, "-m", "interpscale.cli", "design", str(TINY), *argv, "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_stated_world_is_centred_on_the_planned_sizes():
    """Without a pilot the planted optimum is where plan put its sizes, so every slice brackets it."""
    grid = d.grid_from_plan(TINY)
    truth = d.truth_for_grid(grid, "ar")
    t = d.simulate(grid, dataclasses.replace(truth, pivot=3e8), d.NoiseModel(run_sd=0.0), "ar", None, 0)
    for _, g in t.groupby("slice_flops"):
        i = int(np.argmin(g["loss"].to_numpy()))
        assert 0 < i < len(g) - 1
    assert truth.optimal_loss(math.sqrt(2e8 * 4e8)) == pytest.approx(3.0)


def test_a_finished_sweep_states_its_achieved_power(monkeypatch):
    """Its own grid simulated, then the larger grids widest first: a grid nested in one whose screen
    fell short (fewer slices, the same sizes) is not simulated, and a screen far short stops as soon as
    its answer is settled (growing k only)."""
    from interpscale.scaling.multiplier import simulate_pair

    table = simulate_pair(1.3, 0.0, seed=3, sizes_per_slice=5, noise=0.05)  # a noisy sweep, far from 80%
    seen, real_assess, real_many = [], achieved.assess, achieved.run_many

    def spy(grid, *a, **kw):
        seen.append((len(grid.slices), grid.sizes_per_slice, kw["n_sims"]))
        return real_assess(grid, *a, **kw)

    def spy_many(job, seeds, *a, **kw):
        seen.extend([(len(job.grid.slices), job.grid.sizes_per_slice, "growing")] * len(seeds))
        return real_many(job, seeds, *a, **kw)

    monkeypatch.setattr(achieved, "assess", spy)
    monkeypatch.setattr(achieved, "run_many", spy_many)
    ap = d.achieved_power(table, "base", "variant", n_sims=3, n_boot=20, workers=1, extensions=[(7, 5), (9, 5)])
    assert 0 <= ap.power <= 1 and 0 <= ap.false_alarm <= 1 and ap.n_sims == 3
    text = ap.sentence()
    assert "had power" in text and "5 slices x <= 5 sizes" in text
    assert ap.power < 0.8 and seen[0] == (5, 5, 3)  # its own grid, both truths
    assert ap.needed is None and "no grid" in text  # (7, 5) lies inside (9, 5): not simulated
    # the widest's screen, growing k only: at most its 5 simulations (0 of 3 growing settles it: bound 0.73)
    assert set(seen[1:]) == {(9, 5, "growing")} and 3 <= len(seen) - 1 <= 5


def test_a_curtailed_power_test_answers_as_all_its_simulations_would():
    """``PowerTest`` stops simulating once its answer is settled; its screen and confirmation answer as
    all their simulations (``assess``'s growing-k job and seeds) do, for a grid that reaches the
    target and for one that does not."""
    grid, noise = _grid(slices=(1e9, 4e9, 1.6e10, 6.4e10), sizes=5), d.NoiseModel(run_sd=0.004)
    truth = d.Truth(law=d.DEFAULT_LAW, multiplier=1.3)
    kw = dict(base="base", variant="variant", growth=0.04, n_boot=20, seed=1)
    growing = d.scenario_jobs(grid, truth, noise, **kw)["growing"]  # assess's growing-k job and seeds
    hits = [r["verdict"] == "growing" for r in d.run_many(growing, d.scenario_seeds(1, 1, 6), 1)]
    assert 0 < sum(hits) < 6, hits  # both answers below are reachable from this grid's simulations
    for power in (0.3, 0.9):
        pt = d.PowerTest(grid, truth, noise, power=power, n_screen=3, n_sims=6, workers=1, starts=growing.starts,
                         **kw)  # starts given, as a finished sweep gives its own
        assert pt.screen() == d.reaches(sum(hits[:3]), 3, power)
        assert pt.confirm() == (sum(hits) >= math.ceil(power * 6 - 1e-9))
        assert pt.hits == hits[:len(pt.hits)]  # the same simulations, in order
    assert len(pt.hits) == hits.index(False) + 1  # 0.9 of 6 needs 6: the first other verdict settles it


def test_a_screen_stops_only_grids_whose_power_cannot_reach_the_target():
    # Clopper-Pearson one-sided 90% upper bounds: 0 of 5 -> 0.369, 3 of 5 -> 0.894, 2 of 5 -> 0.734
    assert not d.reaches(0, 5, 0.8) and not d.reaches(2, 5, 0.8)
    assert d.reaches(3, 5, 0.8) and d.reaches(5, 5, 0.8)
    assert d.reaches(0, 5, 0.3)  # a low target is not screened out by none of five


EPOCH = Path(__file__).parent / "data" / "epoch" / "epoch_chinchilla_svg_extracted_data.csv"


def _epoch_sweep() -> pd.DataFrame:
    """Hoffmann et al.'s IsoFLOP runs as read off their Figure 4 (tests/data/epoch/README.md): each
    run on its nearest of the nine budgets, those within 15% of it."""
    from interpscale.scaling.backtest import nearest_budget

    raw = pd.read_csv(EPOCH)
    N, C = raw["Model Size"].to_numpy(float), raw["Training FLOP"].to_numpy(float)
    t = pd.DataFrame(dict(family="chinchilla", params=N, tokens=C / (6 * N), flops=C, loss=raw["loss"],
                          slice_flops=nearest_budget(C)))
    return t[(t.flops / t.slice_flops - 1).abs() <= 0.15]


@pytest.mark.slow
def test_a_pilot_of_the_smallest_budgets_predicts_the_full_sweeps_interval():
    """Issue 44's public check (docs/design.md): the noise and law of the four smallest of the nine
    Chinchilla budgets (6e18-6e19 FLOPs) predict the width of alpha_P's 90% interval that the whole
    sweep (9 budgets, 6e18-3e21) gets from the same fit, within a factor 1.5."""
    from interpscale.scaling import fit_isoflop, quiet
    from interpscale.scaling.backtest import CHINCHILLA_BUDGETS

    sweep = _epoch_sweep()
    pilot = sweep[sweep.slice_flops <= CHINCHILLA_BUDGETS[3]]
    noise, truth = d.noise_from_pilot(pilot), d.truth_from_pilot(pilot, "chinchilla")
    assert noise.df_run >= 6 and 0.002 < noise.run_sd < 0.02  # the extraction's quantised losses: ~0.6%
    grid = d.grid_from_results(sweep, ["chinchilla"])
    assert len(grid.slices) == 9 and grid.n_runs == len(sweep)
    gp = d.assess(grid, truth, noise, question="exponent", base="chinchilla", n_sims=16, n_boot=100, workers=1)
    predicted = 2 * gp.alpha_P_halfwidth
    with quiet():
        full = fit_isoflop(sweep, n_boot=100, seed=0)
    lo, hi = full.ci["alpha_P"]
    assert 1 / 1.5 <= predicted / (hi - lo) <= 1.5, (predicted, hi - lo)


@pytest.mark.slow
def test_predicted_verdict_probabilities_match_fresh_simulations():
    """Calibration (docs/design.md): the verdict probabilities ``assess`` predicts with its seeds match
    the frequencies over fresh simulations (other seeds) within 4 Monte-Carlo standard errors of the
    difference, for constant and growing k on a cheap grid whose verdicts are mixed."""
    grid = _grid(slices=(1e9, 4e9, 1.6e10, 6.4e10), sizes=5)
    truth = d.Truth(law=d.DEFAULT_LAW, multiplier=1.3, pivot=8e9)
    noise = d.NoiseModel(run_sd=0.006)
    n = 30
    kw = dict(base="base", variant="variant", growth=0.1, n_sims=n, n_boot=50, target=1e12, workers=2)
    pred, fresh = d.assess(grid, truth, noise, seed=0, **kw), d.assess(grid, truth, noise, seed=1, **kw)
    for scen in ("constant", "growing"):
        for v in ("growing", "constant", "shrinking", "undetermined"):
            p, f = pred.scenarios[scen]["p_verdict"][v], fresh.scenarios[scen]["p_verdict"][v]
            se = max(math.sqrt((p * (1 - p) + f * (1 - f)) / n), 1 / n)
            assert abs(f - p) <= 4 * se, (scen, v, p, f)
    assert pred.power > pred.scenarios["constant"]["p_verdict"]["growing"] + 0.2  # the tables differ by truth


def test_an_undetermined_verdict_comes_with_its_achieved_power_in_the_report(tmp_path):
    """design.with_powers fills Analysis.powers for the undetermined pair; the report's answer says it."""
    from interpscale.analysis.report import answer_section
    from interpscale.scaling import AnalysisOptions, analyse
    from interpscale.scaling.multiplier import simulate_pair

    table = simulate_pair(1.3, 0.0, seed=3, sizes_per_slice=5, noise=0.02)
    table["family"] = table["family"].map({"base": "ar", "variant": "ar+concept"})
    analysis = analyse(table, AnalysisOptions(n_boot=50, trends=False, anneals=False))
    assert analysis.multipliers[("ar", "ar+concept")].verdict == "undetermined"
    assert "The sweep cannot tell growth from none" in "\n".join(answer_section(analysis))
    powered = d.with_powers(analysis, n_sims=3, n_boot=20, workers=1, extensions=[(9, 5)])
    power = powered.powers[("ar", "ar+concept")]
    assert 0 <= power.power <= 1 and power.n_sims == 3
    answer = "\n".join(answer_section(powered))
    assert f"Achieved power: {power.sentence()}." in answer and "--power-sims N" not in answer
    assert analysis.powers == {}  # the analysis given is not changed


def test_search_does_not_simulate_a_grid_nested_in_one_that_fell_short():
    """A grid with no more slices, within the range, and no more sizes than the planned one that fell
    short cannot do better: the search skips it and simulates the wider one."""
    planned = d.grid_from_plan(TINY, slices=[2e8, 4e8, 8e8], sizes_per_slice=3, label="planned")
    inside = d.grid_from_plan(TINY, slices=[2e8, 4e8], sizes_per_slice=3, label="inside")
    wider = d.grid_from_plan(TINY, slices=[2e8, 4e8, 8e8, 1.6e9], sizes_per_slice=3, label="wider")
    assert d.nested(inside, planned) and d.nested(planned, planned) and not d.nested(wider, planned)
    assert not d.nested(planned, inside)
    truth = d.truth_for_grid(planned, "ar")
    design = d.search(TINY, truth, d.NoiseModel(run_sd=0.05), question="multiplier", base="ar", variant="ar+concept",
                      power=0.99, n_sims=2, screen_sims=2, n_boot=10, workers=1, grids=[inside, wider],
                      planned=planned)
    assert design.planned.power < 0.99  # fell short, so ...
    assert [gp.grid.label for gp in design.tried] == ["wider"]  # ... the grid inside it was not simulated


def test_a_band_collapsed_to_zero_or_not_computed_is_an_unbounded_width_not_an_error():
    """The design measures k's band by the report's one rule (``_markdown.band_decades``); a band
    collapsed to 0, unbounded or not computed (NaN) is an unbounded width, never a math domain error."""
    from interpscale._markdown import band_decades

    assert simulation._band_decades(0.5, 2.0) == pytest.approx(math.log10(4.0)) == band_decades(0.5, 2.0)
    assert simulation._band_decades(0.0, 0.0) == math.inf and simulation._band_decades(0.5, 0.0) == math.inf
    assert simulation._band_decades(0.0, 3.0) == math.inf and simulation._band_decades(0.5, math.inf) == math.inf
    assert simulation._band_decades(math.nan, 2.0) == math.inf and math.isnan(band_decades(math.nan, 2.0))


def test_a_grid_whose_every_simulated_analysis_fails_is_tallied_not_raised():
    """Two slices of two sizes: no slice parabola and too few points for Eq. 27, so every simulated
    IsoFLOP fit and multiplier fails; the grid is assessed as answering nothing (it had ended the design
    with a KeyError, or exit 2)."""
    grid = _grid(slices=(1e9, 4e9), sizes=2)
    truth, noise = d.Truth(law=d.DEFAULT_LAW, multiplier=1.3), d.NoiseModel(run_sd=0.003)
    gp = d.assess(grid, truth, noise, base="base", variant="variant", n_sims=2, n_boot=10, workers=1, warm=False)
    assert gp.scenarios["growing"]["p_verdict"]["failed"] == 1.0 and gp.power == 0.0
    assert math.isnan(gp.scenarios["constant"]["k_decades_mid"])
    assert "unbounded" in recommend._row(gp)["k band at middle (x)"]
    ex = d.assess(grid, truth, noise, question="exponent", base="base", n_sims=2, n_boot=10, workers=1)
    assert ex.alpha_P_halfwidth == math.inf and ex.scenarios["truth"]["p_identified"] == 0.0


# tiny-demo's data and model with three larger sizes and budgets 10x smaller: every run of a grid the
# design writes for it trains in 1-60 steps
SMALL = """
[plan]
families = ["ar", "ar+concept"]
sizes = ["L1d8", "L1d16", "L1d32"]
seq_len = 16
batch_tokens = 128
tolerance = 0.3

[plan.slices]
"ar" = [2e7, 4e7]
"ar+concept" = [2e7, 4e7]

[size_presets.L1d8]
base = "nano"
n_layers = 1
d_model = 8
n_heads = 2

[size_presets.L1d16]
base = "nano"
n_layers = 1
d_model = 16
n_heads = 2

[size_presets.L1d32]
base = "nano"
n_layers = 1
d_model = 32
n_heads = 2

[model]
vocab_size = 192
n_concepts = 4

[train]
lr = 1e-2
vocab_size = 192
eval_batches = 2
log_every = 5

[data]
kind = "synthetic"
n_concepts = 4
n_docs = 120
entities_per_concept = 4

[launch]
executor = "debug"
max_parallel = 1
runs_per_job = 12

[fit]
n_boot = 10
"""


def test_the_designs_recommended_preset_plans_and_trains_as_written(tmp_path, capsys):
    """Issue 44's acceptance: the preset `design` writes runs through `plan` and `sweep launch --preset`
    unchanged. A loose target: the planned grid (2 slices: no interval for alpha_P) falls short, and so
    do the candidates whose fits use fewer than 3 slices; the cheapest with an interval meets it and is
    written as recommended.toml."""
    import json

    from interpscale.cli import main

    preset, out = tmp_path / "small.toml", tmp_path / "design"
    preset.write_text(SMALL)
    assert main(["design", str(preset), "--question", "exponent", "--halfwidth", "10", "--noise", "0.003",
                 "--sims", "2", "--screen-sims", "2", "--n-boot", "10", "--workers", "1",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err  # not a terminal: plain progress lines, each stage to its end
    assert "design: planned grid, truth: 2/2 simulated sweeps" in err and "design: grid 1 (of " in err
    design = json.loads((out / "design.json").read_text())
    assert design["planned"]["alpha_P_halfwidth"] == math.inf  # every simulated fit failed: counted, not raised
    grid = design["recommended"]["grid"]
    assert len(grid["slices"]) >= 3 and grid["slices"] != design["planned"]["grid"]["slices"]
    assert all(t["grid"]["compute"] >= grid["compute"] or not t["alpha_P_halfwidth"] <= 10 for t in design["tried"])
    written = out / "recommended.toml"
    assert main(["plan", "--preset", str(written)]) == 0
    assert f"{grid['n_runs']} runs;" in capsys.readouterr().out
    assert main(["sweep", "launch", "--preset", str(written), "--out", str(tmp_path / "sweep")]) == 0
    results = pd.read_csv(tmp_path / "sweep" / "results.csv")
    assert results["run_id"].nunique() == grid["n_runs"]  # every planned run trained and evaluated
    for fam in ("ar", "ar+concept"):
        got = sorted(results.loc[results["family"] == fam, "slice_flops"].unique())
        assert got == pytest.approx(grid["slices"]), fam
    assert results["loss"].notna().all() and (results["step"] > 0).all()


def test_the_search_bisects_to_the_cheapest_grid_meeting_the_target(monkeypatch):
    """Among 40 candidates whose power grows with compute, the search screens at doubling steps of
    the cost order (1st, 2nd, 4th, 8th, 16th, 32nd), bisects between the last short grid and the
    first passing one, and recommends the cheapest that meets the target: 11 screens where a walk
    cheapest first takes 19. A failed confirmation moves the search upward, cheapest first."""
    cands = [d.Grid(slices=(1e9, 2e9 + 1e8 * i), sizes_per_slice=5, points=pd.DataFrame(), compute=1e12 * (i + 1),
                    label=f"g{i}") for i in range(40)]
    power = lambda g: min(1.0, g.compute / 2.2e13)  # noqa: E731 -- meets 0.8 from g17 (1.8e13) on
    calls = []

    def assess(g, truth, noise, *, n_sims, question, more_of=None, **kw):
        calls.append((g.label, n_sims, more_of is not None))
        p = 0.0 if (g.label == "g17" and n_sims > 10) else power(g)  # g17's confirmation falls short
        return simulation.GridPower(grid=g, question=question, n_sims=n_sims, scenarios={
            "growing": {"p_verdict": {"growing": p}}, "constant": {"p_verdict": {"growing": 0.0}}})

    monkeypatch.setattr(recommend, "assess", assess)
    planned = dataclasses.replace(cands[0], slices=(1e9, 1.5e9), label="planned", compute=5e11)
    design = recommend.search(TINY, None, None, question="multiplier", base="ar", variant="ar+concept",
                              n_sims=40, screen_sims=10, grids=cands, planned=planned)
    screened = [c[0] for c in calls if c[1] == 10]
    assert screened[:6] == ["g0", "g1", "g3", "g7", "g15", "g31"]  # doubling steps until a screen passes
    assert screened[6:] == ["g23", "g19", "g17", "g16", "g18"]  # bisection to g17; its confirmation fails
    assert [c[0] for c in calls if c[2]] == ["g17", "g18"]  # confirmations add to their screens
    assert design.recommended.grid.label == "g18" and design.candidates == 40
    assert len(design.tried) == len(screened) and design.tried[-1].n_sims == 40


def test_wide_candidate_grids_take_larger_shapes_and_their_preset_lists_them(tmp_path):
    """A grid whose slices outgrow the preset's size ladder is planned with larger generated shapes
    near each slice's optimum; the preset the design writes lists them, and ``plan`` makes the same grid."""
    preset = Path(__file__).parents[1] / "configs" / "demo.toml"
    wide = [g for g in d.candidate_grids(preset, n_slices=(5,), ranges=(512.0,), sizes=(5,))]
    assert len(wide) == 1 and (g := wide[0]).slices[-1] == pytest.approx(3.2e9 * 512, rel=1e-3)
    own = list(Preset.load(preset).plan.sizes)
    extra = [z for z in g.sizes if z not in own]
    assert extra and set(extra) <= set(recommend.LARGER_SHAPES) and list(g.sizes[:len(own)]) == own
    top = g.points[g.points["slice_flops"] == g.slices[-1]]
    assert top.groupby("family").size().min() >= 4  # the largest slice still has sizes about its optimum
    small = next(d.candidate_grids(preset, n_slices=(3,), ranges=(8.0,), sizes=(5,)))
    assert small.sizes == tuple(own)  # a grid the ladder covers adds nothing
    written = recommend.write_preset(preset, g, tmp_path / "recommended.toml")
    again = d.grid_from_plan(written)
    assert again.n_runs == g.n_runs and again.compute == pytest.approx(g.compute) and again.sizes == g.sizes


def test_beyond_the_presets_sizing_the_design_names_the_grid_that_would_decide():
    """When no grid the preset's tokens-per-parameter sizing makes meets the multiplier target, the
    design still names the cheapest larger grid at the planned spacing, with sizes about the planted
    optimum, whose power reaches it, priced for the preset's families with a wall-time estimate."""
    planned_grid = dataclasses.replace(_grid(slices=(1e9, 2e9, 4e9), sizes=5), wall_s=60.0, label="planned")
    truth = d.Truth(law=d.DEFAULT_LAW, multiplier=1.3)
    noise, kw = d.NoiseModel(run_sd=0.003), dict(base="base", variant="variant", growth=0.05, n_boot=20, seed=0)
    planned = d.assess(planned_grid, truth, noise, n_sims=2, workers=1, **kw)
    b = recommend._beyond(planned, truth, noise, power=0.8, n_sims=4, progress=None, workers=1, question="multiplier",
                          target=1e20, **kw)
    assert b is not None and len(b.slices) > len(planned_grid.slices)
    s = np.log(b.slices)
    assert b.slices[0] == pytest.approx(planned_grid.slices[0]) and np.allclose(np.diff(s), np.log(2.0))  # its spacing
    assert b.wall_s == pytest.approx(planned_grid.wall_s * b.compute / planned_grid.compute)
    design = recommend.Design(question="multiplier", noise=noise, truth=truth, planned=planned, candidates=0,
                              target=dict(power=0.8, false_alarm=0.1, halfwidth=0.05, growth=0.05), beyond=b)
    text = d.render(design)
    assert "**Beyond the preset's sizing**" in text and f"{b.compute:.3g} FLOPs" in text
    assert design.to_dict()["beyond"]["n_runs"] == b.n_runs


def test_an_exponent_from_two_slices_has_no_interval_not_a_zero_width_one():
    """Two slice optima fix a line exactly, so every bootstrap replicate gives the same alpha_P: the
    design counts that as no interval (unbounded), never as a half-width of ~0 that meets any target."""
    two = d.assess(_grid(slices=(1e9, 4e9), sizes=5), d.Truth(law=d.DEFAULT_LAW, multiplier=1.3),
                   d.NoiseModel(run_sd=0.01), question="exponent", base="base", n_sims=2, n_boot=20, workers=1)
    assert two.alpha_P_halfwidth == math.inf and not d.meets(two, halfwidth=10.0)
    three = d.assess(_grid(slices=(1e9, 4e9, 1.6e10), sizes=5), d.Truth(law=d.DEFAULT_LAW, multiplier=1.3),
                     d.NoiseModel(run_sd=0.01), question="exponent", base="base", n_sims=2, n_boot=20, workers=1)
    assert 0 < three.alpha_P_halfwidth < math.inf


def test_candidate_grids_of_a_preset_with_a_hugging_face_family(tmp_path):
    """A preset sweeping ``hf:llama`` beside ``ar`` (docs/own-model.md) gets the same candidates, the
    wide ones planned with the larger shapes for both families, priced as ``plan`` prices them."""
    preset = tmp_path / "hf.toml"
    preset.write_text(TINY.read_text().replace('families = ["ar", "ar+concept"]', 'families = ["ar", "hf:llama"]')
                      .replace('"ar+concept" = [2e8, 4e8]', '"hf:llama" = [2e8, 4e8]'))
    grids = list(d.candidate_grids(preset, n_slices=(3, 5), ranges=(4.0, 256.0), sizes=(4,)))
    assert len(grids) == 4 and all(set(g.points["family"]) == {"ar", "hf:llama"} for g in grids)
    wide = max(grids, key=lambda g: g.compute)
    assert set(wide.sizes) - set(Preset.load(preset).plan.sizes)  # larger shapes taken
    assert plan(str(recommend.write_preset(preset, wide, tmp_path / "w.toml"))).runs  # and planned again
