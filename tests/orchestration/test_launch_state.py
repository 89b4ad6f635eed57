"""One account of a sweep's state (issue 43.1): the progress line, ``sweep status``, status.json
and the launch's last lines agree on runs done / running / failed / pending, each run's steps
trained of its planned steps and the ETA; one runtime estimate per plan, shown the same by
``plan`` and ``sweep launch`` and kept in SWEEP/sweep.json."""

import io
import json
import re

import pytest

from interpscale.orchestration import Sweep, Trainer
from interpscale.orchestration.outcome import progress_line
from interpscale.orchestration.rundir import write_status

PRESET = """[plan]
families = ["ar"]
sizes = ["nano"]
seq_len = 32
batch_tokens = 128
slices = [3e8]
[train]
log_every = 5
eval_batches = 1
[data]
kind = "synthetic"
n_concepts = 4
n_docs = 60
entities_per_concept = 4
[launch]
max_parallel = 1
"""


def _seconds(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"s": 1, "min": 60, "h": 3600}[unit]


def test_progress_status_and_status_json_read_one_account(tmp_path, make_spec):
    specs = [make_spec("ar", steps=20, seed=s) for s in range(3)]
    dirs = [tmp_path / s.run_id for s in specs]
    for s, d in zip(specs, dirs):
        d.mkdir()
        (d / "spec.json").write_text(s.to_json())
    # a run stopped part-way: status.json says where it stopped, not step 0
    tr = Trainer(specs[1], dirs[1], data_root=tmp_path / "_data", progress=False, tensorboard=False)
    tr.run(stop_at_step=10)
    del tr
    st = json.loads((dirs[1] / "status.json").read_text())
    assert (st["step"], st["segment"], st["steps_done"], st["steps_planned"]) == (10, "stable", 10, 20)
    from interpscale.orchestration.outcome import SweepState, planned_steps

    write_status(dirs[1], "interrupted", stopped_by="SIGTERM")  # as its job marks it
    write_status(dirs[0], "done", started=100.0, finished=120.0)  # measured 20 s where 10 s were estimated
    estimate = {"runs": {d.name: 10.0 for d in dirs}, "max_parallel": 1, "runs_per_job": 1, "job_start_s": 0.0}
    stream = io.StringIO()
    update, close = progress_line("sw", "done", dirs, lambda d: False, stream, estimate=estimate)
    close()
    # runs done 1 of 3 (not "runs running"); 30 of 60 steps; ETA: what is left (10 steps of run 1,
    # all of run 2) at the measured pace of the run done (2x the estimate), one job at a time
    assert stream.getvalue() == ("sweep sw: runs done 1/3 (running 0, failed 0, interrupted 1, pending 1, total 3; "
                                 "steps 30/60; ETA 30.0 s)\n")
    state = SweepState.read(dirs, estimate)
    assert [(r.state, r.steps_done, r.steps_planned) for r in state.runs] == [
        ("done", 20, 20), ("interrupted", 10, 20), ("pending", 0, 20)]
    assert state.summary() == "done 1, running 0, failed 0, interrupted 1, pending 1; steps 30/60; ETA 30.0 s"
    assert planned_steps(specs[0]) == 20


def test_one_runtime_estimate_for_plan_and_launch_kept_by_the_sweep(tmp_path, monkeypatch, capsys):
    from interpscale.cli import main
    from interpscale.orchestration import runtime

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "p.toml").write_text(PRESET)
    preset, out = str(tmp_path / "p.toml"), tmp_path / "sw"
    for cache in (runtime._TIMED, runtime._CPU, runtime._JOB_START):  # as a fresh process: nothing timed yet
        cache.clear()
    assert main(["plan", "--preset", preset]) == 0
    shown = re.search(r"estimated sweep wall time (\S+ \S+):", capsys.readouterr().out).group(1)
    for cache in (runtime._TIMED, runtime._CPU, runtime._JOB_START):  # as a second process starts
        cache.clear()
    assert main(["plan", "--preset", preset]) == 0
    text = capsys.readouterr().out
    assert f"estimated sweep wall time {shown}:" in text and f"runtime estimate {shown} for 1 runs" in text
    for cache in (runtime._TIMED, runtime._CPU, runtime._JOB_START):
        cache.clear()
    assert main(["sweep", "launch", "--preset", preset, "--out", str(out), "--executor", "debug"]) == 0
    cap = capsys.readouterr()
    assert f"sweep sw: runtime estimate {shown} for 1 runs" in cap.err
    assert re.search(r"sweep sw: runs done 1/1 \(running 0, failed 0, pending 0, total 1; steps (\d+)/\1; ETA 0.0 s\)",
                     cap.err), cap.err
    kept = json.loads((out / "sweep.json").read_text())["estimate"]
    assert runtime.fmt_seconds(kept["wall_s"]) == shown
    est, measured, ratio = re.search(r"runtime: estimated (\S+ \S+), measured (\S+ \S+) \(measured/estimated "
                                     r"([\d.]+)\)", cap.out).groups()
    assert est == shown  # the plan's estimate, and the ratio is the measured over it
    assert float(ratio) == pytest.approx(_seconds(measured) / kept["wall_s"], abs=0.01 + 0.06 / kept["wall_s"])
    assert main(["sweep", "status", str(out)]) == 0
    status = capsys.readouterr().out.splitlines()
    header, row = status[0].split(), status[1].split()
    assert row[header.index("state")] == "done" and row[header.index("step")] == row[header.index("planned_steps")]
    assert re.fullmatch(r"1 runs: done 1, running 0, failed 0, interrupted 0, pending 0; steps (\d+)/\1; ETA 0.0 s",
                        status[-1])
