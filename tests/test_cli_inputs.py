"""Issue 43.5: input checked once, in CLI words. Every bad input below -- common options (level,
bootstrap replicates, target compute, counts), paths (missing, a directory, not a table, a file in
the way of --out) and usage errors, across every command -- ends in exactly one stderr line that
names the flag or file, exit 2, before any work (no --out written). docs/errors.md lists them.
Each warning of a run reaches the user once (cli._Once)."""

from __future__ import annotations

import re

import pytest

from interpscale.cli import COMMANDS, cli_words, main

EXAMPLE = "{d}/ex.csv"  # the bundled example table (analysis/example_data.py), copied


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    import numpy as np

    from interpscale.analysis.example_data import example_results

    d = tmp_path_factory.mktemp("inputs")
    df = example_results()
    df.to_csv(d / "ex.csv", index=False)
    inf = df.copy()
    inf.loc[inf.index[7], "loss"] = np.inf
    inf.to_csv(d / "inf.csv", index=False)
    (d / "notes.txt").write_text("not a table\n")
    (d / "a-file").write_text("in the way\n")
    (d / "ratings.csv").write_text("rater,concept,candidate_type,label,context,rating\n")
    (d / "a-dir").mkdir()
    return d


# (argv with {d} for the fixture directory, the text the one stderr line must hold); `o` is an
# --out path that must not be created. The messages are listed in docs/errors.md.
CASES = [
    (["plan", "--preset", "demo-quick", "--mfu", "0"], "--mfu: must be a share above 0 and at most 1"),
    (["plan", "--preset", "demo-quick", "--slices", "0"], "--slices: must be a positive number, got 0"),
    (["sweep", "launch", "--preset", "demo-quick", "--out", "{d}/o", "--max-added", "0"],
     "--max-added: must be a whole number >= 1, got 0"),
    (["train", "{d}/a-dir", "--spec", "{d}/missing.json"], "--spec: {d}/missing.json: no such file"),
    (["data", "prepare", "{d}/notes.txt", "--out", "{d}/o", "--val-fraction", "1"],
     "--val-fraction: must be a share from 0 up to (not including) 1, got 1"),
    (["data", "prepare", "{d}/notes.txt", "--out", "{d}/a-file/o"],
     "--out: {d}/a-file: a file is in the way where a directory is needed"),
    (["evaluate", "{d}/a-dir", "--eval-batches", "0"], "--eval-batches: must be a whole number >= 1, got 0"),
    (["fit", "families", EXAMPLE, "--out", "{d}/o", "--level", "1.5"],
     "--level: must be a level between 0 and 1 (e.g. 0.9 for 90%), got 1.5"),
    (["fit", "families", EXAMPLE, "--out", "{d}/o", "--n-boot", "-1"],
     "--n-boot: must be a whole number >= 0 (0: no bootstrap), got -1"),
    (["fit", "families", EXAMPLE, "--out", "{d}/o", "--n-boot", "ten"], "--n-boot: 'ten' is not a whole number"),
    (["fit", "families", "{d}/a-dir", "--out", "{d}/o"], "RESULTS: {d}/a-dir is a directory, not a table"),
    (["fit", "families", "{d}/notes.txt", "--out", "{d}/o"],
     "RESULTS: {d}/notes.txt is not a table (.parquet/.csv/.tsv)"),
    (["fit", "families", "{d}/missing.csv", "--out", "{d}/o"], "RESULTS: {d}/missing.csv: no such file"),
    (["fit", "families", EXAMPLE, "--out", "{d}/a-file"],
     "--out: {d}/a-file: a file is in the way where a directory is needed"),
    (["fit", "families", EXAMPLE, "--out", "{d}/o", "--target-compute", "0"],
     "--target-compute: must be a positive number, got 0"),
    (["fit", "families", EXAMPLE, "--out", "{d}/o", "--grid", "fine"], "--grid: invalid choice: 'fine'"),
    (["fit", "families", "{d}/inf.csv", "--out", "{d}/o", "--n-boot", "0"],
     "{d}/inf.csv: column 'loss', line 9: inf is not a measurement"),
    (["fit", "multiplier", EXAMPLE, "--base", "ar", "--variant", "ar+concept", "--out", "{d}/o", "--level", "1.5"],
     "--level: must be a level between 0 and 1"),
    (["fit", "multiplier", EXAMPLE, "--base", "ar", "--variant", "ar+concept", "--out", "{d}/o", "--n-boot", "-1"],
     "--n-boot: must be a whole number >= 0"),
    (["fit", "chinchilla", EXAMPLE, "--params", "params", "--tokens", "tokens", "--loss", "loss", "--level", "0"],
     "--level: must be a level between 0 and 1"),
    (["fit", "chinchilla", "{d}/inf.csv", "--params", "params", "--tokens", "tokens", "--loss", "loss"],
     "{d}/inf.csv: column 'loss', line 9: inf is not a measurement"),
    (["fit", "law", "chinchilla", "{d}/a-dir", "--params", "params", "--loss", "loss"],
     "FILE: {d}/a-dir is a directory, not a table"),
    (["fit", "curve", EXAMPLE, "--run", "run_id", "--step", "step", "--loss", "loss", "--lr", "lr",
      "--out", "{d}/o", "--level", "2"], "--level: must be a level between 0 and 1"),
    (["forecast", "record", EXAMPLE, "--target-compute", "0", "--registry", "{d}/o/f.jsonl"],
     "--target-compute: must be a positive number, got 0"),
    (["forecast", "record", EXAMPLE, "--target-compute", "1e22", "--level", "1.5", "--registry", "{d}/o/f.jsonl"],
     "--level: must be a level between 0 and 1"),
    (["forecast", "check", "abc", "--observed", "nan", "--registry", "{d}/o/f.jsonl"],
     "--observed: 'nan' is not a finite number"),
    (["judge", "alignment", "--input", "{d}/missing.jsonl", "--out", "{d}/o"],
     "--input: {d}/missing.jsonl: no such file"),
    (["judge", "relevance", "--input", "{d}/a-dir", "--out", "{d}/o"], "--input: {d}/a-dir is a directory, not a file"),
    (["human-study", "{d}/ratings.csv", "--out", "{d}/o", "--level", "1"], "--level: must be a level between 0 and 1"),
    (["human-study", "{d}/a-dir", "--out", "{d}/o"], "{d}/a-dir is a directory, not a file"),
    (["figures", "{d}/a-dir", "--out", "{d}/o"], "{d}/a-dir is a directory, not a table"),
    (["figures", EXAMPLE, "--out", "{d}/o", "--n-boot", "-2"], "--n-boot: must be a whole number >= 0"),
    (["report", EXAMPLE, "--out", "{d}/o", "--target-compute", "-1"], "--target-compute: must be a positive number"),
    (["report", "{d}/notes.txt", "--out", "{d}/o"], "{d}/notes.txt is not a table"),
    (["demo", "--quick", "--out", "{d}/o", "--n-boot", "0"], "--n-boot: must be a whole number >= 1, got 0"),
    (["demo", "--quick", "--out", "{d}/a-file"], "--out: {d}/a-file: a file is in the way"),
    (["export", EXAMPLE, "--out", "{d}/o"], "{d}/ex.csv is not a checkpoint"),
    (["export", "{d}/missing-checkpoint", "--out", "{d}/o"], "no such checkpoint"),
    (["concepts", "check", "{d}/missing-concepts", "--truth", "{d}/notes.txt"],
     "DIR: {d}/missing-concepts: no such directory"),
    (["concepts", "synthetic", "--out", "{d}/o", "--docs", "0"], "--docs: must be a whole number >= 1, got 0"),
    (["design", "demo-quick", "--out", "{d}/o", "--power", "1.5"], "--power: must be a level between 0 and 1"),
    (["fit", "families", EXAMPLE], "the following arguments are required: --out (--help lists the options)"),
    (["fit", "families", EXAMPLE, "--out", "{d}/o", "--bogus"], "unrecognized arguments: --bogus"),
]

# what only Python shows: a keyword argument (``annealed=``), a library function's name, numpy reprs
PYTHON = re.compile(r"\b[a-z][a-z_]*=|\bnp\.|\bfit_[a-z]|\bforecast_from|\bn_boot\b|\w+Error\b|Traceback|usage:")


def test_every_command_has_a_case():
    assert {argv[0] for argv, _ in CASES} == set(COMMANDS)


@pytest.mark.parametrize("argv,expect", CASES, ids=[" ".join(a[:2]) + f"#{i}" for i, (a, _) in enumerate(CASES)])
def test_bad_input_is_one_line_in_cli_words_exit_2(argv, expect, d, capsys):
    argv = [a.format(d=d) for a in argv]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert expect.format(d=d) in lines[0], err
    assert lines[0].startswith("interpscale "), err
    assert not PYTHON.search(lines[0].replace(str(d), "")), err
    assert not (d / "o").exists(), "nothing is written before the input is checked"


def test_cli_words_translate_what_python_shows():
    assert cli_words("ar: IsoFLOP fit skipped: fit_isoflop: only 0 usable slice(s)") == \
        "ar: IsoFLOP fit skipped: only 0 usable slice(s)"
    assert cli_words("ar: fit_bounded(concept_loss): best fit is flat") == "ar: concept_loss fit: best fit is flat"
    assert cli_words("fit_families: no family could be fitted: x = np.float64(0.0)") == \
        "no family could be fitted: x = 0.0"
    assert cli_words("known_concept_alignment: bound") == "known_concept_alignment: bound"
    assert cli_words("skipped Figure 34: x: Figure 34 (estimator_isoflop_figure): needs rows") == \
        "skipped Figure 34: x: Figure 34: needs rows"


def test_each_warning_once_per_run(d, tmp_path, caplog):
    """The fits and the forecast at the target each choose the table's rows again; the row choice
    ("annealed mixes ...") was logged at each (twice here, 35 times in `demo --quick`): now once, in flags."""
    import logging

    import pandas as pd

    df = pd.read_csv(d / "ex.csv")
    ar = df[df["family"] == "ar"]
    pre = ar.assign(annealed=False, loss=ar["loss"] + 0.05, run_id=ar["run_id"] + "-pre")
    pd.concat([ar, pre]).to_csv(tmp_path / "mixed.csv", index=False)
    with caplog.at_level(logging.WARNING):
        assert main(["fit", "families", str(tmp_path / "mixed.csv"), "--out", str(tmp_path / "fits"), "--n-boot", "0",
                     "--grid", "coarse", "--target-compute", "1e21"]) == 0
    msgs = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(msgs) == len(set(msgs)), msgs
    mixed = [m for m in msgs if "annealed mixes" in m]
    assert len(mixed) == 1 and "(--annealed / --no-annealed to choose)" in mixed[0], msgs
    assert not any(PYTHON.search(m) for m in msgs), msgs


def test_empty_measured_values_are_left_out_alike(d, tmp_path, capsys, caplog):
    """The one rule for non-finite values: an empty (NaN) loss is "not measured", left out of the
    fits by `fit families` and `fit chinchilla` alike, each naming file, column and lines; an
    infinite loss is refused (CASES above)."""
    import logging

    import numpy as np
    import pandas as pd

    df = pd.read_csv(d / "ex.csv")
    ar = df[(df["family"] == "ar")].reset_index(drop=True)
    ar.loc[[3, 10], "loss"] = np.nan
    ar.to_csv(tmp_path / "nan.csv", index=False)
    with caplog.at_level(logging.WARNING):
        assert main(["fit", "families", str(tmp_path / "nan.csv"), "--out", str(tmp_path / "f"), "--n-boot", "0",
                     "--grid", "coarse", "--allow-partial"]) == 0
    said = "nan.csv: 2 row(s) with an empty 'loss' (not measured) left out: line 5, line 12"
    assert any(said in r.getMessage() for r in caplog.records), caplog.text
    assert main(["fit", "chinchilla", str(tmp_path / "nan.csv"), "--params", "params", "--tokens", "tokens",
                 "--loss", "loss", "--n-boot", "0", "--grid", "coarse", "--out", str(tmp_path / "c")]) == 0
    assert said in capsys.readouterr().err
