"""One-law commands on multi-family tables (issue 42 item 5): `fit chinchilla` and `fit law` never fit
one law across families (they refuse, naming --only-family) nor across stable and annealed rows
silently (annealed rows where a table has both, said; --no-annealed for the others), with the column
vocabulary of every other table command."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from interpscale.cli import main

LAWS = {"a": dict(E=1.8, A=400.0, B=2000.0, alpha=0.34, beta=0.37),
        "b": dict(E=2.3, A=300.0, B=900.0, alpha=0.30, beta=0.30)}


def two_families(seed=0, noise=0.003) -> pd.DataFrame:
    """Runs of two families of Eq. 27, each with a stable row and an annealed row 2% lower."""
    rng = np.random.default_rng(seed)
    rows = []
    for fam, L in LAWS.items():
        for i, (P, D) in enumerate((P, P * r) for P in np.geomspace(2e7, 1e9, 6) for r in (5.0, 20.0, 80.0)):
            loss = (L["E"] + L["A"] / P ** L["alpha"] + L["B"] / D ** L["beta"]) * np.exp(rng.normal(0, noise))
            for annealed, f in ((False, 1.0), (True, 0.98)):
                rows.append(dict(run_id=f"{fam}{i}", fam=fam, N=P, D=D, step=int(D / 1e6), annealed=annealed,
                                 val=loss * f))
    return pd.DataFrame(rows)


COLS = ["--params", "N", "--tokens", "D", "--loss", "val", "--family", "fam"]


def test_fit_chinchilla_refuses_several_families_and_fits_the_one_named(tmp_path, capsys):
    from interpscale.scaling import fit_chinchilla

    t = two_families()
    t.to_csv(path := tmp_path / "t.csv", index=False)
    fit = ["fit", "chinchilla", str(path), *COLS, "--n-boot", "0", "--grid", "coarse"]
    assert main(fit) == 2
    assert (f"{path}: 2 families in column 'fam' (a, b): one law across families is a law of neither; fit one "
            "with --only-family NAME") in capsys.readouterr().err
    assert main([*fit, "--only-family", "b"]) == 0
    out = capsys.readouterr()
    assert "annealed mixes [False, True]" in out.err  # the annealed rows, said
    b = t[(t.fam == "b") & t.annealed]
    ref = fit_chinchilla(b["N"], b["D"], b["val"], n_boot=0, grid="coarse")
    got = json.loads(out.out)
    assert got["n"] == 18 and got["alpha"] == pytest.approx(ref.alpha, rel=1e-6)
    assert main([*fit, "--only-family", "b", "--no-annealed"]) == 0
    assert json.loads(capsys.readouterr().out)["L_inf"] != got["L_inf"]  # the stable rows: another fit


def test_fit_law_refuses_several_families_and_reads_the_rows_of_the_one_named(tmp_path, capsys):
    t = two_families()
    t.to_csv(path := tmp_path / "t.csv", index=False)
    law = ["fit", "law", "chinchilla", str(path), *COLS, "--run", "run_id", "--step", "step", "--n-boot", "0"]
    assert main(law) == 2
    assert "2 families in column 'fam' (a, b)" in capsys.readouterr().err
    assert main([*law, "--only-family", "a", "--annealed"]) == 0
    out = capsys.readouterr().out
    assert "chinchilla fit of 18 runs (18 logged rows; the last logged row of each)" in out
    assert main([*law, "--only-family", "c"]) == 2
    assert f"interpscale fit law: {path}: family c not in the table; have ['a', 'b']" in capsys.readouterr().err
