"""The planner's runtime estimate against the measured wall time of the sweep it plans.

Two sweeps, each planned (CPU steps timed in this process, ``orchestration.runtime``) and
launched through the preset's local executor; printed per sweep: estimated and measured
wall time, their ratio (target: within 1.5x either way) and the spread of per-run ratios.

- ``demo-quick``: the CI demo preset (48 runs on the synthetic corpus, data prepared by
  the sweep);
- ``realtext``: ``ar`` and ``ar+concept`` on the real-text fixture ``tests/data/realtext``
  (prepared once before the sweep, as ``interpscale data prepare`` would), three tiny
  sizes and two slices (12 runs).

    python benchmarks/bench_estimate.py [--only demo-quick|realtext] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

REALTEXT = Path(__file__).resolve().parents[1] / "tests" / "data" / "realtext"

REALTEXT_PRESET = """
[plan]
families = ["ar", "ar+concept"]
sizes = ["L1d16", "L1d24", "L1d32"]
seq_len = 32
batch_tokens = 256
slices = [1e9, 2e9]
tolerance = 0.15

[train]
lr = 3e-3
eval_batches = 4
log_every = 25

[data]
kind = "prepared"
path = "{path}"

[launch]
executor = "local"
max_parallel = 2
threads_per_job = 1
runs_per_job = 3

[size_presets.L1d16]
base = "nano"
n_layers = 1
d_model = 16
n_heads = 2

[size_presets.L1d24]
base = "nano"
n_layers = 1
d_model = 24
n_heads = 2

[size_presets.L1d32]
base = "nano"
n_layers = 1
d_model = 32
n_heads = 2
"""


def _realtext_preset(work: Path) -> str:
    from interpscale.data.prepare import prepare

    data = prepare([str(REALTEXT / "python-docs.jsonl")], work / "realtext-data", fmt="jsonl",
                   concepts=REALTEXT / "concepts.json", vocab_size=300, val_fraction=0.1)
    path = work / "realtext.toml"
    path.write_text(REALTEXT_PRESET.format(path=data))
    return str(path)


def measure(preset: str, out: Path) -> dict:
    """Plan ``preset``, launch it into ``out``, return the estimate and the measurement."""
    from interpscale.orchestration import Sweep, plan
    from interpscale.orchestration.runtime import estimate_report

    t0 = time.perf_counter()
    p = plan(preset)
    plan_s = time.perf_counter() - t0
    sweep = Sweep.from_plan(p, out, progress=False)
    t0 = time.perf_counter()
    sweep.launch()
    wall = time.perf_counter() - t0
    dirs = [sweep.run_dir(r) for r in sweep.runs]
    return {"runs": len(p.runs), "plan_s": plan_s, "estimate_s": p.estimate["wall_s"], "measured_s": wall,
            "spread": p.estimate["max_spread"], "line": estimate_report(p.estimate, wall, dirs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["demo-quick", "realtext"])
    ap.add_argument("--keep", help="write the sweeps here instead of a temporary directory")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        rows = []
        for name in ("demo-quick", "realtext"):
            if args.only and name != args.only:
                continue
            preset = name if name == "demo-quick" else _realtext_preset(work)
            r = measure(preset, work / f"sweep-{name}")
            rows.append((name, r))
            print(f"{name}: {r['line']}", flush=True)
        print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"{'sweep':<11} {'runs':>4} {'plan s':>7} {'estimated s':>11} {'measured s':>10} "
              f"{'measured/est':>12} {'step spread':>11}")
        for name, r in rows:
            print(f"{name:<11} {r['runs']:>4} {r['plan_s']:>7.1f} {r['estimate_s']:>11.0f} {r['measured_s']:>10.0f} "
                  f"{r['measured_s'] / r['estimate_s']:>12.2f} {r['spread']:>10.0%}")


if __name__ == "__main__":
    main()
