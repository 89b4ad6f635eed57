"""Orchestration overheads, as ratios against a training step measured in the same process.

- data: building one Batch (seeded permutation, chunk-id remap, labels) / one training step
- save: writing the resume state (weights + AdamW + RNG) / one training step
- throughput: tokens/s and achieved FLOP/s (Eq. 23) per demo size, vs a 512x512 matmul
"""

from __future__ import annotations

import tempfile
import time

import torch

from interpscale.models import build_model, save_checkpoint
from interpscale.orchestration.loaders import PreparedData, prepare_data
from interpscale.orchestration.planner import machine_flops_per_s, plan


def _time(fn, n: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def main() -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        data = PreparedData(prepare_data({"kind": "synthetic", "n_concepts": 16, "n_docs": 3000}, tmp,
                                         seq_len=32, vocab_size=512))
        p = plan("demo", flops_per_s=1e10)
        peak = machine_flops_per_s(efficiency=1.0)
        print(f"matmul peak (1 thread): {peak / 1e9:.1f} GFLOP/s")
        seen = set()
        for r in p.runs:
            if (r.family, r.size) in seen or r.family not in ("ar", "cdlm+concept"):
                continue
            seen.add((r.family, r.size))
            torch.manual_seed(0)
            model = build_model(r.family, r.model_size, **{"vocab_size": 512, "n_concepts": 16, **r.model_overrides})
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            concept = r.family.endswith("concept")
            batch = data.train.batch(0, r.batch_size, seed=0, concepts=concept)
            step_counter = iter(range(10**9))

            def step():
                loss = model.loss(batch, next(step_counter)).total
                opt.zero_grad()
                loss.backward()
                opt.step()

            t_step = _time(step, 20)
            t_data = _time(lambda: data.train.batch(5, r.batch_size, seed=0, concepts=concept), 50)
            t_save = _time(lambda: save_checkpoint(model, f"{tmp}/s.pt", extra={
                "optimizer": opt.state_dict(), "rng": torch.get_rng_state()}), 5)
            tok_s = r.batch_tokens / t_step
            print(f"{r.family:13s} {r.size:6s} step {1e3 * t_step:6.1f} ms  {tok_s:8.0f} tok/s  "
                  f"{r.flops_per_token * tok_s / peak:6.1%} of peak  data/step {t_data / t_step:5.2f}  "
                  f"save/step {t_save / t_step:5.2f}")


if __name__ == "__main__":
    main()
