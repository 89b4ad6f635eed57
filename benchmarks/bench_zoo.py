"""Zoo benchmarks: ratios against baselines run in the same process.

1. MxD factorised forward vs materialising the k active experts' W_n per token.
2. Training-step time of each zoo family relative to ``ar`` at the same size, next to the
   ratio of their analytic FLOPs per token (does the FLOP accounting track the cost?).

    .venv/bin/python benchmarks/bench_zoo.py [--size mini] [--steps 10]
"""

from __future__ import annotations

import argparse
import time

import torch

from interpscale.models import build_model
from interpscale.models.types import Batch
from interpscale.models.zoo.cocomix import CoCoMixLM
from interpscale.models.zoo.mxd import MxD


def _time(fn, repeat: int) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def bench_mxd(repeat: int) -> None:
    torch.manual_seed(0)
    layer = MxD(64, 64, 256, n_experts=1024, k=8)
    torch.nn.init.normal_(layer.D)
    x = torch.randn(128, 64)

    def explicit():
        z, a = layer.hidden(x), layer.coefficients(x)
        vals, idx = a.topk(layer.k, dim=-1)  # [n, k]
        W = layer.D[None, None] * layer.C[idx][:, :, None, :]  # [n, k, H, O]: the experts' weights
        return torch.einsum("nk,nh,nkho->no", vals, z, W) + layer.b_out

    with torch.no_grad():
        assert torch.allclose(explicit(), layer(x).y_hat, atol=1e-4)
        t_fact = _time(lambda: layer(x), repeat)
        t_expl = _time(explicit, repeat)
    print(f"MxD forward, 128 tokens, N=1024, k=8: factorised {t_fact * 1e3:.2f} ms, "
          f"explicit experts {t_expl * 1e3:.2f} ms -> speed-up x{t_expl / t_fact:.1f}")


def bench_families(size: str, steps: int, seq_len: int = 64) -> None:
    tokens = torch.randint(4, 512, (8, seq_len), generator=torch.Generator().manual_seed(0))
    batch = Batch(tokens)
    rows = []
    for family in ("ar", "crate", "crate-gpt", "mxd", "reetym", "cocomix-pause", "cocomix"):
        torch.manual_seed(0)
        if family == "cocomix":  # an untrained teacher is enough to time the attribution pass
            teacher = build_model("ar", "nano", vocab_size=512)
            from interpscale.models.zoo.mxd import TopKSAE

            model = build_model(family, size, vocab_size=512, teacher_size="nano", teacher=teacher,
                                sae=TopKSAE(teacher.config.d_model, 256, 32).requires_grad_(False), sae_width=256)
            assert isinstance(model, CoCoMixLM)
        else:
            model = build_model(family, size, vocab_size=512)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step():
            out = model.loss(batch, 0)
            opt.zero_grad()
            out.total.backward()
            opt.step()

        rows.append((family, _time(step, steps), model.flops_per_token(seq_len)))
    t_ar, m_ar = rows[0][1], rows[0][2]
    print(f"\ntraining step, size {size}, batch 8x{seq_len} (ratios vs ar):")
    print(f"{'family':<15}{'ms/step':>10}{'time ratio':>12}{'FLOP ratio':>12}")
    for fam, t, m in rows:
        print(f"{fam:<15}{t * 1e3:>10.1f}{t / t_ar:>12.2f}{m / m_ar:>12.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="mini")
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    bench_mxd(repeat=20)
    bench_families(args.size, args.steps)


if __name__ == "__main__":
    main()
