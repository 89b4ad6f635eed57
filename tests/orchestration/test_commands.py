"""The documented sweep / evaluate command forms (README) through the real dispatcher."""

import json

import pytest

from interpscale.cli import main
from interpscale.orchestration import Sweep, read_results
from interpscale.orchestration.rundir import find_run_dirs, read_status


def _tiny_preset(path, make_spec):
    spec = make_spec("ar", steps=6)
    path.write_text(f"""
[plan]
families = ["ar"]
sizes = ["nano"]
seq_len = {spec.seq_len}
batch_tokens = {spec.batch_tokens}
slices = [{spec.flops}]

[model]
vocab_size = 128
n_concepts = 6

[train]
vocab_size = 128
lr = 3e-3
log_every = 5
eval_batches = 2

[data]
kind = "synthetic"
n_concepts = 6
n_docs = 120
entities_per_concept = 6
""")
    return spec


def test_sweep_default_action_launches_then_status_collect_evaluate(tmp_path, make_spec, capsys):
    preset = tmp_path / "tiny.toml"
    _tiny_preset(preset, make_spec)
    out = tmp_path / "runs" / "x"
    # README: interpscale sweep --preset demo --out runs/x [--executor ...]  (launch is the default)
    assert main(["sweep", "--preset", str(preset), "--out", str(out), "--executor", "debug"]) == 0
    assert "done" in capsys.readouterr().out
    (run_dir,) = find_run_dirs(out)
    assert read_status(run_dir)["state"] == "done" and len(read_results(out / "results.parquet")) == 2
    # positional sweep directory
    assert main(["sweep", "status", str(out)]) == 0
    assert "done" in capsys.readouterr().out
    (out / "results.parquet").unlink()
    assert main(["sweep", "collect", str(out)]) == 0
    assert "2 rows" in capsys.readouterr().out and (out / "results.parquet").exists()
    # interpscale sweep evaluate SWEEP_DIR evaluates every run (here: new checkpoints only) and collects;
    # the old spelling `evaluate SWEEP_DIR` (deprecated one release) is gone: it names the command to use
    (run_dir / "results.parquet").unlink()
    assert main(["evaluate", str(out)]) == 2
    assert f"is a sweep directory; write `interpscale sweep evaluate {out}`" in capsys.readouterr().err
    assert main(["sweep", "evaluate", str(out)]) == 0
    assert "2 rows" in capsys.readouterr().out and len(read_results(run_dir / "results.parquet")) == 2
    # interpscale evaluate RUN_DIR
    assert main(["evaluate", str(run_dir), "--eval-batch-tokens", "32"]) == 0
    assert "ar_ce" in capsys.readouterr().out
    # bad input: one line naming the problem, exit 2
    assert main(["sweep", "status", str(tmp_path)]) == 2
    assert "not a sweep directory" in capsys.readouterr().err
    assert main(["sweep", "status"]) == 2
    assert "no sweep directory" in capsys.readouterr().err
    assert main(["evaluate", str(tmp_path / "nothing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_find_run_dirs_and_evaluation_through_the_executor(tmp_path, make_spec):
    runs = [make_spec("ar", steps=5), make_spec("cdlm", steps=5)]
    sw = Sweep(runs, tmp_path / "sw", executor="debug", evaluate=False, progress=False)
    sw.launch()
    dirs = find_run_dirs(tmp_path / "sw")
    assert sorted(dirs) == sorted(sw.run_dir(r) for r in runs)
    assert find_run_dirs(dirs[0]) == [dirs[0]]
    assert sorted(find_run_dirs(tmp_path / "sw" / "runs")) == sorted(dirs)
    assert not any((d / "results.parquet").exists() for d in dirs)
    jobs = sw.evaluate_runs()
    assert len(jobs) == 2 and all((d / "results.parquet").exists() for d in dirs)
    assert sw.evaluate_runs() == []  # nothing left to evaluate
    assert json.loads((tmp_path / "sw" / "sweep.json").read_text())
    with pytest.raises(ValueError, match="_data: no run directories"):
        find_run_dirs(tmp_path / "sw" / "_data")


def test_demo_exits_1_with_the_sweeps_summary_line_unless_every_run_is_done(monkeypatch, capsys):
    """Issue 37.4: `demo` ends with the sweep's one summary line; a sweep with runs not done
    (the pipeline still fits what finished) makes the command exit 1 with that line."""
    import interpscale.pipeline

    line = "sweep sweep: 47 of 48 runs done, 0 failed, 1 interrupted, 0 pending; interrupted by SIGTERM: ar-x; " \
           "launch again to resume"
    summary = {"problems": [], "sweep": line, "sweep_complete": False}
    monkeypatch.setattr(interpscale.pipeline, "run_demo", lambda *a, **k: dict(summary))
    assert main(["demo", "--quick", "--out", "unused"]) == 1
    assert capsys.readouterr().err.strip() == f"interpscale demo: {line}"
    summary.update(sweep="sweep sweep: 48 of 48 runs done, 0 failed, 0 interrupted, 0 pending", sweep_complete=True)
    assert main(["demo", "--quick", "--out", "unused"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("sweep sweep: 48 of 48 runs done, 0 failed, 0 interrupted, 0 pending")
