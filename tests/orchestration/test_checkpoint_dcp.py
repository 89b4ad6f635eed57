"""Resume states as DCP shards (issue 35): 2 gloo ranks on the CPU under FSDP2, killed with
SIGKILL while an asynchronous save is in flight, relaunched, finish with the losses and weights
of an uninterrupted run; a 2-rank state resumes on 1 and on 2 ranks; a DDP state and a
single-process state resume under FSDP2; nothing is unpickled on the way."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from interpscale.models import load_checkpoint
from interpscale.models.checkpoint import list_checkpoints
from interpscale.orchestration import Trainer
from interpscale.orchestration.checkpointer import MARKER, completed_states
from interpscale.orchestration.rundir import read_status

# ~8 two-process launches (torch.distributed.run, gloo): about a minute of CPU in all
pytestmark = pytest.mark.slow

WORKER = """
import os, signal, sys, time
import torch, torch.distributed as dist
torch.set_num_threads(1)
from interpscale.orchestration import RunSpec, Trainer
from interpscale.orchestration import checkpointer as ck
spec, run_dir, data, parallel, stop, kill_at = sys.argv[1:7]
if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    dist.init_process_group("gloo")
if int(kill_at):  # SIGKILL every rank right after it staged the state of step kill_at (write in flight)
    save = ck.Checkpointer.save_state
    def save_then_die(self, seg, step, kind="resume", *, wait=False):
        save(self, seg, step, kind, wait=wait)
        if step == int(kill_at):
            time.sleep(0.05)  # the background writer has started
            os.kill(os.getpid(), signal.SIGKILL)
    ck.Checkpointer.save_state = save_then_die
Trainer(RunSpec.load(spec), run_dir, data_root=data, progress=False, save_every_steps=4,
        parallel=parallel).run(stop_at_step=int(stop) or None)
if dist.is_initialized():
    dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from tests.orchestration.conftest import tiny_spec

    d = tmp_path_factory.mktemp("dcp")
    spec = tiny_spec("ar", steps=20)
    (d / "spec.json").write_text(spec.to_json())
    (d / "worker.py").write_text(WORKER)
    return d, spec


def launch(d: Path, run: str, *, ranks: int = 2, parallel: str = "fsdp", stop: int = 0, kill_at: int = 0) -> int:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
           str(d / "worker.py"), str(d / "spec.json"), str(d / run), str(d / "_data"), parallel, str(stop),
           str(kill_at)]
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    errors = [x for x in proc.stderr.splitlines() if "Error" in x and "elastic" not in x]
    assert kill_at or proc.returncode == 0, "\n".join(errors[-20:]) or proc.stderr[-3000:]
    return proc.returncode


def final(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint([p for p in list_checkpoints(run_dir / "checkpoints") if p.name.startswith("anneal")][-1]
                           )[0].state_dict()


def losses(run_dir: Path) -> dict[tuple[str, int], float]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {(r["segment"], r["step"]): r["loss"] for r in rows}


@pytest.fixture(scope="module")
def reference(setup):
    d, _ = setup
    launch(d, "ref")
    return final(d / "ref"), losses(d / "ref")


def test_sigkill_during_async_save_resumes_to_the_uninterrupted_run(setup, reference):
    d, _ = setup
    assert launch(d, "killed", kill_at=8) != 0
    states = {p.name: (p / MARKER).exists() for p in (d / "killed" / "state").iterdir()}
    # step 8's save was cut short (no marker, perhaps no directory yet); step 4's is complete
    assert states["resume_0000004_stable"] and not states.get("resume_0000008_stable"), states
    launch(d, "killed")
    assert read_status(d / "killed")["resumed_at"] == [4]
    ref_w, ref_losses = reference
    w = final(d / "killed")
    assert all(torch.equal(ref_w[k], w[k]) for k in ref_w)  # as the single-process resume tests
    got = losses(d / "killed")
    assert got.keys() == ref_losses.keys()
    # every logged window's mean loss, except the one the resume cut (steps 5.. of 1..5 re-logged)
    assert {k: v for k, v in got.items() if k != ("stable", 5)} == {
        k: v for k, v in ref_losses.items() if k != ("stable", 5)}
    # finished: resume states gone, the reservoir's stable states kept (anneal branches start there)
    assert {m["kind"] for _, m in completed_states(d / "killed" / "state")} == {"stable"}


def _close(a: dict, b: dict) -> None:
    for k in a:  # another world size sums in another order
        torch.testing.assert_close(a[k], b[k], atol=2e-4, rtol=2e-3, msg=k)


def test_two_rank_state_resumes_on_one_and_two_ranks(setup, reference, monkeypatch):
    d, spec = setup
    launch(d, "cut", stop=10)
    shutil.copytree(d / "cut", d / "cut1")
    launch(d, "cut")
    assert read_status(d / "cut")["resumed_at"] == [10]
    _close(reference[0], final(d / "cut"))

    load = torch.load

    def tensors_only(*a, **k):  # DCP reads each tensor record with the restricted unpickler only
        assert k.get("weights_only") is True, "a full pickle loaded while resuming a DCP state"
        return load(*a, **k)

    monkeypatch.setattr(torch, "load", tensors_only)
    torch.set_num_threads(1)
    Trainer(spec, d / "cut1", data_root=d / "_data", progress=False, save_every_steps=4).run()
    monkeypatch.undo()
    assert read_status(d / "cut1")["resumed_at"] == [10]
    _close(reference[0], final(d / "cut1"))


@pytest.mark.parametrize("origin", ["ddp", "single"])
def test_ddp_and_single_process_states_resume_under_fsdp2(setup, reference, origin):
    d, spec = setup
    run = d / f"from_{origin}"
    if origin == "ddp":
        launch(d, run.name, parallel="ddp", stop=10)
    else:
        Trainer(spec, run, data_root=d / "_data", progress=False, save_every_steps=4).run(stop_at_step=10)
    launch(d, run.name, parallel="fsdp")
    assert read_status(run)["resumed_at"] == [10]
    _close(reference[0], final(run))
