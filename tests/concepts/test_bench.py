"""benchmarks/bench_concepts.py --quick runs, and annotating a 10x corpus keeps its peak RSS
within 1.25x of the 1x corpus (issue 28's constant-memory acceptance). Timings are printed,
never asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_concepts_quick_rss_ratio_and_every_row():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_concepts.py"), "--quick"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    ratio = float(re.search(r"RSS ratio 10x / 1x: ([\d.]+)", out).group(1))
    assert ratio <= 1.25, out
    assert "annotate 10x:" in out and "chunks/s" in out and "tag_corpus:" in out
    f1 = float(re.search(r"mean best F1 ([\d.]+)", out).group(1))
    assert f1 >= 0.8, out
