"""Past runs as they come (issue 37 item 8): each defect's fix, checked by the message it prints.

(a) a repeated row is one measurement (merged, named by file line; issue 42), a distinct run with equal
values a repeated run; (b) `forecast record --target-params/--target-tokens`
derives C = k·P·D and refuses a contradicting --target-compute; (c) one column vocabulary for every
command that reads a table; (d) `fit law` counts runs, not checkpoints; (e) `--last 1` on logs that
all end at one step says why; (f) `fit chinchilla --out` does not also print the JSON.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from interpscale.cli import main

LAW = dict(E=1.8, A=400.0, B=2000.0, alpha=0.34, beta=0.37)


def _loss(P, D, rng, noise=0.005):
    return (LAW["E"] + LAW["A"] / P ** LAW["alpha"] + LAW["B"] / D ** LAW["beta"]) * np.exp(rng.normal(0, noise))


def _results(seed=0, slices=(1e18, 6e18, 3e19, 1e20), sizes=7) -> pd.DataFrame:
    """A results table (one family, IsoFLOP slices, C = 6·P·D exactly) from the law above."""
    rng = np.random.default_rng(seed)
    G = (LAW["alpha"] * LAW["A"] / (LAW["beta"] * LAW["B"])) ** (1 / (LAW["alpha"] + LAW["beta"]))
    rows = []
    for C in slices:
        for f in np.geomspace(1 / 8, 8, sizes):
            P = G * (C / 6) ** (LAW["beta"] / (LAW["alpha"] + LAW["beta"])) * f
            rows.append(dict(family="ar", slice_flops=C, flops=C, params=P, tokens=C / (6 * P), annealed=True,
                             loss=float(_loss(P, C / (6 * P), rng))))
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ (b) forecast record of a run

def _record(tmp_path, *extra):
    path = tmp_path / "r.csv"
    _results().to_csv(path, index=False)
    return main(["forecast", "record", str(path), "--method", "joint", "--n-boot", "20", "--grid", "coarse",
                 "--registry", str(tmp_path / "f.jsonl"), *extra])


def test_forecast_record_derives_the_compute_of_a_run_from_params_and_tokens(tmp_path, capsys):
    assert _record(tmp_path, "--target-params", "2e9", "--target-tokens", "4e10") == 0
    out = capsys.readouterr().out
    assert "target compute 4.8e+20 FLOPs = k·P·D, k = 6 FLOPs per token per parameter (the table's)" in out
    rec = json.loads((tmp_path / "f.jsonl").read_text())
    assert rec["target_compute"] == pytest.approx(6 * 2e9 * 4e10) and rec["params"] == 2e9


def test_forecast_record_refuses_a_compute_that_contradicts_the_run(tmp_path, capsys):
    assert _record(tmp_path, "--target-params", "2e9", "--target-tokens", "4e10", "--target-compute", "1e21") == 2
    err = capsys.readouterr().err
    assert ("the target compute 1e+21 contradicts the run's params 2e+09 x tokens 4e+10: the table prices a run "
            "at C = k·P·D with k = 6 FLOPs per token per parameter, i.e. 4.8e+20") in err
    assert not (tmp_path / "f.jsonl").exists()
    assert _record(tmp_path, "--target-params", "2e9", "--target-tokens", "4e10", "--target-compute", "4.81e20") == 0


def test_forecast_record_old_number_spellings_say_one_deprecation_line(tmp_path, capsys):
    assert _record(tmp_path, "--params", "2e9", "--tokens", "4e10") == 0
    err = capsys.readouterr().err
    assert err.count("deprecated") == 2  # one line per old flag
    assert ("interpscale forecast record: --params NUMBER (now --params names a column) is deprecated; write "
            "--target-params 2e9") in err
    assert _record(tmp_path, "--target-params", "2e9") == 2
    assert "give both --target-params and --target-tokens, or neither" in capsys.readouterr().err


# ------------------------------------------------------------------ (c) one column vocabulary

def _renamed(tmp_path):
    df = _results().rename(columns={"params": "N", "tokens": "D", "loss": "val_loss", "family": "model"})
    path = tmp_path / "theirs.csv"
    df.to_csv(path, index=False)
    return path


def test_every_command_that_reads_a_results_table_maps_columns_the_same_way(tmp_path, capsys):
    path = _renamed(tmp_path)
    cols = ["--params", "N", "--tokens", "D", "--loss", "val_loss", "--family", "model"]
    assert main(["fit", "families", str(path), "--out", str(tmp_path / "fits"), "--n-boot", "0", "--grid", "coarse",
                 *cols]) == 0
    assert "| ar |" in (tmp_path / "fits" / "tables.md").read_text()
    assert main(["forecast", "record", str(path), "--method", "joint", "--n-boot", "20", "--grid", "coarse",
                 "--target-compute", "1e21", "--registry", str(tmp_path / "f.jsonl"), *cols]) == 0
    assert main(["report", str(path), "--out", str(tmp_path / "rep"), "--n-boot", "0", "--no-figures", *cols]) == 0
    capsys.readouterr()
    assert main(["fit", "families", str(path), "--out", str(tmp_path / "x"), "--params", "n_params"]) == 2
    assert "theirs.csv: no column 'n_params' (--params); the columns are" in capsys.readouterr().err


def test_old_family_value_spelling_is_a_filter_with_one_deprecation_line(tmp_path, capsys):
    path = tmp_path / "r.csv"
    _results().to_csv(path, index=False)
    assert main(["fit", "families", str(path), "--out", str(tmp_path / "f"), "--n-boot", "0", "--grid", "coarse",
                 "--family", "ar"]) == 0
    assert ("interpscale fit families: --family ar (a family, not a column) is deprecated; write --only-family ar"
            in capsys.readouterr().err)
    assert main(["fit", "families", str(path), "--out", str(tmp_path / "g"), "--family", "cdlm"]) == 2
    assert "--family 'cdlm': neither a column of the table nor one of its families (ar)" in capsys.readouterr().err


# ------------------------------------------------------------------ (d), (e) fit law on checkpoints and logs

def _checkpoints(tmp_path, *, same_end=False, runs=22, every=10):
    """``runs`` runs of different sizes, ``every`` logged checkpoints each (tokens = step x 1e6)."""
    rng = np.random.default_rng(4)
    rows = []
    for r, P in enumerate(np.geomspace(2e7, 2e9, runs)):
        last = 20_000 if same_end else int(2_000 * (1 + r % 5))
        for step in np.linspace(last / every, last, every).astype(int):
            D = step * 1e6
            rows.append(dict(run_id=f"run{r:02d}", N=P, step=step, tokens=D, loss=float(_loss(P, D, rng))))
    path = tmp_path / ("same.csv" if same_end else "ckpt.csv")
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_fit_law_counts_runs_not_checkpoints(tmp_path, capsys, caplog):
    path = _checkpoints(tmp_path)
    base = ["fit", "law", "chinchilla", str(path), "--params", "N", "--tokens", "tokens", "--loss", "loss",
            "--n-boot", "0"]
    assert main(base + ["--run", "run_id"]) == 0
    assert "chinchilla fit of 22 runs (220 logged rows; the last logged row of each)" in capsys.readouterr().out
    assert main(base + ["--run", "run_id", "--last", "3"]) == 0
    out = capsys.readouterr().out
    assert "chinchilla fit of 22 runs (220 logged rows; the mean of each run's last 3 logged rows)" in out
    with caplog.at_level("WARNING"):
        assert main(base) == 0
    assert "chinchilla fit of 220 rows (each taken as one run: no --run or --step column mapped)" in \
        capsys.readouterr().out
    assert "each of the 220 rows is taken as one run, but column 'run_id' names 22 runs; map --run run_id" in caplog.text


def test_last_1_on_logs_that_all_end_at_one_step_says_why(tmp_path, capsys):
    path = _checkpoints(tmp_path, same_end=True, runs=8)
    rc = main(["fit", "law", "chinchilla", str(path), "--params", "N", "--tokens", "tokens", "--loss", "loss",
               "--run", "run_id", "--step", "step", "--last", "1", "--n-boot", "0"])
    assert rc == 2
    err = capsys.readouterr().err
    assert ("all 8 runs end at step 20000 with tokens 2e+10: --last 1 keeps each run's last row, which leaves one "
            "distinct tokens value, and the law needs at least two") in err
    assert "need at least two distinct values" not in err


# ------------------------------------------------------------------ (f) fit chinchilla --out

def test_fit_chinchilla_out_prints_the_summary_not_the_json(tmp_path, capsys):
    path = tmp_path / "r.csv"
    _results().to_csv(path, index=False)
    args = ["fit", "chinchilla", str(path), "--params", "params", "--tokens", "tokens", "--loss", "loss",
            "--n-boot", "0", "--grid", "coarse"]
    assert main(args + ["--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("joint fit (Eq. 27) of 28 rows of") and "{" not in out.out
    assert f"wrote {tmp_path / 'o' / 'chinchilla.json'}" in out.err
    assert main(args) == 0  # without --out the JSON is the output
    assert json.loads(capsys.readouterr().out)["n"] == 28


# ------------------------------------------------------------------ (a) repeated rows (issue 42's rule)

def _with_repeats(df: pd.DataFrame, rows=(1, 5, 9), **change) -> pd.DataFrame:
    """``df`` with copies of ``rows`` appended (with the columns ``change`` set): identical rows, or
    with a new run_id, distinct runs with identical (params, tokens, loss)."""
    return pd.concat([df, df.iloc[list(rows)].assign(**change)], ignore_index=True)


def test_repeated_rows_are_merged_and_distinct_runs_with_equal_values_kept(tmp_path, capsys):
    """A row repeating another's every column is one measurement: merged, named by file line, and the
    fit is the table's own; a distinct run (another run_id) with the same values counts as a run."""
    from interpscale.scaling import fit_chinchilla

    once = _results().assign(run_id=[f"r{i}" for i in range(28)])
    cols = ["--params", "params", "--tokens", "tokens", "--loss", "loss", "--n-boot", "0", "--grid", "coarse"]
    fits = {}
    for name, df in (("once", once), ("rep", _with_repeats(once)), ("seeds", _with_repeats(once, run_id="seed2"))):
        df.to_csv(path := tmp_path / f"{name}.csv", index=False)
        assert main(["fit", "chinchilla", str(path), *cols]) == 0
        out = capsys.readouterr()
        fits[name] = json.loads(out.out)
        if name == "rep":
            assert (f"interpscale fit chinchilla: {path}: 3 row(s) repeat another row's run and step, or every column "
                    "(line 30 repeats line 3, line 31 repeats line 7, line 32 repeats line 11): merged") in out.err
        if name == "seeds":
            assert "3 distinct row(s) repeat another row's (params, tokens, loss)" in out.err
            assert "kept as repeated runs" in out.err
    assert fits["rep"] == fits["once"] and fits["rep"]["n"] == 28
    w = np.ones(len(once))
    w[[1, 5, 9]] = 2  # a repeated run counts as often as it was run
    ref = fit_chinchilla(once["params"], once["tokens"], once["loss"], weights=w, n_boot=0, grid="coarse")
    for k in ("L_inf", "alpha", "beta"):
        assert fits["seeds"][k] == pytest.approx(getattr(ref, k), rel=1e-6)
    path = tmp_path / "rep.csv"
    assert main(["forecast", "record", str(path), "--method", "joint", "--n-boot", "20", "--grid", "coarse",
                 "--target-compute", "1e21", "--registry", str(tmp_path / "f.jsonl")]) == 0
    assert "3 row(s) repeat another row's run and step, or every column" in capsys.readouterr().err
    assert main(["fit", "families", str(path), "--out", str(tmp_path / "fits"), "--n-boot", "0", "--grid",
                 "coarse"]) == 0


def test_published_epoch_fit_from_a_table_with_repeated_rows(tmp_path, capsys, epoch_csv):
    """Epoch's table (its recipe reproduces the published fit, test_chinchilla) with 21 rows listed
    twice: each is one measurement, merged, and the fit is exactly Epoch's recipe on the table."""
    from interpscale.scaling import fit_chinchilla

    d = pd.read_csv(epoch_csv)
    low = d.nsmallest(63, "loss").index[::3]
    path = tmp_path / "epoch_repeats.csv"
    pd.concat([d, d.loc[low]], ignore_index=True).to_csv(path, index=False)
    assert main(["fit", "chinchilla", str(path), "--params", "Model Size", "--flops", "Training FLOP", "--loss",
                 "loss", "--drop-highest-loss", "5", "--n-boot", "0", "--grid", "coarse"]) == 0
    out = capsys.readouterr()
    assert "21 row(s) repeat another row's run and step, or every column" in out.err
    fit = json.loads(out.out)
    keep = d["loss"] < np.sort(d["loss"].to_numpy())[-5]
    N = d.loc[keep, "Model Size"].to_numpy()
    ref = fit_chinchilla(N, d.loc[keep, "Training FLOP"].to_numpy() / (6 * N), d.loc[keep, "loss"], n_boot=0,
                         grid="coarse")
    assert fit["n"] == 240
    for k in ("L_inf", "A_P", "A_D", "alpha", "beta"):
        assert fit[k] == pytest.approx(getattr(ref, k), rel=1e-4)


def test_fit_law_merges_repeated_rows_and_names_their_lines(tmp_path, capsys):
    df = _with_repeats(_results())
    path = tmp_path / "rep.csv"
    df.to_csv(path, index=False)
    assert main(["fit", "law", "chinchilla", str(path), "--params", "params", "--tokens", "tokens", "--loss",
                 "loss", "--n-boot", "0"]) == 0
    out = capsys.readouterr()
    assert "chinchilla fit of 28 rows" in out.out
    assert ("3 row(s) repeat another row's run and step, or every column (line 30 repeats line 3, line 31 repeats "
            "line 7, line 32 repeats line 11): merged") in out.err
