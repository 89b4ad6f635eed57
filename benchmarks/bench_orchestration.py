"""Orchestration overheads, as ratios against a training step measured in the same process.

- data build/step: building one Batch (seeded permutation, chunk-id remap, labels) / one step
- data wait/step: the time the trainer's loop actually waits for a batch (prefetched on a
  thread while the previous step trains) / its step time, from metrics.jsonl
- save/step: writing the resume state (weights + AdamW + RNG) / one training step
- DDP: step time of 2 CPU ranks (gloo, DDP, half the global batch each) vs 1 rank (all of it);
  ideal on 2 free cores is 0.5, and overhead = 2 x t(2 ranks) / t(1 rank) - 1
- throughput: tokens/s and achieved FLOP/s (Eq. 23) per demo size, vs a 512x512 matmul
- loop CPU/step (issue 45): process CPU time (every thread: the prefetch thread's too) per step of
  the trainer's whole loop on demo runs, batches handed over one per step (``MAX_AHEAD = 1``, the
  loop before issue 45) vs in blocks, alternated; wall time is not used (a loaded machine)

Runs on CUDA as well (``--device cuda``: MFU from the GPU table is then in metrics.jsonl).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

from interpscale.models import build_model, flops_per_token, params_nonembedding, save_checkpoint
from interpscale.data import PreparedData, prepare_data
from interpscale.orchestration import parallel
from interpscale.orchestration.runtime import cpu_peak_flops
from interpscale.orchestration.planner import PlanOptions, plan
from interpscale.orchestration.spec import RunSpec

DATA = {"kind": "synthetic", "n_concepts": 16, "n_docs": 3000}


def _time(fn, n: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def _spec(steps: int, rows: int = 16, seq: int = 64) -> RunSpec:
    over = {"vocab_size": 512, "n_concepts": 16}
    M = flops_per_token("ar", "nano", seq, **over)
    return RunSpec(family="ar", size="nano", slice_flops=M * steps * rows * seq, flops=M * steps * rows * seq,
                   params=params_nonembedding("ar", "nano", **over), tokens=steps * rows * seq, seq_len=seq,
                   batch_tokens=rows * seq, flops_per_token=M, data=DATA, vocab_size=512, log_every=10,
                   model_overrides={"n_concepts": 16}, decay_frac=0.0)


def _train(rank: int, world: int, spec_json: str, run_dir: str, data_root: str, init: str, device: str) -> None:
    torch.set_num_threads(1)
    os.environ["LOCAL_RANK"] = str(rank)
    if world > 1:
        torch.distributed.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"file://{init}",
                                             rank=rank, world_size=world)
    from interpscale.orchestration.trainer import Trainer

    Trainer(RunSpec.from_dict(json.loads(spec_json)), run_dir, data_root=data_root, progress=False,
            tensorboard=False, device=None if device == "cuda" else "cpu").run()
    if world > 1:
        torch.distributed.destroy_process_group()


def _step_times(run_dir: Path) -> tuple[float, float]:
    """Median step time and data-wait fraction over the logged windows after the first."""
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()][1:]
    return statistics.median(r["step_time_s"] for r in recs), statistics.median(r["data_wait_frac"] for r in recs)


def trainer_figures(tmp: str, device: str, steps: int = 60) -> None:
    spec = _spec(steps)
    times = {}
    for world in (1, 2):
        run_dir = Path(tmp) / f"w{world}"
        args = (world, spec.to_json(), str(run_dir), f"{tmp}/_data", f"{tmp}/init{world}", device)
        if world == 1:
            _train(0, *args)
        else:
            mp.spawn(_train, args=args, nprocs=world, join=True)
        times[world] = _step_times(run_dir)
    (t1, w1), (t2, w2) = times[1], times[2]
    print(f"trainer ({spec.batch_size} x {spec.seq_len} tokens, ar nano, {device}): step {1e3 * t1:.1f} ms; "
          f"data wait/step {w1:.3f} (prefetched)")
    print(f"DDP 2 ranks vs 1: step {1e3 * t2:.1f} vs {1e3 * t1:.1f} ms = {t2 / t1:.2f}x "
          f"(ideal 0.50; overhead {2 * t2 / t1 - 1:+.0%}); data wait/step {w2:.3f}")


def step_figures(tmp: str) -> None:
    data = PreparedData(prepare_data(DATA, tmp, seq_len=32, vocab_size=512))
    p = plan("demo", PlanOptions(flops_per_s=1e10))
    peak = cpu_peak_flops()
    print(f"matmul peak (1 thread): {peak / 1e9:.1f} GFLOP/s")
    seen = set()
    for r in p.runs:
        if (r.family, r.size) in seen or r.family not in ("ar", "cdlm+concept"):
            continue
        seen.add((r.family, r.size))
        torch.manual_seed(0)
        model = build_model(r.family, r.model_size, **{"vocab_size": 512, "n_concepts": 16, **r.model_overrides})
        concept = r.family.endswith("concept")
        batch = data.train.batch(0, r.batch_size, seed=0, concepts=concept)
        step_counter = iter(range(10**9))

        def step(opt):
            loss = model.loss(batch, next(step_counter)).total
            opt.zero_grad()
            loss.backward()
            opt.step()

        # the trainer's fused AdamW against torch's CPU default (a per-tensor loop), alternated
        opts = {"fused": torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True),
                "loop": torch.optim.AdamW(model.parameters(), lr=1e-3)}
        times = {k: [] for k in opts}
        for _ in range(5):
            for k, o in opts.items():
                times[k].append(_time(lambda: step(o), 10))
        t_step, t_loop = statistics.median(times["fused"]), statistics.median(times["loop"])
        opt = opts["fused"]
        t_data = _time(lambda: data.train.batch(5, r.batch_size, seed=0, concepts=concept), 50)
        t_save = _time(lambda: save_checkpoint(model, f"{tmp}/s.pt", extra={
            "optimizer": opt.state_dict(), "rng": torch.get_rng_state()}), 5)
        tok_s = r.batch_tokens / t_step
        print(f"{r.family:13s} {r.size:6s} step {1e3 * t_step:6.1f} ms  {tok_s:8.0f} tok/s  "
              f"{r.flops_per_token * tok_s / peak:6.1%} of peak  data build/step {t_data / t_step:5.2f}  "
              f"save/step {t_save / t_step:5.2f}  fused/loop AdamW step {t_step / t_loop:5.2f}")


def loop_figures(tmp: str, steps: int, rounds: int = 3,
                 runs: tuple[str, ...] = ("ar:L1d12", "cdlm+concept:L1d8")) -> None:
    from interpscale.orchestration.trainer import Trainer

    p = plan("demo", PlanOptions(flops_per_s=1e10))
    default = parallel.MAX_AHEAD
    for name in runs:
        family, size = name.split(":")
        r = next(r for r in p.runs if (r.family, r.size) == (family, size))
        r = dataclasses.replace(r, tokens=steps * r.batch_tokens)  # the demo's run, shortened
        cpu: dict[int, list[float]] = {1: [], default: []}
        for i in range(rounds + 1):  # the first round warms up (imports, data preparation)
            for ahead in cpu:
                parallel.MAX_AHEAD = ahead
                run_dir = Path(tmp) / f"loop-{family}-{size}-{ahead}-{i}"
                t = Trainer(r, run_dir, data_root=f"{tmp}/_data", progress=False, tensorboard=False, device="cpu")
                t0 = time.process_time()
                t.run()
                if i:
                    cpu[ahead].append((time.process_time() - t0) / steps)
        parallel.MAX_AHEAD = default
        one, block = statistics.median(cpu[1]), statistics.median(cpu[default])
        ratio = statistics.median(b / a for a, b in zip(cpu[1], cpu[default]))
        print(f"loop {name:18s} CPU/step: one batch per hand-off {1e3 * one:6.2f} ms, blocks {1e3 * block:6.2f} ms "
              f"(median paired ratio {ratio:.3f}; {steps} steps x {rounds} rounds)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--loop-steps", type=int, default=400, help="steps per run of the loop CPU/step figure")
    ap.add_argument("--only-loop", action="store_true", help="only the loop CPU/step figure (issue 45)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        if not args.only_loop:
            trainer_figures(tmp, args.device, args.steps)
            step_figures(tmp)
        loop_figures(tmp, args.loop_steps)


if __name__ == "__main__":
    main()
