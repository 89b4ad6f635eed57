"""Accelerator peak throughput (for MFU) and the planner's runtime table.

Peaks are the vendors' dense (no 2:4 sparsity) BF16 tensor-core figures per GPU.
MFU = achieved model FLOP/s (Eq. 23 / Eq. 24 FLOPs per token x tokens/s) / (peak x GPUs).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import Iterator

import torch

# (substring of torch.cuda.get_device_name(), dense BF16 FLOP/s), most specific first
GPU_PEAK_BF16: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM5 (e.g. "NVIDIA H100 80GB HBM3")
    ("H200", 989e12),
    ("GH200", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("A10", 125e12),
)

# the planner's --device choices: peak FLOP/s and the MFU it assumes (stated in the table)
PLAN_DEVICES: dict[str, dict[str, float]] = {
    "h100": {"peak": dict(GPU_PEAK_BF16)["H100"], "mfu": 0.40},
    "a100": {"peak": dict(GPU_PEAK_BF16)["A100"], "mfu": 0.40},
    "cpu": {"peak": float("nan"), "mfu": 0.30},  # peak measured on this machine (one matmul)
}


def gpu_peak_flops(name: str) -> float | None:
    """Dense BF16 peak FLOP/s of a GPU by its device name; None when not in the table."""
    return next((peak for key, peak in GPU_PEAK_BF16 if key.lower() in name.lower()), None)


def device_peak_flops(device: torch.device) -> float | None:
    """Peak of ``device`` for MFU: the GPU table on CUDA, None on CPU (no MFU reported)."""
    return gpu_peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None


@dataclass(frozen=True)
class CpuCalibration:
    """This machine's float32 matmul rate: ``flops`` (the median of ``repeats`` timed bursts
    after a warm-up, FLOP/s), ``spread`` ((max - min) / median of the bursts), ``threads``."""

    flops: float
    spread: float
    threads: int
    repeats: int


_CPU: dict[int, CpuCalibration] = {}
CALIBRATION_BURSTS = 7  # timed bursts of 512^3 GEMMs, 30 ms each, after two warm-up GEMMs


@contextlib.contextmanager
def num_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``n`` (unchanged when None) for the block."""
    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def cpu_calibration(threads: int | None = None) -> CpuCalibration:
    """The CPU's matmul rate on ``threads`` threads (default: the current count), cached per
    process and thread count.  The median of several short bursts after a warm-up is stable
    between calls where one 0.2 s burst including the thread pool's start-up was not (it
    moved 9x between two consecutive ``plan`` calls on a loaded machine)."""
    n = int(threads or torch.get_num_threads())
    if n not in _CPU:
        with num_threads(n):
            a = torch.randn(512, 512)
            torch.mm(a, a)
            torch.mm(a, a)
            rates = []
            for _ in range(CALIBRATION_BURSTS):
                t0, k = time.perf_counter(), 0
                while time.perf_counter() - t0 < 0.03:
                    torch.mm(a, a)
                    k += 1
                rates.append(2 * 512**3 * k / (time.perf_counter() - t0))
        med = statistics.median(rates)
        _CPU[n] = CpuCalibration(med, (max(rates) - min(rates)) / med, n, CALIBRATION_BURSTS)
    return _CPU[n]


def cpu_peak_flops() -> float:
    """This machine's float32 matmul FLOP/s on the current thread count (:func:`cpu_calibration`)."""
    return cpu_calibration().flops


def sustained_flops(device: str, mfu: float | None = None) -> tuple[float, float]:
    """(sustained training FLOP/s per device, the MFU assumed) for a planner ``--device``."""
    if device not in PLAN_DEVICES:
        raise ValueError(f"unknown device {device!r}; expected one of {sorted(PLAN_DEVICES)}")
    d = PLAN_DEVICES[device]
    u = d["mfu"] if mfu is None else float(mfu)
    if not 0 < u <= 1:
        raise ValueError(f"MFU must be in (0, 1], got {u}")
    peak = cpu_peak_flops() if device == "cpu" else d["peak"]
    return peak * u, u
