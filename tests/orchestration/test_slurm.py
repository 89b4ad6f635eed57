"""Integration against a real SLURM cluster (scripts/local-slurm.sh start): arrays, sacct, requeue."""

import subprocess
import time
from dataclasses import replace

import pytest
import torch

from interpscale.models import load_checkpoint
from interpscale.orchestration import Sweep, read_results, train_run
from interpscale.orchestration.checkpointer import completed_states
from interpscale.orchestration.config import LaunchConfig, TrainConfig
from interpscale.orchestration.rundir import read_status


pytestmark = pytest.mark.slurm  # skipped with the reason when no cluster answers (tests/conftest.py)
SLURM = LaunchConfig(executor="slurm", timeout_min=20, cpus_per_task=1, mem_gb=1)


def _sacct(job_id: str) -> list[str]:
    for _ in range(30):  # accounting lags the controller by a moment
        out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "JobID,State"],
                             capture_output=True, text=True).stdout.split()
        if out and all("COMPLETED" in line for line in out):
            return out
        time.sleep(1)
    return out


def test_sweep_as_array_job(tmp_path, make_spec):
    runs = [make_spec("ar", steps=s) for s in (6, 8, 10)]
    # MaxArraySize 2 (as if the cluster said so): three jobs go out as two arrays
    sw = Sweep(runs, tmp_path / "sw", replace(SLURM, max_array_size=2, max_parallel=3))
    jobs = sw.launch()
    arrays = sorted({j.job_id.split("_")[0] for j in jobs})
    assert len(jobs) == 3 and len(arrays) == 2
    df = sw.collect()
    assert len(df) == 6 and df.loss.notna().all()
    rows = _sacct(arrays[0]) + _sacct(arrays[1])
    assert len(rows) == 3 and all(r.endswith("|COMPLETED") for r in rows), rows
    assert Sweep(runs, tmp_path / "sw", SLURM).launch() == []


def test_preempted_job_requeues_and_resumes_bit_exactly(tmp_path, make_spec):
    spec = make_spec("ar", steps=1500)
    ref = tmp_path / "ref"
    train_run(spec, ref, data_root=tmp_path / "sw" / "_data", progress=False)
    sw = Sweep([spec], tmp_path / "sw", SLURM, train=TrainConfig(save_every_s=0.5))
    (job,) = sw.launch(wait=False)
    d = sw.run_dir(spec)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        st = read_status(d)
        if completed_states(d / "state") and st.get("state") == "running" and not st.get("segments_done"):
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"job {job.job_id} never started training: {read_status(d)}")
    # Preemption as submitit's Job._interrupt() does it: SIGTERM (which submitit's handler only logs),
    # then USR2 (checkpoint and `scontrol requeue`). The job's step is frozen (SIGSTOP) first, so the
    # signals land mid-training however fast the machine (a fast one finished all 1,500 steps in the
    # pauses once); both wait while it is stopped and arrive on SIGCONT -- before the USR2 handler
    # starts scontrol, so the SIGTERM cannot kill it (seen when sent back to back on a running job).
    subprocess.run(["scancel", job.job_id, "--signal", "STOP"], check=True)
    time.sleep(0.5)
    st = read_status(d)
    assert st.get("state") == "running" and not st.get("segments_done"), f"frozen too late: {st}"
    for sig in ("SIGTERM", "USR2", "CONT"):
        subprocess.run(["scancel", job.job_id, "--signal", sig], check=True)
        time.sleep(0.2)
    for _ in range(120):  # SLURM holds a requeued job ~2 min (BeginTime); release it now
        state = subprocess.run(["squeue", "-h", "-j", job.job_id, "-o", "%T"], capture_output=True,
                               text=True).stdout.strip()
        if state == "PENDING":
            subprocess.run(["scontrol", "update", f"JobId={job.job_id}", "StartTime=now"], capture_output=True)
            break
        time.sleep(0.5)
    job.results()  # waits through the requeue
    st = read_status(d)
    assert st["state"] == "done" and st["attempts"] >= 2 and st.get("resumed_at"), st
    a = load_checkpoint(ref / "checkpoints" / "anneal0001200_step0001500")[0].state_dict()
    b = load_checkpoint(d / "checkpoints" / "anneal0001200_step0001500")[0].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert len(read_results(d / "results.parquet")) == 2


def test_two_task_slurm_job_equals_the_single_process_run(tmp_path, make_spec):
    """One run as one 2-task sbatch job (2 CPU ranks, gloo via submitit's
    TorchDistributedEnvironment): the same parameters as one process, within 1e-6.

    The single process accumulates two half-batch micro-batches, the job's ranks take one
    half each: the same decomposition of the global batch, so the gradients agree to the
    last bit ((g1 + g2) / 2 = g1/2 + g2/2 exactly) and the comparison checks the
    distributed machinery, not float summation order (which alone moves AdamW's second
    step by ~1e-6 on this model when the single process takes the batch whole)."""
    spec = make_spec("ar", steps=3)
    single = tmp_path / "single"
    train_run(spec, single, data_root=tmp_path / "sw" / "_data", progress=False,
              micro_batch_tokens=spec.batch_tokens // 2)
    sw = Sweep([spec], tmp_path / "sw", replace(SLURM, tasks_per_node=2), progress=False)
    (job,) = sw.launch()
    d = sw.run_dir(spec)
    st = read_status(d)
    assert st["state"] == "done" and st["world"] == 2, st
    for name in ("stable_step0000002", "anneal0000002_step0000003"):
        a = load_checkpoint(single / "checkpoints" / name)[0].state_dict()
        b = load_checkpoint(d / "checkpoints" / name)[0].state_dict()
        assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6, name
    assert len(read_results(d / "results.parquet")) == 2  # evaluated by rank 0 in the same job
    rows = _sacct(job.job_id.split("_")[0])
    assert rows and all(r.endswith("|COMPLETED") for r in rows), rows
