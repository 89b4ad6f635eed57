"""DDP and FSDP2 over NCCL on one GPU: a process group of world size 1 started through
``torch.distributed.run`` (tests/cuda/dist_worker.py), the trainer's wrappers, compiled bf16
steps, the checkpointer's whole-state gather and the optimizer-state reload."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("dist_worker.py")


@pytest.mark.cuda
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
@pytest.mark.parametrize("family", ["ar", "cdlm", "hf:llama"])
def test_data_parallel_wrapper_trains_gathers_and_reloads(family, parallel, tmp_path):
    if family.startswith("hf:"):
        pytest.importorskip("transformers")
    out = tmp_path / "result.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", str(WORKER),
           "--family", family, "--parallel", parallel, "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(out.read_text())
    assert r["wrapper"] == ("DistributedDataParallel" if parallel == "ddp" else "FSDPLossModule")  # fully_shard's class
    assert r["sharded"] == (parallel == "fsdp")
    assert r["losses"][-1] < r["losses"][0], r["losses"]
    assert r["keys"] and r["changed"] and r["reloaded"]
    assert r["optimizer_steps"] == [5]
    assert r["dcp_reloaded"] and r["dcp_optimizer_steps"] == [5]
