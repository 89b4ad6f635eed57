"""Every subcommand meets bad input with one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from interpscale.cli import COMMANDS, main


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "empty.csv").write_text("")
    (d / "header.csv").write_text("family,slice_flops,params,tokens,loss\n")
    (d / "yesno.csv").write_text("family,slice_flops,params,tokens,loss,annealed\n"
                                 "ar,1e10,1e5,1e6,abc,yes\nar,1e10,2e5,5e5,3.1,no\n")
    (d / "noparams.csv").write_text("family,slice_flops,loss\nar,1e10,3.0\n")
    (d / "garbage.parquet").write_bytes(b"not parquet")
    (d / "typo.toml").write_text('[dataa]\nkind = "synthetic"\n')
    (d / "lr.toml").write_text('[plan]\nfamilies = ["ar"]\nsizes = ["nano"]\nslices = [1e10]\n[train]\nlr = "fast"\n')
    (d / "broken.toml").write_text("[plan\n")
    (d / "run").mkdir()
    (d / "run" / "spec.json").write_text("{not json")
    (d / "empty.jsonl").write_text("")
    (d / "notjson.jsonl").write_text('{"text": "fine"}\n{"text": oops}\n')
    (d / "registry.jsonl").write_text("")
    (d / "notes.pt").write_text("hello, not a checkpoint\n")
    return d


# (subcommand argv with {d} for the fixture directory, text the error must contain)
CASES = [
    (["plan", "--preset", "{d}/typo.toml"], "did you mean 'data'"),
    (["plan", "--preset", "{d}/lr.toml"], "lr = 'fast'"),
    (["plan", "--preset", "{d}/broken.toml"], "not valid TOML"),
    (["plan", "--preset", "no-such-preset"], "unknown preset"),
    (["sweep", "launch", "--out", "{d}/sw", "--preset", "{d}/typo.toml"], "dataa"),
    (["sweep", "status", "--out", "{d}/missing-sweep"], ""),
    (["train", "{d}/run"], "spec"),
    (["train", "{d}/missing-run"], ""),
    (["evaluate", "{d}/missing-run"], ""),
    (["fit", "{d}/missing.csv", "--out", "{d}/fit"], "missing.csv"),
    (["fit", "{d}/empty.csv", "--out", "{d}/fit"], ""),  # naming the file: the shared results reader
    (["fit", "{d}/header.csv", "--out", "{d}/fit"], ""),
    (["fit", "{d}/garbage.parquet", "--out", "{d}/fit"], "garbage.parquet"),
    (["fit", "chinchilla", "{d}/noparams.csv", "--params", "P", "--tokens", "D", "--loss", "L"], ""),
    (["judge", "alignment", "--input", "{d}/missing.jsonl"], "missing.jsonl"),
    (["human-study", "{d}/missing.csv", "--out", "{d}/hs"], "missing.csv"),
    (["human-study", "{d}/empty.csv", "--out", "{d}/hs"], ""),
    (["figures", "{d}/missing.csv", "--out", "{d}/figs"], "missing.csv"),
    (["figures", "{d}/noparams.csv", "--out", "{d}/figs"], "params"),
    (["report", "{d}/empty.csv", "--out", "{d}/rep"], "empty.csv"),
    (["report", "{d}/garbage.parquet", "--out", "{d}/rep"], "garbage.parquet"),
    (["demo", "--preset", "{d}/typo.toml", "--out", "{d}/demo"], "dataa"),
    (["data", "prepare", "{d}/empty.jsonl", "--out", "{d}/prep"], "empty.jsonl"),
    (["data", "prepare", "{d}/notjson.jsonl", "--out", "{d}/prep2"], "line 2"),
    (["data", "prepare", "{d}/no-such-*.jsonl", "--out", "{d}/prep3"], "no-such-"),
    (["data", "info", "{d}/missing-data"], "missing-data"),
    (["forecast", "record", "{d}/yesno.csv", "--target-compute", "1e22"], "line 2"),
    (["forecast", "record", "{d}/header.csv", "--target-compute", "-5"], "target"),
    (["forecast", "check", "nope", "--observed", "2.7", "--registry", "{d}/registry.jsonl"], "nope"),
    (["concepts", "check", "{d}/missing-concepts", "--truth", "{d}/empty.jsonl"], "missing-concepts"),
    (["export", "{d}/notes.pt", "--out", "{d}/exported"], "notes.pt cannot be read"),
    (["export", "{d}/no-such-checkpoint", "--out", "{d}/exported"], "no such checkpoint"),
    (["design", "no-such-preset", "--out", "{d}/design"], "unknown preset"),
]


def test_every_subcommand_has_a_bad_input_case():
    assert {argv[0] for argv, _ in CASES} == set(COMMANDS)


@pytest.mark.parametrize("argv,expect", CASES, ids=[" ".join(a[:2]) + f"#{i}" for i, (a, _) in enumerate(CASES)])
def test_bad_input_is_one_line_and_non_zero(argv, expect, bad, capsys):
    argv = [a.format(d=bad) for a in argv]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors exit 2
        code = exc.code
    err = capsys.readouterr().err
    assert code not in (0, None), f"{argv}: exit 0 on bad input; stderr: {err}"
    assert "Traceback" not in err, err
    assert err.strip(), f"{argv}: no message on stderr"
    assert expect in err, err
    assert "RuntimeWarning" not in err


def test_verbose_shows_the_traceback(bad, capsys):
    assert main(["-v", "report", str(bad / "empty.csv"), "--out", str(bad / "rep")]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_console_entry_point_exits_2_without_traceback(bad):
    code = "import sys; from interpscale.cli import main; sys.exit(main())"
    r = subprocess.run([sys.executable, "-c", code, "report", str(bad / "missing.csv"), "--out", str(bad / "r")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "missing.csv" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_fit_warnings_are_printed_once(tmp_path):
    """A fit warning is logged by the fitter; its ScalingFitWarning is not printed again."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    rows = [{"family": "ar+concept", "slice_flops": C, "flops": C, "params": P, "tokens": C / (6 * P),
             "loss": 3 + 0.05 * np.log(P / 1e6) ** 2 - 0.1 * np.log10(C), "annealed": True,
             "concept_contribution": 0.5 + 0.01 * rng.standard_normal()}
            for C in (1e17, 1e18, 1e19) for P in np.geomspace(1e5, 1e7, 5)]
    pd.DataFrame(rows).to_csv(tmp_path / "r.csv", index=False)
    code = "import sys; from interpscale.cli import main; sys.exit(main())"
    r = subprocess.run([sys.executable, "-c", code, "report", str(tmp_path / "r.csv"), "--out", str(tmp_path / "rep"),
                        "--n-boot", "5", "--no-figures"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    import re

    msgs = [re.sub(r"^.*? (WARNING|INFO) \S+: ", "", ln) for ln in r.stderr.splitlines() if "WARNING" in ln]
    assert msgs, "the fit warnings reach the user"
    assert len(msgs) == len(set(msgs)), r.stderr  # each once, not also as a py.warnings echo
    assert sum("best fit is flat" in m for m in msgs) == 1, r.stderr  # a ScalingFitWarning, logged once
    assert "RuntimeWarning" not in r.stderr and "Traceback" not in r.stderr


# Issue 29.6: each edge case ends in a named message (file, column, line as in the file) and the
# exit status of its kind: 2 bad input, 1 failed work.
def _results_csv(path, edit=None):
    from interpscale.analysis.example_data import example_results

    df = example_results()
    if edit is not None:
        edit(df)
    df.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    import numpy as np

    d = tmp_path_factory.mktemp("edge")
    _results_csv(d / "ok.csv")
    _results_csv(d / "nan.csv", lambda df: df.__setitem__("loss", np.nan))
    _results_csv(d / "zero.csv", lambda df: df.__setitem__("flops", df["flops"].where(df.index != 3, 0.0)))
    _results_csv(d / "neg.csv", lambda df: df.__setitem__("slice_flops", df["slice_flops"].where(df.index != 5, -1e18)))
    cdlm = None

    def inf_in_cdlm(df):
        nonlocal cdlm
        cdlm = int(df.index[(df["family"] == "cdlm") & df["annealed"].astype(bool)][4])
        df.loc[cdlm, "loss"] = np.inf

    _results_csv(d / "inf.csv", inf_in_cdlm)
    (d / "inf_line").write_text(str(cdlm + 2))  # CSV: data row i is file line i + 2
    (d / "header.csv").write_text("family,slice_flops,flops,params,tokens,loss,annealed\n")
    (d / "a-file").write_text("in the way\n")
    run = d / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "concepts.json").write_text("[]")
    (run / "tokenizer.json").write_text("{}")
    (run / "checkpoints" / "step_10.pt").write_bytes(b"PK\x03\x04 truncated")
    (d / "sweep").mkdir()
    (d / "sweep" / "sweep.json").write_text('{"runs": ["a", ')
    return d


EDGE_CASES = [  # (argv, exit status, texts the one stderr line must hold)
    (["fit", "families", "{d}/nan.csv", "--out", "{d}/o1", "--n-boot", "0"], 2,
     ["nan.csv", "column 'loss' holds no number", "line 2 to line"]),
    (["fit", "families", "{d}/zero.csv", "--out", "{d}/o2", "--n-boot", "0"], 2,
     ["zero.csv", "column 'flops', line 5: 0 is not positive"]),
    (["fit", "families", "{d}/neg.csv", "--out", "{d}/o3", "--n-boot", "0"], 2,
     ["neg.csv", "column 'slice_flops', line 7: -1e+18 is not positive"]),
    (["fit", "families", "{d}/inf.csv", "--out", "{d}/o4", "--n-boot", "0", "--family", "cdlm"], 2,
     ["column 'loss', line {inf_line}: inf is not a measurement"]),  # refused at read (docs/errors.md)
    (["report", "{d}/header.csv", "--out", "{d}/rep", "--no-figures"], 2, ["header.csv", "no rows"]),
    (["figures", "{d}/header.csv", "--out", "{d}/figs"], 2, ["header.csv", "no rows"]),
    (["forecast", "record", "{d}/header.csv", "--target-compute", "1e22", "--registry", "{d}/r.jsonl"], 2,
     ["header.csv", "no rows"]),
    (["judge", "alignment", "--checkpoint", "{d}/run/checkpoints/step_10.pt"], 2,
     ["{d}/run/checkpoints/step_10.pt cannot be read", "truncated"]),
    (["fit", "families", "{d}/ok.csv", "--out", "{d}/a-file", "--n-boot", "0", "--family", "ar"], 2,
     ["a-file: a file is in the way where a directory is needed"]),
    (["sweep", "status", "{d}/sweep"], 2, ["{d}/sweep/sweep.json is corrupt"]),
]


@pytest.mark.parametrize("argv,status,texts", EDGE_CASES, ids=[" ".join(a[:3]) for a, _, _ in EDGE_CASES])
def test_edge_cases_name_the_file_and_exit_with_their_kind(argv, status, texts, edge, capsys):
    fmt = {"d": edge, "inf_line": (edge / "inf_line").read_text()}
    code = main([a.format(**fmt) for a in argv])
    err = capsys.readouterr().err
    assert code == status, err
    assert "Traceback" not in err and "Errno" not in err and "internal error" not in err, err
    for text in texts:
        assert text.format(**fmt) in err, err


def test_forecast_from_an_unidentified_fit_needs_force(tmp_path, capsys):
    """The joint fit of a family with no irreducible loss does not identify L_inf: its forecast
    is refused with the reason, and recorded with --force, the flag in its note."""
    import json

    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    rows = [{"family": "ar", "slice_flops": C, "flops": C, "params": P, "tokens": C / (6 * P), "annealed": True,
             "loss": (400 / P**0.34 + 410 / (C / (6 * P))**0.28) * (1 + 0.002 * rng.standard_normal())}
            for C in (1e17, 1e18, 1e19) for P in np.sqrt(C / 6) * np.geomspace(0.1, 10, 7)]
    pd.DataFrame(rows).to_csv(tmp_path / "r.csv", index=False)
    argv = ["forecast", "record", str(tmp_path / "r.csv"), "--target-compute", "1e21", "--method", "joint",
            "--n-boot", "20", "--registry", str(tmp_path / "f.jsonl")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the joint fit of the family is flagged: not identified" in err and "--force" in err, err
    assert not (tmp_path / "f.jsonl").exists()
    assert main([*argv, "--force"]) == 0
    assert "recorded with --force: FLAGGED: not identified" in capsys.readouterr().err
    (rec,) = [json.loads(line) for line in (tmp_path / "f.jsonl").read_text().splitlines()]
    assert rec["note"].startswith("FLAGGED: not identified")


def test_a_numeric_bug_is_an_internal_error_not_bad_input(tmp_path, capsys):
    """Exit codes tell the truth: input interpscale refuses on purpose (a UserError, or a ValueError its
    own code raises) exits 2; a ValueError raised by a C function or another package (math.sqrt of a
    negative, numpy's broadcast) is a bug: INTERNAL_ERROR, one line saying so and where the traceback is."""
    import sys

    import numpy as np

    from interpscale import design
    from interpscale.cli import INTERNAL_ERROR, exit_code
    from interpscale.design import simulation
    from interpscale.results_table import read_results

    def raised(call):
        try:
            call()
        except ValueError as exc:
            return exc
        raise AssertionError("did not raise")

    assert INTERNAL_ERROR not in (0, 1, 2, 130)
    assert exit_code(raised(lambda: read_results(tmp_path / "r.txt"))) == 2  # a UserError
    assert exit_code(raised(lambda: design.NoiseModel(run_sd=-1.0))) == 2  # raised by interpscale, on purpose
    assert exit_code(raised(lambda: simulation._sd_interval(-1.0, 3, 0.9))) == INTERNAL_ERROR  # math domain error
    assert exit_code(raised(lambda: np.ones(2) + np.ones(3))) == INTERNAL_ERROR
    assert exit_code(ValueError("never raised")) == INTERNAL_ERROR  # no raise of interpscale's behind it
    # through the command: a plugin whose import hits a math domain error
    bug = tmp_path / "numeric_bug_plugin.py"
    bug.write_text("import math\n\nmath.log(0.0)\n")
    try:
        assert main(["plan", "--preset", "demo-quick", "--plugin", str(bug)]) == INTERNAL_ERROR
        err = capsys.readouterr().err
        assert err == ("interpscale plan: internal error (a bug, not bad input): ValueError: math domain error "
                       "(rerun with -v for the traceback)\n"), err
        sys.modules.pop(bug.stem, None)  # the half-imported plugin (load_plugins keeps it)
        assert main(["-v", "plan", "--preset", "demo-quick", "--plugin", str(bug)]) == INTERNAL_ERROR
        assert "Traceback" in capsys.readouterr().err
    finally:
        sys.modules.pop(bug.stem, None)  # the half-imported plugin


def test_bad_data_and_options_raise_user_error_by_type(tmp_path):
    """What the user gave is wrong -> ``UserError`` (exit 2 by its type, not by reading the traceback):
    a JSONL line that is not JSON, a forecast ledger line that is not a record, a results table
    without a needed column, an unknown option value, a human study's missing column."""
    import pandas as pd

    from interpscale._jsonl import iter_jsonl
    from interpscale.analysis.human_study.design import require_columns
    from interpscale.errors import UserError
    from interpscale.scaling import fit_isoflop
    from interpscale.scaling.ledger import ForecastLedger

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\n{not json\n')
    with pytest.raises(UserError, match="bad.jsonl: line 2 is not valid JSON"):
        list(iter_jsonl(bad))
    ledger = tmp_path / "forecasts.jsonl"
    ledger.write_text('{"surprise": 1}\n')
    with pytest.raises(UserError, match="forecasts.jsonl: line 1: not a forecast record"):
        ForecastLedger(ledger).load()
    table = pd.DataFrame({"params": [1e6, 2e6, 4e6], "tokens": [1e8, 1e8, 1e8]})
    with pytest.raises(UserError, match="missing column 'slice_flops'"):
        fit_isoflop(table)
    with pytest.raises(UserError, match="minimum must be 'parabola' or 'akima'"):
        fit_isoflop(table.assign(loss=3.0, slice_flops=1e15), minimum="cubic")
    with pytest.raises(UserError, match="ratings is missing column"):
        require_columns(pd.DataFrame({"rating": [1]}), ["rating", "rater"], "ratings")
    # a preset, an executor, a multiple-choice file, a trend of one point, a figure's missing column
    from interpscale.analysis.figures._style import require_columns as require_figure_columns
    from interpscale.executors import make_executor
    from interpscale.metrics.likelihood import load_mc_jsonl
    from interpscale.orchestration.config import load_preset
    from interpscale.scaling.trend import fit_trend

    with pytest.raises(UserError, match="unknown preset 'no-such-preset'"):
        load_preset("no-such-preset")
    with pytest.raises(UserError, match="unknown executor 'cloud'"):
        make_executor("cloud", tmp_path / "ex", max_parallel=1)
    mc = tmp_path / "mc.jsonl"
    mc.write_text('{"question": "?", "choices": ["a", "b"], "answer": "Z"}\n')
    with pytest.raises(UserError, match="mc.jsonl:1: answer 'Z' is not a valid choice"):
        load_mc_jsonl(mc)
    with pytest.raises(UserError, match="a trend needs at least"):
        fit_trend([1e18], [0.5])
    with pytest.raises(UserError, match="needs column 'loss'"):
        require_figure_columns(pd.DataFrame({"params": [1.0]}), ["loss"], "Figure 1")
