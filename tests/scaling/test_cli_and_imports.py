import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from interpscale.cli import main

def test_scaling_never_imports_torch():
    code = ("import sys, interpscale.scaling, interpscale._commands.fit, interpscale._commands.forecast; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_fit_chinchilla_cli_reproduces_epoch(capsys, epoch_csv):
    rc = main(["fit", "chinchilla", str(epoch_csv), "--params", "Model Size", "--flops", "Training FLOP",
               "--loss", "loss", "--drop-highest-loss", "5", "--n-boot", "50"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["n"] == 240 and d["objective"] <= 0.0010182741
    assert abs(d["alpha"] - 0.347313) < 1e-3 and abs(d["L_inf"] - 1.81724) < 1e-3
    assert d["ci"]["alpha"][0] < d["alpha"] < d["ci"]["alpha"][1]


def test_fit_chinchilla_cli_errors(capsys, tmp_path, epoch_csv):
    rc = main(["fit", "chinchilla", str(epoch_csv), "--params", "nope", "--flops", "Training FLOP", "--loss", "loss"])
    assert rc == 2 and "missing column(s) ['nope']" in capsys.readouterr().err
    bad = tmp_path / "t.xlsx"
    bad.write_text("x")
    assert main(["fit", str(bad), "--out", str(tmp_path)]) == 2


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_fit_results_cli_writes_outputs(tmp_path, synth, fmt):
    frames = []
    for fam, (aP, aL) in {"ar": (0.528, -0.06), "cdlm": (0.632, -0.053)}.items():
        df, _ = synth.isoflop_grid(aP, aL, seed=3, noise=0.002)
        frames.append(df.assign(family=fam, annealed=True, estimator="ar_ce" if fam == "ar" else "mdlm_elbo"))
    table = pd.concat(frames, ignore_index=True)
    path = tmp_path / f"results.{fmt}"
    table.to_csv(path, index=False) if fmt == "csv" else table.to_parquet(path)
    out = tmp_path / "fits"
    rc = main(["fit", str(path), "--family", "cdlm", "--out", str(out), "--n-boot", "50", "--grid", "coarse"])
    assert rc == 0
    d = json.loads((out / "fits.json").read_text())
    assert list(d["families"]) == ["cdlm"]
    assert np.isclose(d["table6"][0]["alpha_P"], 0.632, atol=0.03)
    assert "| cdlm |" in (out / "tables.md").read_text()


def test_scaling_never_imports_torch():
    """`scaling` is pure numpy/scipy (docs/architecture.md); which package modules it may
    import is checked for every layer by tests/test_architecture.py."""
    import ast
    from pathlib import Path

    import interpscale.scaling as pkg

    for f in Path(pkg.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n == "torch" or n.startswith("torch.") for n in names), f.name
            if isinstance(node, ast.ImportFrom) and node.level > 1:
                raise AssertionError(f"{f.name}: relative import out of the package")


def test_fit_chinchilla_out_writes_the_result(tmp_path, capsys, epoch_csv):
    args = ["fit", "chinchilla", str(epoch_csv), "--params", "Model Size", "--flops", "Training FLOP",
            "--loss", "loss", "--drop-highest-loss", "5", "--n-boot", "0", "--grid", "coarse"]
    assert main(args + ["--out", str(tmp_path / "d")]) == 0
    d = json.loads((tmp_path / "d" / "chinchilla.json").read_text())
    out = capsys.readouterr().out  # with --out, stdout gets the summary, not the JSON again (issue 37.8)
    assert d["n"] == 240 and "joint fit (Eq. 27) of 240 rows" in out and "{" not in out
    assert main(args + ["--out", str(tmp_path / "fit.json")]) == 0
    assert json.loads((tmp_path / "fit.json").read_text())["n"] == 240


def _two_families(synth, tmp_path):
    frames = []
    for fam, (aP, aL) in {"ar": (0.528, -0.06), "cdlm": (0.632, -0.053)}.items():
        df, _ = synth.isoflop_grid(aP, aL, seed=3, noise=0.002, slices=(3e18, 6e18, 1e19, 3e19, 1e20))
        frames.append(df.assign(family=fam, run_id=[f"{fam}-{i}" for i in range(len(df))],
                                bpb=df["loss"] / (4.2 * np.log(2))))
    return pd.concat(frames, ignore_index=True)


def test_fit_exits_nonzero_when_a_family_is_dropped(tmp_path, capsys, synth):
    table = _two_families(synth, tmp_path)
    table.loc[table.family == "cdlm", "loss"] = -1.0  # one family unusable: both loss fits fail
    path = tmp_path / "r.csv"
    table.to_csv(path, index=False)
    out = tmp_path / "fits"
    rc = main(["fit", str(path), "--out", str(out), "--n-boot", "0", "--grid", "coarse"])
    err = capsys.readouterr().err
    assert rc == 1 and "cdlm: isoflop fit not made" in err and "--allow-partial" in err
    assert (out / "fits.json").exists()  # nothing computed is lost
    assert "Fits that could not be made" in (out / "tables.md").read_text()
    assert json.loads((out / "fits.json").read_text())["dropped"]["cdlm"]
    assert main(["fit", str(path), "--out", str(out), "--n-boot", "0", "--grid", "coarse", "--allow-partial"]) == 0


def test_fit_metric_and_backtest(tmp_path, capsys, synth):
    table = _two_families(synth, tmp_path)
    path = tmp_path / "r.csv"
    table.to_csv(path, index=False)
    out = tmp_path / "fits"
    rc = main(["fit", str(path), "--out", str(out), "--n-boot", "30", "--grid", "coarse", "--metric", "bpb",
               "--family", "ar", "--backtest", "--backtest-boot", "20"])
    text = capsys.readouterr().out
    assert rc == 0
    d = json.loads((out / "fits.json").read_text())
    L_inf = d["table6"][0]["L_inf"]
    assert L_inf < table.loc[table.family == "ar", "bpb"].min()  # fitted on bits per byte
    assert np.isclose(d["table6"][0]["alpha_L"], -0.06, atol=0.01)  # a rescaled loss keeps its exponent
    bt = json.loads((out / "backtest.json").read_text())
    # every registered method is backtested (issue 34: isoflop-saturating was left out)
    assert {r["method"] for r in bt["errors"]} == {"isoflop-powerlaw", "joint", "isoflop-saturating"} and all(r["family"] == "ar" for r in bt["errors"])
    assert "MAPE" in text and "| ar | isoflop-powerlaw | L_star |" in (out / "backtest.md").read_text()
    assert main(["fit", str(path), "--out", str(out), "--metric", "nope"]) == 2
    assert "--metric 'nope' is not a column" in capsys.readouterr().err
