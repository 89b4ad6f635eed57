"""Moved to :mod:`interpscale.orchestration.runtime` (until the imports outside orchestration follow)."""

from interpscale.orchestration.runtime import (CALIBRATION_BURSTS, GPU_PEAK_BF16, PLAN_DEVICES,  # noqa: F401
                                               cpu_calibration, cpu_peak_flops, device_peak_flops,
                                               gpu_peak_flops, num_threads, sustained_flops)
