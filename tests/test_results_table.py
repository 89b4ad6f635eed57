"""The one results reader: formats, boolean parsing, errors that name file, column and row."""

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interpscale.results_table import RESULT_COLUMNS, read_results


def _table(n=4):
    return pd.DataFrame({"run_id": [f"r{i}" for i in range(n)], "family": "ar", "slice_flops": 1e19,
                         "flops": [1e19 * (1 + i / 10) for i in range(n)], "params": 1e6, "tokens": 1e9,
                         "annealed": [True, False] * (n // 2), "estimator": "ar_ce", "loss": 3.0, "loss_se": 0.0})


@pytest.mark.parametrize("name", ["r.parquet", "r.csv", "r.tsv"])
def test_formats_round_trip(tmp_path, name):
    df = _table()
    path = tmp_path / name
    if name.endswith(".parquet"):
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False, sep="\t" if name.endswith(".tsv") else ",")
    got = read_results(path)
    assert got["annealed"].dtype == bool and got["annealed"].tolist() == [True, False, True, False]
    assert got["flops"].tolist() == df["flops"].tolist()


def test_boolean_spellings(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("run_id,annealed,loss\na,yes,1\nb,No,2\nc,TRUE,3\nd,0,4\ne,1,5\nf,f,6\n")
    assert read_results(p)["annealed"].tolist() == [True, False, True, False, True, False]


def test_bad_boolean_names_file_column_and_line(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("run_id,annealed,loss\na,yes,1\nb,maybe,2\n")
    with pytest.raises(ValueError, match=r"r\.csv: column 'annealed', line 3: 'maybe' is not a boolean"):
        read_results(p)


def test_half_empty_boolean_column_is_an_error_all_empty_means_false(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("run_id,annealed,loss\na,true,1\nb,,2\n")
    with pytest.raises(ValueError, match=r"column 'annealed', line 3: empty"):
        read_results(p)
    p.write_text("run_id,annealed,loss\na,,1\nb,,2\n")
    assert read_results(p)["annealed"].tolist() == [False, False]


def test_bad_number_names_row(tmp_path):
    df = _table()
    df["loss"] = ["3.1", "3.0", "three", "2.9"]
    p = tmp_path / "r.parquet"
    df.to_parquet(p, index=False)
    with pytest.raises(ValueError, match=r"r\.parquet: column 'loss', row 3: 'three' is not a number"):
        read_results(p)
    q = tmp_path / "r.tsv"
    df.to_csv(q, sep="\t", index=False)
    with pytest.raises(ValueError, match=r"column 'loss', line 4: 'three'"):
        read_results(q)


def test_missing_unsupported_and_damaged_files(tmp_path):
    with pytest.raises(ValueError, match=r"nope\.csv does not exist"):
        read_results(tmp_path / "nope.csv")
    empty = read_results(tmp_path / "nope.parquet", missing_ok=True)
    assert len(empty) == 0 and tuple(empty.columns) == RESULT_COLUMNS
    (tmp_path / "r.txt").write_text("x")
    with pytest.raises(ValueError, match=r"r\.txt: unsupported format '\.txt'"):
        read_results(tmp_path / "r.txt")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ValueError, match=r"bad\.parquet is unreadable.*CSV twin"):
        read_results(tmp_path / "bad.parquet")


def test_dataframe_source_and_callers_share_the_reader(tmp_path):
    from interpscale._commands.fit import read_table
    from interpscale.analysis.report import load_results
    from interpscale.orchestration import read_results as orch_read

    assert orch_read is read_results
    p = tmp_path / "r.csv"
    p.write_text("run_id,annealed,loss\na,maybe,1\n")
    for reader in (load_results, read_table):
        with pytest.raises(ValueError, match="'maybe' is not a boolean"):
            reader(p)
    got = read_results(pd.DataFrame({"annealed": ["yes", "no"], "loss": [1, 2]}))
    assert got["annealed"].tolist() == [True, False]


def test_column_mapping_renames_the_users_columns_and_names_a_missing_one(tmp_path):
    from interpscale.results_table import repeated_rows

    p = tmp_path / "theirs.csv"
    p.write_text("N,D,val_loss,loss\n1e6,2e7,3.1,9\n2e6,4e7,2.9,9\n1e6,2e7,3.1,9\n")
    df = read_results(p, columns={"params": "N", "tokens": "D", "loss": "val_loss"})
    # the table's own 'loss' gives way to the mapped one; no slice column: each row's compute 6·P·D is its slice
    assert list(df.columns) == ["params", "tokens", "loss", "slice_flops"]
    assert df["loss"].tolist() == [3.1, 2.9, 3.1]
    assert repeated_rows(df, ("params", "tokens", "loss")) == [("line 2", "line 4")]  # as in the file
    with pytest.raises(ValueError, match=r"theirs\.csv: no column 'n_params' \(--params\); the columns are"):
        read_results(p, columns={"params": "n_params"})
    with pytest.raises(ValueError, match=r"no column 'runs' \(--run\)"):
        read_results(p, columns={"run_id": "runs"})


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3), st.sampled_from([2.5, 3.0])), min_size=1,
                max_size=25))
def test_repeated_rows_names_every_repeat_once_after_its_first_line(rows):
    from interpscale.results_table import repeated_rows, validate_results

    df = validate_results(pd.DataFrame(rows, columns=["params", "tokens", "loss"]), where="t.csv", row_offset=2,
                          unit="line")
    pairs = repeated_rows(df, ("params", "tokens", "loss"))
    assert len(pairs) == len(rows) - len(set(rows))
    for first, repeat in pairs:
        i, j = int(first.split()[1]) - 2, int(repeat.split()[1]) - 2
        assert i < j and rows[i] == rows[j] and rows.index(rows[j]) == i  # named against the first occurrence
