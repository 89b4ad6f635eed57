"""Nothing stale, nothing doubled (issue 29.5): metrics rows after a SIGKILL and rerun,
evaluation rows of a checkpoint that changed, the checkpointer's save rules."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from interpscale.models.checkpoint import list_checkpoints, weights_file
from interpscale.orchestration import evaluate_run, train_run
from interpscale.orchestration.rundir import read_status

# trains with the resume state saved every 4 steps and SIGKILLs itself right after the
# metrics row of step 15 is written: the last resume state is step 12's
_CHILD = """
import os, signal, sys, torch
torch.set_num_threads(1)
from interpscale.orchestration import RunSpec, Trainer
from interpscale.orchestration import observe

write = observe.append_jsonl
def append_then_die(path, rec):
    write(path, rec)
    if rec["segment"] == "stable" and rec["step"] == 15:
        os.kill(os.getpid(), signal.SIGKILL)
observe.append_jsonl = append_then_die
Trainer(RunSpec.load(sys.argv[1]), sys.argv[2], data_root=sys.argv[3], progress=False, save_every_steps=4).run()
"""


def _rows(run_dir: Path) -> list[tuple[str, int]]:
    return [(r["segment"], r["step"]) for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())]


def test_sigkill_after_a_logged_step_then_rerun_logs_each_step_once(tmp_path, make_spec):
    spec = make_spec("ar", steps=30)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.to_json())
    data = tmp_path / "_data"
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    train_run(spec, ref, data_root=data, progress=False, tensorboard=False)
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(spec_file), str(killed), str(data)], timeout=300)
    assert proc.returncode == -9
    assert _rows(killed)[-1] == ("stable", 15) and read_status(killed)["state"] == "running"
    train_run(spec, killed, data_root=data, progress=False, tensorboard=False)
    # the resume states of steps 4, 8, 12 are written asynchronously: the last one complete before the kill
    assert read_status(killed)["resumed_at"] in ([8], [12])
    rows = _rows(killed)
    assert len(rows) == len(set(rows)), f"duplicate metrics rows: {rows}"
    assert rows == _rows(ref)  # the same rows in the same order as the run never killed


def test_evaluate_recomputes_a_checkpoint_that_changed(tmp_path, make_spec):
    spec = make_spec("ar", steps=10)
    d = tmp_path / spec.run_id
    train_run(spec, d, progress=False, tensorboard=False)
    first = evaluate_run(d).set_index("checkpoint")
    stable, annealed = (next(p for p in list_checkpoints(d / "checkpoints") if p.name.startswith(k))
                        for k in ("stable_", "anneal"))
    assert first.loc[stable.name, "loss"] != first.loc[annealed.name, "loss"]
    shutil.copyfile(weights_file(annealed), weights_file(stable))  # the stable checkpoint now holds other weights
    second = evaluate_run(d).set_index("checkpoint")
    assert len(second) == 2
    assert second.loc[stable.name, "loss"] == pytest.approx(first.loc[annealed.name, "loss"], rel=1e-6)
    assert second.loc[annealed.name, "checkpoint_sig"] == first.loc[annealed.name, "checkpoint_sig"]
    mtime = (d / "results.parquet").stat().st_mtime_ns
    evaluate_run(d)
    assert (d / "results.parquet").stat().st_mtime_ns == mtime  # unchanged checkpoints: nothing redone


def test_checkpointer_saves_at_the_reservoir_and_on_its_cadences(tmp_path, make_spec):
    import torch

    from interpscale.models import build_model
    from interpscale.models.checkpoint import list_checkpoints
    from interpscale.orchestration.checkpointer import Checkpointer, completed_states
    from interpscale.orchestration.spec import reservoir_steps, segments

    spec = make_spec("ar", steps=50, reservoir=2)
    stable, main_anneal = segments(spec)[:2]
    model = build_model("ar", "nano", vocab_size=64)
    ck = Checkpointer(tmp_path, spec, rank=0, world=1, device=torch.device("cpu"), build=lambda: model,
                      save_every_s=1e9, save_every_steps=7)
    ck.bind(model, model, torch.optim.AdamW(model.parameters()))
    saves = []
    for step in range(1, stable.end + 1):
        ck.after_step(stable, step, logged=step % 5 == 0)
        ck.wait()  # complete the asynchronous save (if any) to see it
        _, marker = ck.latest_state() or (None, {"kind": None, "step": 0})
        if marker["kind"] and (marker["kind"], marker["step"]) not in saves:
            saves.append((marker["kind"], marker["step"]))
    S = spec.stable_steps
    reservoir = (*reservoir_steps(spec), S)
    # the step cadence, never at the segment's end; a reservoir step's stable state is its resume state
    assert [s for k, s in saves if k == "resume"] == [s for s in range(7, S, 7) if s not in reservoir]
    assert [s for k, s in saves if k == "stable"] == sorted(reservoir)
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == [f"stable_step{r:07d}" for r in reservoir]
    kinds = [m["kind"] for _, m in completed_states(tmp_path / "state")]
    assert kinds.count("stable") == len(reservoir) and kinds.count("resume") <= ck.keep  # the last K kept
    ck.end_segment(stable, S)  # the stable state at S is already the segment's last state
    assert ck.latest_state(stable)[1]["step"] == S
    ck.save_every_s = 0.0  # overdue: the next step saves the resume state whatever its number
    ck.after_step(main_anneal, S + 1, logged=False)
    ck.wait()
    assert ck.latest_state(main_anneal)[1]["step"] == S + 1
    ck.end_segment(main_anneal, main_anneal.end)
    ck.wait()
    assert (tmp_path / "checkpoints" / f"anneal{S:07d}_step{main_anneal.end:07d}" / "model.safetensors").exists()
