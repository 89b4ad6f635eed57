"""Trackers (issue 35): with ``[observe] trackers = ["wandb", "mlflow"]`` a training run writes an
offline W&B run and an MLflow run (SQLite store in the run directory) holding the loss values of
metrics.jsonl; a run killed with SIGKILL and resumed continues the same tracker runs; no key
reaches the run directory; a tracker that fails warns once and training goes on."""

import glob
import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("wandb")
pytest.importorskip("mlflow")

from interpscale.orchestration import Trainer  # noqa: E402
from interpscale.orchestration.config import ObserveConfig  # noqa: E402
from interpscale.orchestration.rundir import read_status  # noqa: E402

SECRET = "fake-key-0123456789abcdef0123456789abcdef"
CHILD = """
import sys, torch
torch.set_num_threads(1)
from interpscale.orchestration import RunSpec, Trainer
from interpscale.orchestration.config import ObserveConfig
Trainer(RunSpec.load(sys.argv[1]), sys.argv[2], data_root=sys.argv[3], progress=False, save_every_steps=5,
        observe=ObserveConfig(trackers=["wandb", "mlflow"])).run()
"""


def wandb_history(run_dir: Path) -> list[dict]:
    """The history rows of every offline W&B run file (its LevelDB-style log of protobuf records)."""
    from wandb.proto import wandb_internal_pb2

    rows = []
    for f in sorted(glob.glob(str(run_dir / "wandb" / "wandb" / "offline-run-*" / "run-*.wandb"))):
        data, pos, buf = Path(f).read_bytes(), 7, b""
        assert data[:4] == b":W&B"
        while pos + 7 <= len(data):
            left = 32768 - pos % 32768
            crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
            if left < 7 or (length == 0 and kind == 0):  # block padding
                pos += left
                continue
            buf, pos = buf + data[pos + 7:pos + 7 + length], pos + 7 + length
            if kind in (1, 4):  # a full record or a record's last fragment
                rec = wandb_internal_pb2.Record()
                rec.ParseFromString(buf)
                buf = b""
                if rec.WhichOneof("record_type") == "history":
                    rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
    return rows


@pytest.mark.slow  # a 300-step child killed mid-run, the W&B service started twice: ~40 s of CPU
def test_killed_run_resumes_into_the_same_tracker_runs_with_the_metrics_losses(tmp_path, make_spec):
    spec = make_spec("ar", steps=300)
    (tmp_path / "spec.json").write_text(spec.to_json())
    run, data = tmp_path / "run", tmp_path / "_data"
    env = os.environ | {"WANDB_API_KEY": SECRET, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "spec.json"), str(run), str(data)], env=env)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        rows = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").exists() else []
        if len(rows) >= 3 and (run / "trackers.json").exists():
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the child finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    ids = json.loads((run / "trackers.json").read_text())
    os.environ["WANDB_API_KEY"] = SECRET
    try:
        Trainer(spec, run, data_root=data, progress=False, save_every_steps=5,
                observe=ObserveConfig(trackers=["wandb", "mlflow"])).run()
    finally:
        del os.environ["WANDB_API_KEY"]
    assert read_status(run)["state"] == "done" and read_status(run)["resumed_at"]
    assert json.loads((run / "trackers.json").read_text()) == ids
    expected = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        expected[(r["segment"], r["step"])] = r["loss"]
    # W&B: every attempt appended to the one offline run (its id in each attempt's folder name)
    assert {Path(p).name.rsplit("-", 1)[1] for p in glob.glob(str(run / "wandb/wandb/offline-run-*"))} == {ids["wandb"]}
    logged = {}
    for row in wandb_history(run):  # the last value logged for each (segment, step): re-logged steps win
        for k, v in row.items():
            if k.endswith("/loss"):
                logged[(k[:-5], row["train_step"])] = v
    assert logged == expected
    # MLflow: one run, the same values
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run / 'mlflow.db'}")
    (exp,) = [e for e in client.search_experiments() if e.name == "interpscale"]
    assert [r.info.run_id for r in client.search_runs([exp.experiment_id])] == [ids["mlflow"]]
    got = {}
    for seg in {s for s, _ in expected}:
        for m in sorted(client.get_metric_history(ids["mlflow"], f"{seg.replace('@', '-')}/loss"),
                        key=lambda m: m.timestamp):
            got[(seg, m.step)] = m.value
    assert got == pytest.approx(expected, rel=1e-12)
    assert client.get_run(ids["mlflow"]).info.status == "FINISHED"
    for f in run.rglob("*"):
        assert not f.is_file() or SECRET.encode() not in f.read_bytes(), f


def test_a_failing_tracker_warns_once_and_training_goes_on(tmp_path, make_spec, caplog, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    spec = make_spec("ar", steps=10)
    Trainer(spec, tmp_path / "run", data_root=tmp_path / "_data", progress=False,
            observe=ObserveConfig(trackers=["mlflow"])).run()
    assert read_status(tmp_path / "run")["state"] == "done"
    warned = [r.getMessage() for r in caplog.records if "tracker mlflow disabled" in r.getMessage()]
    assert len(warned) == 1 and spec.run_id in warned[0]
