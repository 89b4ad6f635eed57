"""Moved to :mod:`interpscale.orchestration.launch`; kept for the jobs of sweeps launched before the move
(their pickles name this module)."""

from interpscale.orchestration.launch import EvalJob, JobConfig, TrainJob  # noqa: F401
