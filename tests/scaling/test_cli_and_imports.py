import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from interpscale.cli import main

def test_scaling_never_imports_torch():
    code = "import sys, interpscale.scaling, interpscale._commands.fit; print('torch' in sys.modules)"
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
