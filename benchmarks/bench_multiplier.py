"""The compute multiplier's synthetic ground truth (issue 36 acceptance; docs/multiplier.md):
a planted constant multiplier (1.3x) and a growing one (1.3x (C / C_mid)^0.05) on a sweep shaped
like configs/demo.toml's (five slices a factor 2 apart, four sizes per slice), 50 seeds each.
Prints, per case and method: how often the 90% band covers the planted k at the middle budget and
how often the growth test says growing / constant / shrinking / undetermined.

    .venv/bin/python benchmarks/bench_multiplier.py [--seeds 50] [--joint]
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np
import pandas as pd

from interpscale.scaling.multiplier import DEMO_SLICES, fit_multiplier, planted_multiplier, simulate_pair

MID = DEMO_SLICES[len(DEMO_SLICES) // 2]
CASES = [  # (name, growth, noise, law)
    ("constant 1.3x", 0.0, 0.003, None),
    ("growing C^0.05", 0.05, 0.003, None),
    ("constant 1.3x, noise 1%", 0.0, 0.01, None),
    ("growing C^0.05, noise 1%", 0.05, 0.01, None),
    ("constant 1.3x, L_inf = 1.5", 0.0, 0.003, {"L_inf": 1.5}),
    ("growing C^0.05, L_inf = 1.5", 0.05, 0.003, {"L_inf": 1.5}),
]


def run(seeds: int, methods: tuple[str, ...], n_boot: int) -> pd.DataFrame:
    rows = []
    for name, growth, noise, law in CASES:
        k_true = float(planted_multiplier(MID, 1.3, growth))
        t0 = time.perf_counter()
        fits = [fit_multiplier(simulate_pair(growth=growth, noise=noise, seed=s, law=law), "base", "variant",
                               methods=methods, n_boot=n_boot, target_compute=None) for s in range(seeds)]
        for method in methods:
            at = [f.at(MID, method) for f in fits]
            tests = [f.growth[method] for f in fits]
            verdicts = pd.Series([t.verdict for t in tests])
            rows.append({"case": name, "noise": noise, "method": method, "seeds": seeds,
                         "covers k(C_mid)": np.mean([a["lo"] <= k_true <= a["hi"] for a in at]),
                         "growing": np.mean(verdicts == "growing"), "constant": np.mean(verdicts == "constant"),
                         "shrinking": np.mean(verdicts == "shrinking"),
                         "undetermined": np.mean(verdicts == "undetermined"),
                         "mean slope": np.nanmean([t.slope for t in tests]),
                         "true slope": growth / (1 - growth), "s/fit": (time.perf_counter() - t0) / seeds})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--joint", action="store_true", help="also the joint (Eq. 27) method (slower)")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    table = run(args.seeds, ("isoflop", "joint") if args.joint else ("isoflop",), args.n_boot)
    print(table.to_markdown(index=False, floatfmt=".3g"))


if __name__ == "__main__":
    main()
