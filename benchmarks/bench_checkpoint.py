"""Resume-state saves at scale (issue 35): today's full gather (``parallel.full_state`` onto
rank 0 + one ``torch.save``) vs DCP sync vs DCP async (``checkpointer.save_sharded``), for MLP
stacks of ~50M / ~200M / ~800M parameters under FSDP2 on 2 gloo ranks (CPU) — or NCCL on GPUs
(``--backend nccl``, scripts/gpu-check.sh).  Per mode: save time, training-step stall (how long
the loop is blocked), peak RSS of rank 0 and rank 1 (VmHWM, reset before each mode), bytes
written; and the ratios to the full gather.  ``--sizes 50 200`` picks sizes (M params);
``--modes`` picks modes (the 800M full gather needs > 20 GiB on one host)."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

MODES = ("full", "dcp_sync", "dcp_async")


def _rss(field: str = "VmHWM") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> None:
    try:  # hand freed heap back first, so the peak counts live memory only
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux)
    except OSError:
        pass


def _model(params_m: int, device) -> torch.nn.Module:
    """An MLP stack of ``params_m`` M parameters, built on the meta device, sharded with FSDP2,
    then materialised shard by shard (no rank ever holds the whole model, as at scale)."""
    from torch.distributed.fsdp import fully_shard

    width = 2048
    n = max(1, round(params_m * 1e6 / (width * width + width)))
    with torch.device("meta"):
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(n)])
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    model.to_empty(device=device)
    for layer in model:
        layer.reset_parameters()
    return model


def _bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else \
        (path.stat().st_size if path.exists() else 0)


def _save(mode: str, module, opt, out: Path, rank: int, pg):
    """Run one save; returns (stall seconds, total seconds)."""
    from interpscale.orchestration.checkpointer import save_sharded, sharded_state
    from interpscale.orchestration.parallel import full_state

    t0 = time.perf_counter()
    if mode == "full":
        msd, osd = full_state(module, module, opt)
        if rank == 0:
            torch.save({"model": msd, "optimizer": osd}, out)
        del msd, osd
        dist.barrier()
        t = time.perf_counter() - t0
        return t, t
    fut = save_sharded(sharded_state(module, opt, rank), out, pg=pg, asynchronous=mode == "dcp_async")
    stall = time.perf_counter() - t0
    if fut is not None:
        fut.result()
    dist.barrier(group=pg)
    return stall, time.perf_counter() - t0


def _measure(mode: str, size: int, model, opt, out: Path, rank: int, world: int, pg) -> dict | None:
    """One save in ``mode``; rank 0 returns its row."""
    n_params = sum(p.numel() for p in model.parameters())  # DTensors count their global shape
    dist.barrier()
    _reset_peak()
    base = _rss("VmRSS")
    stall, total = _save(mode, model, opt, out, rank, pg)
    got = [None] * world
    dist.all_gather_object(got, {"peak": _rss(), "base": base})
    if rank != 0:
        return None
    return {"params_m": round(n_params / 1e6), "mode": mode, "save_s": total, "stall_s": stall, "ranks": world,
            "rss0_gib": got[0]["peak"] / 2**30, "rss1_gib": got[-1]["peak"] / 2**30 if world > 1 else float("nan"),
            "rss0_rise_gib": (got[0]["peak"] - got[0]["base"]) / 2**30, "bytes_gib": _bytes(out) / 2**30,
            "full_state_gib": n_params * 4 * 3 / 2**30}  # fp32 weights + AdamW's two moments


def worker(rank: int, world: int, args, result_file: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    torch.set_num_threads(1)
    dist.init_process_group(args.backend, rank=rank, world_size=world)
    device = torch.device("cuda", rank % max(1, torch.cuda.device_count())) if args.backend == "nccl" else "cpu"
    pg = dist.new_group(backend="gloo")
    rows = []
    for size in args.sizes:
        torch.manual_seed(0)
        model = _model(size, device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)  # no whole-shard temporaries
        model(torch.randn(8, 2048, device=device)).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        for mode in args.modes:
            row = _measure(mode, size, model, opt, Path(args.dir) / f"{size}_{mode}", rank, world, pg)
            rows += [row] if row else []
            dist.barrier()
        del model, opt
    if rank == 0:
        Path(result_file).write_text(json.dumps(rows))
    dist.destroy_process_group()


def table(rows: list[dict]) -> str:
    """Markdown table with the ratios to the full gather of the same size."""
    full = {r["params_m"]: r for r in rows if r["mode"] == "full"}
    out = ["| params | mode | save s | step stall s | rank0 peak RSS GiB (rise in save) | rank1 peak RSS GiB "
           "| written GiB | full state GiB | save / full | stall / full | rank0 rise / full | rank0 peak / state |",
           "|" + "---|" * 12]
    for r in rows:
        f = full.get(r["params_m"])
        ratio = (lambda k: f"{r[k] / f[k]:.2f}" if f and f[k] else "—")  # noqa: E731
        out.append(f"| {r['params_m']}M | {r['mode']} | {r['save_s']:.2f} | {r['stall_s']:.2f} | "
                   f"{r['rss0_gib']:.2f} ({r['rss0_rise_gib']:+.2f}) | {r['rss1_gib']:.2f} | {r['bytes_gib']:.2f} | "
                   f"{r['full_state_gib']:.2f} | {ratio('save_s')} | {ratio('stall_s')} | {ratio('rss0_rise_gib')} | "
                   f"{r['rss0_gib'] / r['full_state_gib']:.2f} |")
    return "\n".join(out)


def run(sizes, modes=MODES, backend="gloo", directory=None, ranks: int = 2) -> list[dict]:
    """The measurement rows: one pair of spawned ranks per (size, mode), so no mode's freed
    memory inflates another's peak RSS."""
    rows = []
    for size in sizes:
        for mode in modes:
            with tempfile.TemporaryDirectory(dir=directory) as tmp:
                a = argparse.Namespace(sizes=[size], modes=[mode], backend=backend, dir=tmp,
                                       port=29000 + (os.getpid() + len(rows)) % 2000)
                mp.spawn(worker, args=(ranks, a, str(Path(tmp) / "rows.json")), nprocs=ranks, join=True)
                rows += json.loads((Path(tmp) / "rows.json").read_text())
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", type=int, default=[50, 200])
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--ranks", type=int, default=2, help="processes (NCCL: one per GPU; default 2)")
    ap.add_argument("--dir", help="where the states are written (default: the temp directory)")
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args(argv)
    rows = run(a.sizes, a.modes, a.backend, a.dir, a.ranks)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    sys.stdout.write(table(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
