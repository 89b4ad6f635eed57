"""Learning-rate schedule and run segments (App. G warmup-stable-decay, App. I per-checkpoint anneal)."""

from __future__ import annotations

from dataclasses import dataclass

from interpscale.orchestration.spec import RunSpec, anneal_every


@dataclass(frozen=True)
class Segment:
    """A stretch of training: the stable phase, or one anneal branch from stable step ``start``."""

    name: str  # "stable" or "anneal@<start>"
    phase: str  # "stable" | "anneal"
    start: int
    end: int  # exclusive; global step numbers (data position = step)

    @property
    def length(self) -> int:
        return self.end - self.start


def segments(spec: RunSpec) -> list[Segment]:
    """Stable phase to S = 80% of steps; the main anneal S -> total (20% linear decay);
    then one independent anneal per reservoir checkpoint r_k, of length 0.25·r_k so that
    each branch is itself an 80/20 run (App. I)."""
    S, A = spec.stable_steps, spec.decay_steps
    segs = [Segment("stable", "stable", 0, S)]
    if A > 0:
        segs.append(Segment(f"anneal@{S}", "anneal", S, S + A))
    ratio = spec.decay_frac / (1.0 - spec.decay_frac)
    for r in annealed_reservoir_steps(spec):
        a = max(1, int(ratio * r + 0.5))
        segs.append(Segment(f"anneal@{r}", "anneal", r, r + a))
    return segs


def reservoir_steps(spec: RunSpec) -> list[int]:
    """Intermediate stable checkpoints (evenly spaced, excluding the final stable step)."""
    k, S = spec.reservoir, spec.stable_steps
    return sorted({int(round(S * i / (k + 1))) for i in range(1, k + 1)} - {0, S})


def annealed_reservoir_steps(spec: RunSpec) -> list[int]:
    """The reservoir checkpoints that get an anneal branch under ``spec.anneal`` (issue 36): of
    the anneal points r_1 < ... < r_k < S, "all" keeps every one, "every:K" every K-th counted back
    from S (S always), "ends" r_1 and S; the others are predicted (scaling.anneal_rows)."""
    res, every = reservoir_steps(spec), anneal_every(spec.anneal)
    if every is None:
        return res[:1]
    points = [*res, spec.stable_steps]
    return [r for i, r in enumerate(res) if (len(points) - 1 - i) % every == 0]


def lr_at(spec: RunSpec, seg: Segment, step: int) -> float:
    """WSD: linear warmup over min(2000, 2%) steps, constant peak, then linear decay to 0
    across the anneal segment (the last anneal step uses peak/len, reaching 0 after it)."""
    if seg.phase == "anneal":
        return spec.lr * (seg.end - step) / seg.length
    return spec.lr * min(1.0, (step + 1) / spec.warmup_steps)
