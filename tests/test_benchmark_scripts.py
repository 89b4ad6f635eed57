"""The model benchmarks still run: bench_models.py (quick, eager) and bench_gpu.py's CPU smoke
path, which is the only part of the GPU benchmark that runs without a GPU. Output is checked
for its ratio lines, never for timings."""

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(*args: str) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=BENCHMARKS, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_bench_models_quick_eager_prints_every_ratio():
    out = _run("bench_models.py", "--quick", "--eager")
    assert "AR step / nanoGPT-style step" in out and "CDLM step / AR step" in out
    for rank in (16, 64):  # --quick divides the default ranks 64, 256 by 4
        assert f"ar+concept R={rank} anneal" in out and f"cdlm+concept R={rank}" in out
    assert out.count("without the top-k") == 4


def test_bench_gpu_cpu_smoke_path_runs_every_family():
    out = _run("bench_gpu.py")
    assert "CPU smoke path" in out
    rows = [line.split()[1:-6] for line in out.splitlines() if line.split()[:1] == ["nano"] and "/" not in line]
    assert [" ".join(r) for r in rows] == ["ref", "ar", "cdlm", "ar+concept", "cdlm+concept", "ar+concept anneal",
                                           "cdlm+concept anneal"]
    assert out.count("overhead: anneal") == 2
