"""Cost of the diffusion loss estimators against the forward passes they need.

Two baselines, both measured in this process: (1) the time the estimator itself spends
inside the model's forward (a timing wrapper counts the passes and their seconds, so load
swings on the shared machine hit numerator and denominator alike) and (2) the same number
of plain ``model(x)`` passes on pre-masked inputs, interleaved with the estimator runs.
Target: every estimator, and all four together, within 10% of the forward passes it needs
(fixed-grid = 9 per batch, the others 1).  Prints validation tokens/s per estimator.  Run: .venv/bin/python benchmarks/bench_metrics.py
"""

from __future__ import annotations

import argparse
import time

import torch

from interpscale.metrics import DIFFUSION_ESTIMATORS, estimate_losses, passes_per_batch
from interpscale.models import build_model
from interpscale.models.types import MASK_ID, Batch


class Timed(torch.nn.Module):
    """Forwards to ``model`` and accumulates the passes and seconds spent in its forward."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.inner, self.config, self.is_diffusion = model, model.config, model.is_diffusion
        self.seconds, self.passes = 0.0, 0

    def forward(self, tokens, **kw):
        t = time.perf_counter()
        out = self.inner(tokens, **kw)
        self.seconds += time.perf_counter() - t
        self.passes += 1
        return out


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_model("cdlm", args.size, vocab_size=512, max_seq_len=args.seq_len).eval()
    data = [Batch(torch.randint(4, 512, (args.batch_size, args.seq_len))) for _ in range(args.batches)]
    masked = [b.tokens.masked_fill(torch.rand(b.tokens.shape) < 0.5, MASK_ID) for b in data]
    n_tok = sum(b.n_tokens for b in data)

    def forwards(n_per_batch: int) -> None:
        with torch.inference_mode():
            for x in masked:
                for _ in range(n_per_batch):
                    model(x)

    estimate_losses(model, data[:1], DIFFUSION_ESTIMATORS)  # warm-up

    def paired(est_fn, n_passes: int) -> tuple[float, float]:
        """Best-of-N of the estimator and of its forward-pass baseline, interleaved so that
        load changes on the shared machine hit both alike."""
        t_est, t_base = [], []
        for _ in range(args.repeats):
            t_base.append(best_of(lambda: forwards(n_passes), 1))
            t_est.append(best_of(est_fn, 1))
        return min(t_est), min(t_base)

    one = best_of(lambda: forwards(1), args.repeats)
    print(f"cdlm/{args.size}: {args.batches} batches of [{args.batch_size}, {args.seq_len}] = {n_tok} tokens, "
          f"{torch.get_num_threads()} thread(s)")
    print(f"baseline forward: {one / args.batches * 1e3:.1f} ms/batch, {n_tok / one:,.0f} tokens/s per pass")
    print(f"{'estimator':<12}{'passes/batch':>13}{'time s':>9}{'in fwd s':>10}{'ratio':>7}"
          f"{'plain fwd s':>13}{'ratio':>7}{'val tokens/s':>14}")
    timed = Timed(model)

    def row(name: str, ests: tuple[str, ...]) -> None:
        p = sum(passes_per_batch(e) for e in ests)
        best = None
        for _ in range(args.repeats):
            timed.seconds, timed.passes = 0.0, 0
            t0 = time.perf_counter()
            estimate_losses(timed, data, ests)
            t = time.perf_counter() - t0
            assert timed.passes == p * args.batches, (name, timed.passes)
            if best is None or t < best[0]:
                best = (t, timed.seconds)
        _, base = paired(lambda: None, p)
        t, fwd = best
        print(f"{name:<12}{p:>13}{t:>9.3f}{fwd:>10.3f}{t / fwd:>7.3f}{base:>13.3f}{t / base:>7.3f}{n_tok / t:>14,.0f}")

    for e in DIFFUSION_ESTIMATORS:
        row(e, (e,))
    row("all four", DIFFUSION_ESTIMATORS)

if __name__ == "__main__":
    main()
