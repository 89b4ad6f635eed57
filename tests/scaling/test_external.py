"""External run tables: column mapping, per-step logs with last-K averaging, step -> tokens,
and errors that name the file, the column and the line as counted in the file."""

import numpy as np
import pandas as pd
import pytest

from interpscale.errors import UserError
from interpscale.scaling import read_runs


@pytest.fixture()
def steps_csv(tmp_path):
    p = tmp_path / "log.csv"
    p.write_text("name,N,step,bs,tok,ce,acc\n"
                 "a,100,1,10,,4.0,0.1\n"
                 "a,100,2,10,,3.0,0.2\n"
                 "a,100,3,10,,2.0,0.3\n"
                 "b,200,1,10,15,5.0,0.4\n"
                 "b,200,2,10,25,4.0,0.5\n")
    return p


def test_last_k_average_and_step_to_tokens(steps_csv):
    t = read_runs(steps_csv, params="N", tokens="tok", loss="ce", metric="acc", run="name", step="step",
                  tokens_per_step="bs", last=2)
    f = t.frame.set_index("run")
    assert f.loc["a", "loss"] == pytest.approx(2.5) and f.loc["a", "tokens"] == 30  # step 3 x 10 tokens
    assert f.loc["b", "tokens"] == 25 and f.loc["b", "metric"] == pytest.approx(0.45)
    assert list(f["rows"]) == [2, 2]
    every = read_runs(steps_csv, params="N", tokens="tok", loss="ce", run="name", step="step", tokens_per_step=10.0,
                      last=None).frame
    assert len(every) == 5 and every.tokens.tolist() == [10, 20, 30, 15, 25]
    assert np.isnan(t.frame.unique_tokens).all()
    with pytest.raises(UserError, match="unique_tokens"):
        t.column("unique_tokens")


def test_weighted_columns_and_parquet(tmp_path):
    df = pd.DataFrame({"P": [1e8, 2e8], "D": [1e9, 2e9], "x": [1.0, 2.0], "y": [3.0, 4.0]})
    df.to_parquet(tmp_path / "t.parquet")
    t = read_runs(tmp_path / "t.parquet", params="P", tokens="D", loss={"x": 1.0, "y": 3.0})
    assert t.frame.loss.tolist() == pytest.approx([2.5, 3.5])


def test_one_file_per_run(tmp_path):
    for name, losses in (("r1", [3.0, 2.0]), ("r2", [4.0, 3.5])):
        pd.DataFrame({"N": [1e8, 1e8], "step": [1, 2], "loss": losses}).to_csv(tmp_path / f"{name}.csv", index=False)
    t = read_runs([tmp_path / "r1.csv", tmp_path / "r2.csv"], params="N", loss="loss", step="step",
                  tokens_per_step=1e6, last=1)
    assert t.frame.run.tolist() == ["r1", "r2"] and t.frame.loss.tolist() == [2.0, 3.5]


def test_errors_name_file_column_and_line(steps_csv, tmp_path):
    with pytest.raises(UserError, match=r"log\.csv: no column 'loss' \(--loss\); the columns are 'name'"):
        read_runs(steps_csv, params="N", tokens="tok", loss="loss", run="name", step="step", tokens_per_step="bs")
    bad = tmp_path / "bad.csv"
    bad.write_text("N,D,L\n100,1000,3.0\n100,2000,n/a\n")
    with pytest.raises(UserError, match=r"bad\.csv, line 3: column 'L' \(--loss\) has 'n/a', not a number"):
        read_runs(bad, params="N", tokens="D", loss="L")
    neg = tmp_path / "neg.csv"
    neg.write_text("N,D,L\n100,1000,3.0\n-5,2000,2.0\n")
    with pytest.raises(UserError, match=r"neg\.csv, line 3: params must be > 0"):
        read_runs(neg, params="N", tokens="D", loss="L")
    with pytest.raises(UserError, match=r"line 2: no tokens"):
        read_runs(steps_csv, params="N", tokens="tok", loss="ce", run="name", step="step")
    with pytest.raises(UserError, match="no such file"):
        read_runs(tmp_path / "missing.csv", params="N", tokens="D", loss="L")
    mixed = tmp_path / "mixed.csv"
    mixed.write_text("N,D,L,s\n100,1000,3.0,1\n200,2000,2.0,2\n")
    with pytest.raises(UserError, match="several params values"):
        read_runs(mixed, params="N", tokens="D", loss="L", step="s", last=2)
    assert len(read_runs(mixed, params="N", tokens="D", loss="L").frame) == 2  # no run, no step: a row per run


def test_rows_are_taken_in_step_order(tmp_path):
    p = tmp_path / "shuffled.csv"
    p.write_text("run,N,step,ce\nz,1,3,1.0\nz,1,1,3.0\na,2,2,5.0\nz,1,2,2.0\na,2,1,6.0\n")
    t = read_runs(p, params="N", loss="ce", run="run", step="step", tokens_per_step=100, last=2).frame
    assert t.run.tolist() == ["z", "a"]  # first appearance
    assert t.loss.tolist() == [1.5, 5.5] and t.tokens.tolist() == [300, 200]
