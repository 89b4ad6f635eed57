"""Launching through submitit: local pool with a concurrency limit, skip-finished, debug, distributed."""


import pytest
import torch

from interpscale.models import load_checkpoint
from interpscale.orchestration import Sweep, read_results, train_run
from interpscale.orchestration.config import LaunchConfig, TrainConfig
from interpscale.orchestration.outcome import SweepIncomplete
from interpscale.orchestration.rundir import read_status


def _intervals(sweep):
    out = []
    for r in sweep.runs:
        st = read_status(sweep.run_dir(r))
        out.append((st["started"], st["finished"]))
    return out


def test_local_sweep_limits_concurrency_and_never_repeats_finished_runs(tmp_path, make_spec):
    from interpscale.orchestration import Trainer

    runs = [make_spec("ar", steps=s) for s in (8, 10, 12)]
    victim = runs[1]
    sw = Sweep([runs[0], runs[2]], tmp_path / "sw", LaunchConfig(max_parallel=1))
    jobs = sw.launch()
    assert len(jobs) == 2
    iv = sorted(_intervals(sw))
    assert iv[0][1] <= iv[1][0], "max_parallel=1 but runs overlapped"
    stamps = {r.run_id: (sw.run_dir(r) / "results.parquet").stat().st_mtime_ns for r in sw.runs}
    # the victim was killed mid-training (state saved at step 4, nothing evaluated)
    Trainer(victim, sw.run_dir(victim), data_root=tmp_path / "sw" / "_data", progress=False).run(stop_at_step=4)
    full = Sweep(runs, tmp_path / "sw", LaunchConfig(max_parallel=2), extend=True)  # adds the victim
    assert len(full.launch()) == 1  # only the unfinished run is submitted again
    for r in sw.runs:
        assert (sw.run_dir(r) / "results.parquet").stat().st_mtime_ns == stamps[r.run_id]
        assert read_status(sw.run_dir(r)).get("attempts") == 1
    assert read_status(full.run_dir(victim))["resumed_at"] == [4]
    assert Sweep(runs, tmp_path / "sw").launch() == []  # everything finished: nothing submitted
    status = Sweep.from_dir(tmp_path / "sw").status()
    assert len(status) == 3 and (status.state == "done").all() and status.evaluated.all()
    df = full.collect()
    assert len(df) == 6 and (tmp_path / "sw" / "results.csv").exists()
    assert len(read_results(tmp_path / "sw" / "results.parquet")) == 6


def test_jobs_are_packed_by_steps_and_flops(tmp_path, make_spec):
    """A small model with many steps outweighs a larger model's few steps of more FLOPs
    (per-step cost dominates tiny models): packing balances the estimated seconds."""
    from interpscale.orchestration.launch import run_cost

    many_steps = make_spec("ar", steps=400)
    big_flops = make_spec("ar", steps=40, flops=many_steps.flops * 3)
    assert big_flops.flops > many_steps.flops and run_cost(many_steps) > run_cost(big_flops)
    runs = [many_steps] + [make_spec("ar", steps=n) for n in (150, 130, 120)]
    groups = Sweep(runs, tmp_path / "sw", LaunchConfig(runs_per_job=2))._groups(runs)
    alone = next(g for g in groups if str(Sweep(runs, tmp_path / "sw").run_dir(many_steps)) in g)
    assert len(alone) == 1 and sorted(len(g) for g in groups) == [1, 3]


def test_debug_executor_and_job_grouping(tmp_path, make_spec):
    runs = [make_spec("cdlm", steps=6), make_spec("cdlm", steps=7), make_spec("cdlm", steps=9)]
    sw = Sweep(runs, tmp_path / "sw", LaunchConfig(executor="debug", runs_per_job=2))
    assert sorted(len(g) for g in sw._groups(runs)) == [1, 2]
    sw.launch()
    assert all(read_status(sw.run_dir(r))["state"] == "done" for r in runs)
    assert len(sw.collect()) == 6


def test_sweep_bad_input(tmp_path, make_spec):
    with pytest.raises(ValueError, match="unknown executor 'kubernetes'"):
        Sweep([make_spec()], tmp_path, executor="kubernetes")
    with pytest.raises(ValueError, match="duplicate"):
        Sweep([make_spec(), make_spec()], tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PermissionError, match="not writable"):
        Sweep([make_spec()], blocker / "sweep")
    with pytest.raises(ValueError, match="not a sweep directory"):
        Sweep.from_dir(tmp_path)


def _params(run_dir, name):
    return load_checkpoint(run_dir / "checkpoints" / name)[0].state_dict()


def _max_diff(a, b):
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_ranks_by_two_micro_batches_match_one_rank_by_four(tmp_path, make_spec, parallel):
    """Table 24's global batch whatever the split: 2 gloo ranks x 2 micro-batches (DDP, or
    FSDP2 fully_shard) take the same steps as 1 rank x 4 micro-batches, within 1e-6."""
    spec = make_spec("ar", steps=3)  # stable 0..2, anneal 2->3
    single = tmp_path / "single"
    train_run(spec, single, data_root=tmp_path / "_data", progress=False, micro_batch_tokens=spec.seq_len)
    sw = Sweep([spec], tmp_path / "dist", LaunchConfig(tasks_per_node=2), evaluate=False,
               train=TrainConfig(micro_batch_tokens=spec.seq_len, parallel=parallel), progress=False)
    sw.launch()
    d = sw.run_dir(spec)
    st = read_status(d)
    assert st["state"] == "done" and st["world"] == 2 and st["micro_batches"] == 2
    for name in ("stable_step0000002", "anneal0000002_step0000003"):
        a, b = _params(single, name), _params(d, name)
        diff = _max_diff(a, b)
        assert diff < 1e-6, (name, diff)
        assert _max_diff(a, _params(single, "stable_step0000002")) > 1e-4 or name.startswith("stable")
    logs = list((tmp_path / "dist" / "submitit").rglob("*_1_log.out"))
    assert logs, "second task did not run"


def test_sweep_takes_a_submitit_executor_object_and_shows_progress(tmp_path, make_spec, capfd):
    """The caller's own executor is used as given; the launcher draws runs done / running /
    failed / total on stderr; a run whose job raised is marked failed, the other is kept."""
    import submitit

    good, bad = make_spec("ar", steps=7), make_spec("ar", steps=5)
    ex = submitit.LocalExecutor(folder=tmp_path / "own" / "%j")
    sw = Sweep([good, bad], tmp_path / "sw", LaunchConfig(max_parallel=2), executor=ex, evaluate=False)
    assert sw.executor_name == "LocalExecutor"
    # a configuration the data cannot train fails before any job is submitted
    wrong = make_spec("ar", steps=5, model_overrides={"n_concepts": 9})
    with pytest.raises(ValueError, match="n_concepts=9 but the data has"):
        Sweep([wrong], tmp_path / "sw0", executor=submitit.LocalExecutor(folder=tmp_path / "none" / "%j")).launch()
    assert not [p for p in (tmp_path / "none").iterdir() if p.name.isdigit()], "a job was submitted"
    # a run that fails inside its job: its resume state is corrupt (as after a disk error)
    from interpscale.orchestration.trainer import init_run_dir

    state = init_run_dir(bad, sw.run_dir(bad), tmp_path / "sw" / "_data") / "state"
    state.mkdir(exist_ok=True)
    (state / "resume.pt").write_bytes(b"not a checkpoint")
    capfd.readouterr()
    with pytest.raises(SweepIncomplete, match=r"sweep sw: 1 of 2 runs done, 1 failed, 0 interrupted, 0 pending; "
                                               r"run ar-nano\S+ failed: .*cannot resume from"):
        sw.launch()
    err = capfd.readouterr().err
    assert "runs done 1/2" in err and "failed 1, pending 0, total 2" in err
    assert len([p for p in (tmp_path / "own").iterdir() if p.name.isdigit()]) == 2, "executor folder unused"
    assert read_status(sw.run_dir(good))["state"] == "done"
    assert read_status(sw.run_dir(bad))["state"] == "failed"
    assert "cannot resume from" in read_status(sw.run_dir(bad))["error"]
    with pytest.raises(ValueError, match="does not split over 3 tasks"):
        Sweep([good], tmp_path / "sw4", LaunchConfig(tasks_per_node=3))
    with pytest.raises(ValueError, match="or a submitit.Executor"):
        Sweep([good], tmp_path / "sw5", executor=object())


def test_a_failing_run_does_not_stop_its_jobs_other_runs(tmp_path, make_spec, capfd):
    """Issue 26.6: three runs in one job, the middle one fails (corrupt resume state): it ends
    failed with its error, the job trains the other two, progress and status count it."""
    from interpscale.orchestration.trainer import init_run_dir

    runs = [make_spec("ar", steps=s) for s in (5, 6, 7)]
    bad = runs[1]
    sw = Sweep(runs, tmp_path / "sw", LaunchConfig(runs_per_job=3), evaluate=False)
    assert len(sw._groups(runs)) == 1
    state = init_run_dir(bad, sw.run_dir(bad), tmp_path / "sw" / "_data") / "state"
    state.mkdir(exist_ok=True)
    (state / "resume.pt").write_bytes(b"not a checkpoint")
    capfd.readouterr()
    with pytest.raises(SweepIncomplete, match=r"2 of 3 runs done, 1 failed.*; run ar-nano\S+ failed: "):
        sw.launch()
    assert "failed 1, pending 0, total 3" in capfd.readouterr().err
    states = {r.run_id: read_status(sw.run_dir(r))["state"] for r in runs}
    assert states == {runs[0].run_id: "done", bad.run_id: "failed", runs[2].run_id: "done"}
    status = Sweep.from_dir(tmp_path / "sw").status()
    assert sw.counts() == {"done": 2, "failed": 1}
    assert "cannot resume from" in status.set_index("run_id").loc[bad.run_id, "error"]


def _snapshot(root):
    """Every path under ``root`` with each file's size and mtime (the data cache's lock file,
    which any reader of the cache opens, aside)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else None
            for p in sorted(root.rglob("*")) if p.name != ".lock" or p.parent.parent.name != "_data"}


def test_a_sweep_directory_is_bound_to_its_runs_and_data(tmp_path, make_spec):
    """Issue 29.3: relaunching with other data refuses in one line and changes nothing; new
    runs need extend=True; a refused new directory is not left half-made; results carry the
    data fingerprint."""
    from interpscale.errors import UserError

    first = make_spec("ar", steps=5)
    sw = Sweep([first], tmp_path / "sw", executor="debug", evaluate=True)
    sw.launch()
    before = _snapshot(tmp_path / "sw")
    other_corpus = make_spec("ar", steps=5, data={**first.data, "n_docs": 150})
    with pytest.raises(UserError, match=r"sweep.json: this sweep trains on data .*another corpus or tokenizer"):
        Sweep([first, other_corpus], tmp_path / "sw", executor="debug", extend=True).launch()
    assert _snapshot(tmp_path / "sw") == before, "a refused launch changed the sweep directory"
    more = make_spec("ar", steps=6)
    with pytest.raises(UserError, match=r"1 run\(s\) this sweep does not list .*pass --extend"):
        Sweep([first, more], tmp_path / "sw", executor="debug").launch()
    assert _snapshot(tmp_path / "sw") == before
    Sweep([first, more], tmp_path / "sw", executor="debug", extend=True).launch()
    assert Sweep.from_dir(tmp_path / "sw").counts() == {"done": 2}
    df = Sweep.from_dir(tmp_path / "sw").collect()
    assert df["data_fingerprint"].nunique() == 1 and df["data_fingerprint"].notna().all()
    # a vocabulary / concept mismatch is caught before anything is written
    wrong = make_spec("ar+concept", steps=5, model_overrides={"n_concepts": 9})
    with pytest.raises(ValueError, match="n_concepts=9 but the data has"):
        Sweep([wrong], tmp_path / "new", executor="debug").launch()
    assert not (tmp_path / "new").exists(), "a refused launch left a half-made sweep directory"


def test_sweep_status_counts_states_and_shows_a_dead_run_as_interrupted(tmp_path, make_spec, capsys):
    """A run left ``running`` by a process that died (no trainer holds its lock) shows as
    interrupted; the CLI's last line counts each state."""
    import json

    from interpscale.cli import main
    from interpscale.orchestration.rundir import write_status

    runs = [make_spec("ar", steps=5), make_spec("ar", steps=6)]
    sw = Sweep(runs, tmp_path / "sw", executor="debug", evaluate=False)
    sw.launch()
    write_status(sw.run_dir(runs[1]), "running")  # as a kill -9 mid-training leaves it
    (sw.run_dir(runs[1]) / ".lock").touch()
    assert main(["sweep", "status", str(tmp_path / "sw")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "2 runs: done 1, running 0, failed 0, interrupted 1, pending 0; steps 11/11", out
    assert json.loads((sw.run_dir(runs[1]) / "status.json").read_text())["state"] == "running"  # only shown


def test_a_presets_launch_table_becomes_sbatch_options(tmp_path, make_spec, monkeypatch):
    """Sweep.from_plan maps [launch] (shared AutoExecutor parameters as they are, the rest as
    slurm_<key>) onto the sbatch script; nothing is submitted (an `srun` stand-in only lets
    submitit build its SLURM executor on this machine; tests/orchestration/test_slurm.py runs
    the real cluster)."""
    from types import SimpleNamespace

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    launch = {"executor": "slurm", "timeout_min": 4320, "gpus_per_node": 2, "partition": "gpu", "nodes": 2,
              "max_parallel": 3, "max_array_size": 2, "mem_gb": 8}
    sw = Sweep.from_plan(SimpleNamespace(runs=[make_spec("ar", steps=5)], launch=launch), tmp_path / "sw")
    assert (sw.executor, sw.tasks_per_node, sw.nodes, sw.max_parallel) == ("slurm", 2, 2, 3)
    launcher = sw._launcher()
    assert launcher.max_array_size == 2
    script = launcher.executor._executor._make_submission_file_text("true", "uid")
    for line in ("--time=4320", "--partition=gpu", "--nodes=2", "--ntasks-per-node=2", "--gpus-per-node=2",
                 "--mem=8GB", "--job-name=sweep-sw"):
        assert f"#SBATCH {line}" in script, line
    local = Sweep.from_plan(SimpleNamespace(runs=[make_spec("ar", steps=5)], launch={**launch, "executor": "local"}),
                            tmp_path / "sw2", nodes=1, runs_per_job=4)
    assert "gpus_per_node" not in local.slurm and local.runs_per_job == 4 and local.nodes == 1
