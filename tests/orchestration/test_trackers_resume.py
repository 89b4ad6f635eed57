"""Trackers continue, not repeat (issue 43.2): a run killed with SIGKILL after logging steps
past its last saved state, then relaunched, continues the same tracker runs and leaves every
(segment, step) of metrics.jsonl exactly once in TensorBoard (its EventAccumulator), in the
MLflow store (MlflowClient) and in the offline W&B run, with the loss metrics.jsonl holds; no
key reaches the run directory (issue 35)."""

import glob
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("wandb")
pytest.importorskip("mlflow")

# the child trains with every tracker; with PAUSE > 0 it waits, its last state saved, once step
# PAUSE is logged (steps logged past the saved state, as a kill mid-run leaves them)
CHILD = """
import sys, time, torch
from pathlib import Path
torch.set_num_threads(1)
from interpscale.orchestration import RunSpec, Trainer
from interpscale.orchestration.checkpointer import Checkpointer
from interpscale.orchestration.config import ObserveConfig
spec, run, data, pause = RunSpec.load(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
after = Checkpointer.after_step
def held(self, seg, step, logged):
    after(self, seg, step, logged)
    if step == pause:
        self.wait()
        Path(run, "paused").write_text(str(step))
        time.sleep(300)
Checkpointer.after_step = held
Trainer(spec, run, data_root=data, progress=False, save_every_steps=10,
        observe=ObserveConfig(trackers=["tensorboard", "wandb", "mlflow"])).run()
"""
SECRET = "fake-key-0123456789abcdef0123456789abcdef"
PAUSE = 26  # states saved at steps 10 and 20; steps 22, 24, 26 logged past the last one


def wandb_history(run_dir: Path) -> list[dict]:
    """The history rows of every offline W&B run file of the run (``observe.wandb_history``)."""
    from interpscale.orchestration.observe import wandb_history as rows_of

    return [r for f in sorted(glob.glob(str(run_dir / "wandb" / "wandb" / "offline-run-*" / "run-*.wandb")))
            for r in rows_of(Path(f))]


def _child(tmp_path: Path, run: Path, pause: int) -> subprocess.Popen:
    env = os.environ | {"OMP_NUM_THREADS": "1", "WANDB_SILENT": "true", "WANDB_API_KEY": SECRET}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "spec.json"), str(run),
                             str(tmp_path / "_data"), str(pause)], env=env)


def test_after_a_kill_and_relaunch_each_tracker_has_every_step_once(tmp_path, make_spec):
    spec = make_spec("ar", steps=40, log_every=2)  # stable 0-32, anneal@32 32-40
    (tmp_path / "spec.json").write_text(spec.to_json())
    run = tmp_path / "run"
    proc = _child(tmp_path, run, PAUSE)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None and not (run / "paused").exists():
        time.sleep(0.05)
    assert proc.poll() is None, "the child ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    ids = json.loads((run / "trackers.json").read_text())
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "running" and status["step"] == PAUSE  # where training was, not 0
    assert _child(tmp_path, run, 0).wait(timeout=240) == 0
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "done" and status["resumed_at"] == [20]
    assert status["steps_done"] == status["steps_planned"] == 40

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    expected = {(r["segment"], r["step"]): r["loss"] for r in rows}
    assert len(expected) == len(rows) == 20  # metrics.jsonl itself: every logged step once

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = EventAccumulator(str(run / "tb"))
    tb.Reload()
    tb_steps = Counter((tag[:-len("/loss")], e.step) for tag in tb.Tags()["scalars"] if tag.endswith("/loss")
                       for e in tb.Scalars(tag))
    assert tb_steps == Counter(list(expected))  # the resumed-from step 20 kept, nothing twice
    tb_loss = {(tag[:-5], e.step): e.value for tag in tb.Tags()["scalars"] if tag.endswith("/loss")
               for e in tb.Scalars(tag)}
    assert tb_loss == pytest.approx(expected, rel=1e-6)  # float32 in the event files

    from mlflow.tracking import MlflowClient

    assert json.loads((run / "trackers.json").read_text()) == ids  # the same tracker runs continued
    client = MlflowClient(tracking_uri=f"sqlite:///{run / 'mlflow.db'}")
    (exp,) = [e for e in client.search_experiments() if e.name == "interpscale"]
    assert [r.info.run_id for r in client.search_runs([exp.experiment_id])] == [ids["mlflow"]]
    assert client.get_run(ids["mlflow"]).info.status == "FINISHED"
    history = [(seg, m.step, m.value) for seg in {s for s, _ in expected}
               for m in client.get_metric_history(ids["mlflow"], f"{seg.replace('@', '-')}/loss")]
    assert Counter((s, t) for s, t, _ in history) == Counter(list(expected))
    assert {(s, t): v for s, t, v in history} == expected

    logged = [(k[:-5], row["train_step"], v) for row in wandb_history(run) for k, v in row.items()
              if k.endswith("/loss")]
    assert Counter((s, t) for s, t, _ in logged) == Counter(list(expected))
    assert {(s, t): v for s, t, v in logged} == expected
    assert {Path(p).name.rsplit("-", 1)[1] for p in glob.glob(str(run / "wandb/wandb/offline-run-*"))} == {ids["wandb"]}
    for f in run.rglob("*"):
        assert not f.is_file() or SECRET.encode() not in f.read_bytes(), f
