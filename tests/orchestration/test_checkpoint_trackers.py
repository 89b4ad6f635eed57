"""Trackers (issue 35): a tracker that fails warns once and training goes on.  A run killed with
SIGKILL and resumed continues the same tracker runs, each holding every step once, and no key
reaches the run directory: test_trackers_resume.py."""

import pytest

pytest.importorskip("wandb")
pytest.importorskip("mlflow")

from interpscale.orchestration import Trainer  # noqa: E402
from interpscale.orchestration.config import ObserveConfig  # noqa: E402
from interpscale.orchestration.rundir import read_status  # noqa: E402


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
