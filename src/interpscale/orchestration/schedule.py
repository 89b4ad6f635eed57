"""Moved to :mod:`interpscale.orchestration.spec` (until the imports outside orchestration follow)."""

from interpscale.orchestration.spec import (Segment, annealed_reservoir_steps, lr_at,  # noqa: F401
                                            reservoir_steps, segments)
