"""Stage 3 of scripts/gpu-check.sh: a ~100M (85M preset) AR and CDLM training run each,
through the trainer (torch.compile, bf16, fused AdamW on CUDA), reporting tokens/s, MFU
(Eq. 23 FLOPs vs the device's dense bf16 peak) and peak memory from the run's metrics.jsonl.
Without CUDA: a nano smoke run of each on the CPU (figures are not GPU figures).

GPU_CHECK_STEPS (default 150) sets the steps of each run: 150 x 32k tokens at seq 2048."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import torch

from interpscale.models import DataFields, flops_per_token, params_nonembedding
from interpscale.orchestration import RunSpec
from interpscale.orchestration.trainer import Trainer


def spec(family: str, cuda: bool) -> RunSpec:
    size, seq, rows = ("85M", 2048, 16) if cuda else ("nano", 64, 4)
    steps = int(os.environ.get("GPU_CHECK_STEPS", 150)) if cuda else 6
    vocab, bt = 32768 if cuda else 128, seq * rows
    data = DataFields(vocab_size=vocab)
    M = flops_per_token(family, size, seq, data=data)
    return RunSpec(family=family, size=size, slice_flops=M * steps * bt, flops=M * steps * bt,
                   params=params_nonembedding(family, size, data=data), tokens=steps * bt, seq_len=seq,
                   batch_tokens=bt, flops_per_token=M, vocab_size=vocab, lr=3e-4, log_every=10, eval_batches=1,
                   data={"kind": "synthetic", "n_concepts": 8, "n_docs": 2000 if cuda else 120,
                         "entities_per_concept": 6}, model_overrides={})


def main() -> None:
    cuda = torch.cuda.is_available()
    if not cuda:
        print("no CUDA device: nano smoke runs on the CPU (figures are not GPU figures)")
    root = Path(tempfile.mkdtemp(prefix="gpu-check-runs-"))
    print(f"{'family':>6} {'size':>5} {'steps':>6} {'wall s':>7} {'tok/s':>10} {'MFU':>6} {'peak GiB':>9}")
    for family in ("ar", "cdlm"):
        s = spec(family, cuda)
        t0 = time.perf_counter()
        status = Trainer(s, root / family, progress=False, tensorboard=False).run()
        wall = time.perf_counter() - t0
        rows = [json.loads(x) for x in (root / family / "metrics.jsonl").read_text().splitlines()]
        rows = [r for r in rows if "tokens_per_s" in r][1:] or [r for r in rows if "tokens_per_s" in r]  # past compile
        tok_s = sum(r["tokens_per_s"] for r in rows) / max(1, len(rows))
        mfu = [r["mfu"] for r in rows if r.get("mfu") is not None]
        mem = max((r.get("peak_mem_gib", r.get("peak_rss_gib", float("nan"))) for r in rows), default=float("nan"))
        mfu_s = f"{sum(mfu) / len(mfu):6.1%}" if mfu else f"{'-':>6}"
        print(f"{family:>6} {s.size:>5} {s.steps:>6} {wall:7.1f} {tok_s:10.0f} {mfu_s} {mem:9.2f}  ({status['state']})")
    print(f"runs in {root}")


if __name__ == "__main__":
    main()
