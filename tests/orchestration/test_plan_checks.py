"""Issue 37.6: plan-time checks against the data and the machine, each with the message it
prints: epochs on the prepared corpus (warned above 4), a run that would train for more than
a year (a slice typo such as 8e99) refused without --force, ``--out`` checked for writability
before planning, and progress off a terminal as plain lines (no carriage-return redraws)."""

from __future__ import annotations

import io
import logging
import re

import pytest

from interpscale.cli import main
from interpscale.data.loaders import prepare_data, read_meta
from interpscale.models import flops_per_token
from interpscale.orchestration import PlanOptions, plan
from interpscale.orchestration.outcome import progress_line
from interpscale.orchestration.rundir import write_status

from .conftest import TINY_DATA

SIZE = dict(n_layers=1, d_model=16, n_heads=2)


def _preset(path, slices: str, data: str) -> None:
    path.write_text(f"""
[plan]
families = ["ar"]
sizes = ["L1d16"]
seq_len = 32
batch_tokens = 128
tolerance = 0.15
slices = [{slices}]
[model]
vocab_size = 128
[train]
vocab_size = 128
{data}
[size_presets.L1d16]
base = "nano"
n_layers = 1
d_model = 16
n_heads = 2
""")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A tiny prepared corpus and its training tokens."""
    path = prepare_data(TINY_DATA, tmp_path_factory.mktemp("data"), seq_len=32, vocab_size=128)
    return path, int(read_meta(path)["splits"]["train"]["tokens"])


def test_epochs_on_the_prepared_corpus_are_counted_and_warned_above_four(tmp_path, prepared, caplog, capsys):
    path, unique = prepared
    M = flops_per_token("ar", "nano", 32, vocab_size=128, **SIZE)
    preset = tmp_path / "p.toml"
    _preset(preset, f"{M * 2 * unique:.6g}, {M * 6 * unique:.6g}", f'[data]\nkind = "prepared"\npath = "{path}"')
    with caplog.at_level(logging.WARNING, logger="interpscale.orchestration.planner"):
        p = plan(preset, PlanOptions(flops_per_s=1e9))
    assert p.table["epochs"].round(1).tolist() == [2.0, 6.0]
    (warning,) = [r.getMessage() for r in caplog.records if "epochs" in r.getMessage()]
    assert warning.startswith(f"1 run(s) would repeat the prepared corpus ({unique:,} training tokens) more than 4 "
                              f"times (up to 6 epochs: {p.runs[1].run_id} 6"), warning
    assert main(["plan", "--preset", str(preset), "--flops-per-s", "1e9"]) == 0
    out = capsys.readouterr().out
    assert f"repeated data: {unique:.3g} unique tokens" in out and "2 of 2 points repeat data; at most 6" in out


def test_a_run_longer_than_a_year_is_refused_unless_forced(tmp_path, capsys, caplog):
    preset = tmp_path / "typo.toml"
    _preset(preset, "8e99", '[data]\nkind = "synthetic"\nn_concepts = 6\nn_docs = 120')
    assert main(["plan", "--preset", str(preset), "--flops-per-s", "1e9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"interpscale plan: {preset}: 1 run(s) would train for more than a year at the estimated "
                          f"speed, e.g. ar L1d16 at slice C=8e+99: "), err
    assert re.search(r": 2e\+93 steps, [0-9.]+e\+8\d d; check \[plan\] slices \(a typo such as 8e99\?\) or pass "
                     r"--force$", err), err
    with caplog.at_level(logging.WARNING):
        p = plan(preset, PlanOptions(flops_per_s=1e9, force=True))
    assert (p.table.status == "ok").all() and len(p.runs) == 1
    assert any("(--force given: planned anyway)" in r.getMessage() for r in caplog.records)


def test_out_is_checked_before_planning(tmp_path, capsys, monkeypatch):
    preset = tmp_path / "p.toml"
    _preset(preset, "2e8", '[data]\nkind = "synthetic"\nn_concepts = 6\nn_docs = 120')

    def no_planning(*a, **k):
        raise AssertionError("planned before checking --out")

    monkeypatch.setattr("interpscale._commands.sweep.plan", no_planning)
    assert main(["sweep", "launch", "--preset", str(preset), "--out", "/proc/x"]) == 2
    err = capsys.readouterr().err.strip()  # (the reason is the OS's: no such file as root, else permission)
    assert err.startswith("interpscale sweep launch: output directory /proc/x is not writable (cannot create a "
                          "file in /proc: ") and err.endswith("); pick another --out"), err
    (tmp_path / "f").write_text("")
    assert main(["sweep", "launch", "--preset", str(preset), "--out", str(tmp_path / "f" / "x")]) == 2
    assert "a file is in the way where a directory is needed" in capsys.readouterr().err


def test_progress_off_a_terminal_is_a_plain_line_per_change(tmp_path):
    dirs = [tmp_path / f"r{i}" for i in range(3)]
    for d in dirs:
        d.mkdir()
    stream = io.StringIO()  # not a terminal, as a SLURM log or `make demo > log 2>&1`
    update, close = progress_line("sw", "done", dirs, lambda d: False, stream)
    update(force=True)
    update(force=True)  # nothing changed: no line
    write_status(dirs[0], "running")
    update(force=True)
    write_status(dirs[0], "done")
    write_status(dirs[1], "failed")
    close()
    text = stream.getvalue()
    assert "\r" not in text
    assert text.splitlines() == ["sweep sw: runs done 0/3 (running 0, failed 0, pending 3, total 3)",
                                 "sweep sw: runs done 0/3 (running 1, failed 0, pending 2, total 3)",
                                 "sweep sw: runs done 1/3 (running 0, failed 1, pending 1, total 3)"]
