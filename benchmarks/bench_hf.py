"""Training-step cost of the Hugging Face families against our ``ar`` at the same shape, as
ratios measured in one process (issue 26).

Both steps are ``torch.compile``d (CPU Inductor; ``--eager`` skips compilation) and run the
trainer's loss module (``parallel.LossModule``: ``model.loss`` with the chunked LM head) and
AdamW. Same shape: layers, width, heads, KV heads, SwiGLU at 4d, vocabulary, sequence;
``ar`` adds QK-norm and clip_qkv (App. G), the Hugging Face Llama has neither.

Run: .venv/bin/python benchmarks/bench_hf.py [--quick] [--families hf:llama,hf:qwen2,hf:gpt_neox]
"""

from __future__ import annotations

import argparse
import time

import torch

from interpscale.models import DataFields, build_model
from interpscale.models.types import Batch
from interpscale.orchestration.parallel import LossModule


def make_step(model: torch.nn.Module, batch: Batch, compiled: bool):
    module = LossModule(model)
    fn = torch.compile(module) if compiled else module
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        total, _ = fn(batch, 10)
        opt.zero_grad(set_to_none=True)
        total.backward()
        opt.step()

    return step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller shape, fewer rounds, hf:llama only")
    ap.add_argument("--eager", action="store_true", help="do not torch.compile the steps")
    ap.add_argument("--families", default=None, help="comma-separated hf: families (default: llama, qwen2, gpt_neox)")
    args = ap.parse_args()
    torch._dynamo.config.recompile_limit = 64  # every family's step shares LossModule.forward's code object
    torch.set_num_threads(1)  # 2 shared cores: one thread and CPU time keep the ratios stable
    clock = time.process_time
    families = (args.families or ("hf:llama" if args.quick else "hf:llama,hf:qwen2,hf:gpt_neox")).split(",")
    L, d, H, T, B, V = (2, 128, 2, 128, 4, 512) if args.quick else (4, 256, 4, 256, 4, 512)
    rounds = 5 if args.quick else 20
    shape = dict(n_layers=L, d_model=d, n_heads=H, n_kv_heads=H, max_seq_len=T)
    batch = Batch(torch.randint(4, V, (B, T), generator=torch.Generator().manual_seed(0)))
    steps = {}
    for fam in ["ar", *families]:
        torch.manual_seed(0)
        model = build_model(fam, "nano", data=DataFields(vocab_size=V), **shape).train()
        steps[fam] = make_step(model, batch, not args.eager)
    for fn in steps.values():
        fn()  # compile + warm-up
        fn()
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(rounds):  # round-robin: drift on the shared machine hits every variant alike
        for k, fn in steps.items():
            t0 = clock()
            fn()
            times[k].append(clock() - t0)
    t = {k: min(v) for k, v in times.items()}
    mode = "eager" if args.eager else "compiled (CPU Inductor)"
    print(f"shape: L={L} d={d} heads={H} kv={H} T={T} B={B} V={V}; {mode}, 1 thread, min of {rounds} rounds (CPU time)")
    for k, v in t.items():
        print(f"  {k:12s} {1e3 * v:8.1f} ms/step")
    for fam in families:
        print(f"{fam} step / ar step : {t[fam] / t['ar']:.3f}")


if __name__ == "__main__":
    main()
