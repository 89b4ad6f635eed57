"""One rank of tests/cuda/test_distributed.py, started by ``torch.distributed.run``: the
trainer's data-parallel wrapper (DDP or FSDP2) around a family, compiled bf16 steps, the
whole-state gather, and that state loaded into a fresh wrapped model; the DCP resume state
(asynchronous save on its own gloo group) loaded into another."""

import argparse
import json
import os

import torch
import torch.distributed as dist

from interpscale.models import DataFields, build_model
from interpscale.models.types import Batch
from interpscale.orchestration.checkpointer import load_sharded, save_sharded, sharded_state
from interpscale.orchestration.parallel import full_state, is_sharded, load_optimizer, sync, wrap


def wrapped(family: str, parallel: str, device: torch.device, state: dict | None = None):
    torch.manual_seed(0)
    model = build_model(family, "nano", data=DataFields(vocab_size=256)).to(device)
    if state is not None:
        model.load_state_dict(state)
    init = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}  # before sharding
    # parallel.wrap's data-parallel branch (world > 1) on this group of one rank: NCCL refuses
    # two ranks on one GPU, and wrap(world=1) returns the bare loss module
    module = wrap(model, parallel, 2, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=device.type == "cuda" or None)
    return model, module, opt, init


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", required=True)
    ap.add_argument("--parallel", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cuda = torch.cuda.is_available() and os.environ.get("INTERPSCALE_CUDA_TESTS_ON_CPU") != "1"
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    # (full_state before the first step would initialise the FSDP2 optimizer state with a step)
    model, module, opt, first = wrapped(a.family, a.parallel, device)
    fn = torch.compile(module)
    tokens = torch.randint(4, 256, (4, 64), generator=torch.Generator().manual_seed(0)).to(device)
    losses = []
    for step in range(5):
        with sync(module, True), torch.autocast(device.type, dtype=torch.bfloat16):
            total, _ = fn(Batch(tokens), step)
        total.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(total.detach()))
    msd, osd = full_state(module, model, opt)
    model2, module2, opt2, _ = wrapped(a.family, a.parallel, device, {k: v.to(device) for k, v in msd.items()})
    load_optimizer(module2, opt2, osd)
    msd2, osd2 = full_state(module2, model2, opt2)
    # the resume state as DCP shards, written asynchronously on a gloo group beside NCCL, read back
    path = os.path.splitext(a.out)[0] + ".dcp"
    save_sharded(sharded_state(module, opt), path, pg=dist.new_group(backend="gloo")).result()
    model3, module3, opt3, _ = wrapped(a.family, a.parallel, device)
    load_sharded(module3, opt3, path)
    msd3, osd3 = full_state(module3, model3, opt3)
    out = {"dcp_reloaded": all(torch.equal(msd[k].cpu(), msd3[k].cpu()) for k in msd),
           "dcp_optimizer_steps": sorted({int(s["step"]) for s in osd3["state"].values()}),
           "wrapper": type(module).__name__, "sharded": is_sharded(module), "losses": losses,
           "keys": sorted(msd) == sorted(first), "changed": any(not torch.equal(msd[k].cpu(), first[k]) for k in first),
           "reloaded": all(torch.equal(msd[k].cpu(), msd2[k].cpu()) for k in msd),
           "optimizer_steps": sorted({int(s["step"]) for s in osd2["state"].values()})}
    with open(a.out, "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
