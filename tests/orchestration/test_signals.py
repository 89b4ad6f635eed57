"""Issue 29.5: Ctrl-C, SIGTERM and kill -9 to ``interpscale sweep launch`` (local executor, a
subprocess in its own session): the jobs save their state and stop, their runs end
``interrupted`` (never a stale ``running``), the launcher prints one line, no process is
left, and a relaunch resumes without duplicate metrics rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from interpscale.orchestration import Sweep
from interpscale.orchestration.checkpointer import completed_states
from interpscale.orchestration.rundir import read_status

STEPS = 700  # long enough to be mid-training when signalled, seconds of CPU per run
LONG = 6000  # runs only ever interrupted: they stop at the signal, so the length costs nothing


def _preset(tmp_path: Path, n_runs: int, steps: int = STEPS) -> Path:
    from interpscale.models import flops_per_token

    M = flops_per_token("ar", "nano", 32, vocab_size=128, n_concepts=6, n_layers=1, d_model=16, n_heads=2)
    slices = ", ".join(f"{M * (steps + 40 * i) * 128:.6g}" for i in range(n_runs))
    p = tmp_path / "signals.toml"
    p.write_text(f"""
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
lr = 3e-3
vocab_size = 128
eval_batches = 2
log_every = 25
[data]
kind = "synthetic"
n_concepts = 6
n_docs = 120
[launch]
executor = "local"
max_parallel = 2
save_every_s = 3600
[size_presets.L1d16]
base = "nano"
n_layers = 1
d_model = 16
n_heads = 2
""")
    return p


def _launch(preset: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    # Ctrl-C reaches a terminal's foreground job with SIGINT's default action; pytest run as a background
    # job of a script (`make test &`) has SIGINT ignored, and an ignored signal stays ignored across exec
    return subprocess.Popen([sys.executable, "-m", "interpscale.cli", "sweep", "launch", "--preset", str(preset),
                             "--out", str(out)], start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_training(out: Path, n_runs: int, proc: subprocess.Popen, timeout: float = 240) -> list[Path]:
    """The run directories, once each has logged a training step."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dirs = sorted((out / "runs").glob("*")) if (out / "runs").exists() else []
        logged = [d for d in dirs if (d / "metrics.jsonl").exists() and (d / "metrics.jsonl").stat().st_size]
        if len(dirs) == n_runs and len(logged) == n_runs:
            return dirs
        if proc.poll() is not None:
            pytest.fail(f"launcher ended early ({proc.returncode}): {proc.communicate()[1][-2000:]}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail("runs never started training")


def _session(sid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, psutil.Error, PermissionError):
            pass
    return out


def _no_process_left(sid: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while _session(sid) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _session(sid)
    for p in left:  # leave the machine clean whatever the outcome
        p.kill()
    assert not left, f"processes left behind: {[(p.pid, p.cmdline()) for p in left]}"


def _interrupted(dirs: list[Path]) -> None:
    for d in dirs:
        st = read_status(d)
        assert st["state"] == "interrupted", (d.name, st)
        assert completed_states(d / "state"), f"{d.name}: no resume state saved"


def _one_line(err: str) -> str:
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and not ln.startswith("sweep ")]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupting_the_launcher_stops_its_jobs_and_marks_runs_interrupted(tmp_path, how):
    out = tmp_path / "sw"
    proc = _launch(_preset(tmp_path, 2, LONG), out)
    dirs = _wait_training(out, 2, proc)
    if how == "ctrl-c":  # a terminal signals the whole foreground process group
        os.killpg(proc.pid, signal.SIGINT)
    else:  # a scheduler or `kill` signals the launcher only
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err[-3000:]
    line = _one_line(err)
    assert "interrupted; 2 run(s) stopped" in line, line
    _no_process_left(proc.pid)
    _interrupted(dirs)
    status = Sweep.from_dir(out).status()
    assert (status.state == "interrupted").all(), status


def test_killed_launcher_jobs_stop_and_a_relaunch_resumes_without_duplicate_rows(tmp_path):
    out = tmp_path / "sw"
    preset = _preset(tmp_path, 1)
    proc = _launch(preset, out)
    (d,) = _wait_training(out, 1, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    _no_process_left(proc.pid)  # the job noticed its launcher had gone and stopped
    _interrupted([d])
    assert set(Sweep.from_dir(out).status().state) == {"interrupted"}
    again = _launch(preset, out)
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-3000:]
    st = read_status(d)
    assert st["state"] == "done" and st.get("resumed_at"), st
    steps = [json.loads(ln)["step"] for ln in (d / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == len(set(steps)), "duplicate metrics rows after the resume"


def _job_tasks(launcher_pid: int) -> list[psutil.Process]:
    """The launcher's training processes (submitit tasks, one per local job)."""
    out = []
    for p in psutil.Process(launcher_pid).children(recursive=True):
        try:
            if "submitit.core._submit" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.mark.slow  # two sweeps launched, signalled and launched again
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_signalled_job_fails_the_launch_naming_its_runs_and_a_relaunch_finishes(tmp_path, sig):
    """Issue 37.4: SIGTERM or SIGKILL (the OOM killer's) to one job's process mid-sweep: the
    launch exits 1 with one summary line naming the run not done and the signal; the other
    job's run finishes; launching again finishes the sweep (exit 0, every run done)."""
    out, preset = tmp_path / "sw", _preset(tmp_path, 2)
    proc = _launch(preset, out)
    dirs = _wait_training(out, 2, proc)
    tasks = _job_tasks(proc.pid)
    assert len(tasks) == 2, tasks
    tasks[0].send_signal(sig)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]
    line = _one_line(err)
    left = [d.name for d in dirs if read_status(d)["state"] != "done"]
    assert len(left) == 1, [read_status(d) for d in dirs]
    assert line.startswith("interpscale sweep launch: sweep sw: 1 of 2 runs done, 0 failed, 1 interrupted, "
                           "0 pending; "), line
    if sig == signal.SIGKILL:
        assert f"killed by SIGKILL (out of memory?): runs {left[0]}; launch again to resume" in line, line
    else:
        assert f"interrupted by SIGTERM: {left[0]}; launch again to resume" in line, line
    assert "internal error" not in line
    _no_process_left(proc.pid)
    again = _launch(preset, out)
    so, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-3000:]
    assert "sweep sw: 2 of 2 runs done, 0 failed, 0 interrupted, 0 pending" in so
    assert all(read_status(d)["state"] == "done" for d in dirs)


PLUGIN = '''
import torch
from interpscale.models import build_model, register_family

def _build(where):
    def build(size, *, data, **overrides):
        on_meta = torch.get_default_device().type == "meta"  # the planner's pricing build
        if where == "build" and not on_meta:
            raise ValueError("the gate weights do not fit (raised in build)")
        if where == "price":
            raise ValueError("no such width (raised in build)")
        model = build_model("ar", size, data=data, **overrides)
        inner = model.loss
        def loss(batch, step):
            if where == "loss" and batch.tokens.device.type != "meta":  # not the pricing's meta pass
                raise RuntimeError("shape mismatch in the recurrence (raised in loss)")
            return inner(batch, step)
        model.loss = loss
        return model
    return build

register_family("boom-build", _build("build"), description="raises in build")
register_family("boom-loss", _build("loss"), description="raises in loss")
register_family("boom-price", _build("price"), description="raises in build, also when priced")
'''


def _boom_preset(tmp_path: Path, family: str) -> tuple[Path, dict]:
    (tmp_path / "boomplug.py").write_text(PLUGIN)
    text = _preset(tmp_path, 1).read_text()
    text = text.replace('families = ["ar"]', f'families = ["{family}"]\nplugins = ["boomplug"]')
    # priced by FLOPs (a GPU preset), so no training step of the plugin is timed while planning
    text = text.replace("save_every_s = 3600", "save_every_s = 3600\ngpus_per_node = 1")
    preset = tmp_path / "boom.toml"
    preset.write_text(text)
    return preset, {**os.environ, "OMP_NUM_THREADS": "1",
                    "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def test_an_error_in_a_familys_own_code_when_priced_names_family_and_size(tmp_path):
    preset, env = _boom_preset(tmp_path, "boom-price")
    proc = subprocess.run([sys.executable, "-m", "interpscale.cli", "plan", "--preset", str(preset)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert _one_line(proc.stderr).startswith(
        "interpscale plan: pricing boom-price size L1d16: family boom-price raised ValueError in its own code "
        "(boomplug.py:"), proc.stderr
    assert proc.stderr.rstrip().endswith("in build): no such width (raised in build)"), proc.stderr


@pytest.mark.parametrize("family,where", [("boom-build", "build"), ("boom-loss", "loss")])
def test_an_error_in_a_familys_own_code_names_family_and_run_not_internal_error(tmp_path, family, where):
    """Issue 37.4: a plugin family that raises in its builder or its loss: one line naming the
    family, the run and where in the plugin, exit 1, no "internal error"."""
    preset, env = _boom_preset(tmp_path, family)
    proc = subprocess.run([sys.executable, "-m", "interpscale.cli", "sweep", "launch", "--preset", str(preset),
                           "--out", str(tmp_path / "sw")], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = _one_line(proc.stderr)
    (d,) = (tmp_path / "sw" / "runs").iterdir()
    assert "internal error" not in line and "Traceback" not in proc.stderr
    assert line.startswith(f"interpscale sweep launch: sweep sw: 0 of 1 runs done, 1 failed, 0 interrupted, "
                           f"0 pending; run {d.name} failed: family {family} raised "), line
    assert f"in its own code (boomplug.py:" in line and f"(raised in {where}); launch again to retry" in line, line
