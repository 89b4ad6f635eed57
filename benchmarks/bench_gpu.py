"""GPU throughput of the Steerling families: bf16 autocast, torch.compile'd training step,
seq 2048, ~100M / 300M / 1B backbones; tokens/s, MFU (Eq. 23/24 FLOPs vs the device's dense
bf16 peak) and peak memory, against a nanoGPT-style reference of the same shape (bench_models).

Targets (H100): MFU >= 40% for AR >= 300M; CDLM step <= 1.1x AR; +concept overhead within 25%
of Eq. 24 (anneal phase: Table 26 top-k on both heads) or of Eq. 24 + 6Rm (stable phase: dense û).
Without CUDA it runs a tiny CPU smoke path (float32, seq 64) that checks the script.

Run: .venv/bin/python benchmarks/bench_gpu.py [--sizes 85M,400M,800M] [--steps 20]
"""

from __future__ import annotations

import argparse
import time

import torch

from interpscale.models import build_model
from interpscale.models.lm import steerling_price
from interpscale.models.config import make_config
from interpscale.models.pricing import price
from interpscale.models.types import Batch, PhaseSchedule
from interpscale.orchestration.runtime import device_peak_flops


def _eq23(cfg, seq_len, *, concept):
    """M of Eq. 23 (+ Eq. 24 with ``concept``) of a Steerling config."""
    return steerling_price(cfg, seq_len, concept=concept)[1]


def _eq24_concept(cfg):
    """Eq. 24's concept terms (M with the concept module less M without)."""
    return _eq23(cfg, 1, concept=True) - _eq23(cfg, 1, concept=False)


def peak_flops(device: torch.device) -> float:
    """Dense bf16 peak of ``device`` from the trainer's table (NaN on CPU or an unknown GPU)."""
    peak = device_peak_flops(device)
    return float("nan") if peak is None else peak


def time_step(loss_fn, params, steps: int, device) -> float:
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    # CPU smoke path: Dynamo + AOTAutograd trace the model exactly as on CUDA (graph breaks and
    # guards show there); Inductor's C++ code generation, which is not the GPU's Triton path and
    # took ~100 of the smoke test's ~117 s, is left out
    fn = torch.compile(loss_fn, backend="inductor" if device.type == "cuda" else "aot_eager")

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # compile + warm-up
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="85M,400M,800M", help="SIZES presets (~100M, ~300M-400M, ~1B backbones)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--quick", action="store_true",
                    help="85M only, 5 steps, ref/ar/cdlm/ar+concept anneal (scripts/gpu-check.sh's budget)")
    args = ap.parse_args()
    variants = ("ref", "ar", "cdlm", "ar+concept", "cdlm+concept", "ar+concept anneal", "cdlm+concept anneal")
    if args.quick:
        args.sizes, args.steps = "85M", 5
        variants = ("ref", "ar", "cdlm", "ar+concept anneal")
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        sizes, T, B, steps, extra = args.sizes.split(","), 2048, args.batch, args.steps, {}
    else:  # smoke path: checks the script end to end on CPU
        sizes, T, B, steps = ["nano"], 64, 2, 2
        extra = dict(n_concepts=32, concept_rank=8)
        print("no CUDA device: CPU smoke path (nano, seq 64, float32); figures are not GPU figures")
    from bench_models import PlainLM, stable_concept_flops  # the nanoGPT-style reference

    peak = peak_flops(device)
    print(f"device: {torch.cuda.get_device_name(device) if cuda else 'cpu'}; peak bf16 {peak:.3g} FLOP/s; seq {T}, batch {B}")
    print(f"{'size':>6} {'family':>19} {'ms/step':>9} {'tok/s':>10} {'MFU':>6} {'+head':>7} {'peak GiB':>9} {'vs ref':>7}")
    print("MFU: Eq. 23/24 FLOPs (no LM head) x tokens/s / peak; +head adds the LM head's 6dV per token")
    for size in sizes:
        torch.manual_seed(0)
        res = {}
        for fam in variants:
            torch.compiler.reset()  # one graph per model: past 8 per function Dynamo runs eager
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            cfg = make_config("ar", size, max_seq_len=T, block_size=64, **extra)
            tokens = torch.randint(4, cfg.vocab_size, (B, T), device=device)
            if fam == "ref":
                model = PlainLM(cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, T).to(device)
                loss_fn = lambda m=model: m.loss(tokens)  # noqa: E731
            else:
                model = build_model(fam.split()[0], size, max_seq_len=T, block_size=64, **extra).to(device).train()
                if fam.endswith("anneal"):  # Table 26 top-k on both heads: the selection Eq. 24 prices
                    model.set_phase(PhaseSchedule("anneal", 1000, 200))
                n = model.config.n_concepts
                cid = (torch.arange(T, device=device) // 32).expand(B, T).contiguous()
                labels = (torch.rand(B, T // 32, n, device=device) < 0.001).float()
                batch = Batch(tokens, cid, labels) if model.is_concept else Batch(tokens)
                model.check_batch(batch)
                loss_fn = lambda m=model, b=batch: m.loss(b, 10).total  # noqa: E731
            dt = time_step(loss_fn, list(model.parameters()), steps, device)
            flops = _eq23(cfg if fam == "ref" else model.config, T, concept="concept" in fam)  # Eq. 23/24
            head = price("ar", size, max_seq_len=T, block_size=64, **extra).head_flops  # Eq. 23 leaves it out
            mem = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else float("nan")
            res[fam] = dt
            print(f"{size:>6} {fam:>19} {1e3 * dt:9.1f} {B * T / dt:10.0f} {flops * B * T / dt / peak:6.1%} "
                  f"{(flops + head) * B * T / dt / peak:7.1%} {mem:9.2f} {dt / res['ref']:7.3f}")
            del model
        print(f"{size:>6} CDLM/AR {res['cdlm'] / res['ar']:.3f} (target <= 1.1)")
        if args.quick:
            print(f"{size:>6} ar+concept anneal / ar {res['ar+concept anneal'] / res['ar']:.3f}")
        ccfg = make_config("ar+concept", size, max_seq_len=T, block_size=64, **extra)
        base_m = _eq23(ccfg, T, concept=False)  # Eq. 23
        eq24, stable = _eq24_concept(ccfg) / base_m, stable_concept_flops(ccfg) / base_m
        for b in [b for b in ("ar", "cdlm") if f"{b}+concept" in res]:  # all variants ran (not --quick)
            over_s, over_a = res[f"{b}+concept"] / res[b] - 1, res[f"{b}+concept anneal"] / res[b] - 1
            print(f"{size:>6} {b}+concept overhead: anneal {over_a:.3f} / Eq. 24 {eq24:.3f} = {over_a / eq24:.2f}; "
                  f"stable {over_s:.3f} / (Eq. 24 + 6Rm) {stable:.3f} = {over_s / stable:.2f} (targets 0.75-1.25)")


if __name__ == "__main__":
    main()
