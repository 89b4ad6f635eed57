"""RunSpec: the unit a launcher runs (its id is a deterministic hash of its fields), and its
training schedule: the run's segments and learning rate (App. G warmup-stable-decay, App. I
per-checkpoint anneal)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any
from interpscale.errors import ConfigError, UserError


ANNEAL_RULES = ("all", "every:K", "ends")


def anneal_every(rule: str) -> int | None:
    """``[train] anneal``: "all" -> 1, "every:K" -> K (K >= 1), "ends" -> None (first and last only)."""
    if rule == "all":
        return 1
    if rule == "ends":
        return None
    head, _, k = str(rule).partition(":")
    if head == "every" and k.isdigit() and int(k) >= 1:
        return int(k)
    raise ConfigError(f"anneal = {rule!r}: expected one of {', '.join(ANNEAL_RULES)} (K a positive integer)")


@dataclass(frozen=True)
class RunSpec:
    """One (family, size, slice) training run.  Field names follow the results table:
    ``slice_flops`` is the slice target C, ``flops`` the achieved C = M·D, ``params`` the
    non-embedding P, ``tokens`` D.  Training recipe fields follow App. G."""

    family: str
    size: str
    slice_flops: float
    flops: float
    params: int
    tokens: int
    seq_len: int
    batch_tokens: int
    flops_per_token: float = 0.0
    seed: int = 0
    # App. G shared hyperparameters
    lr: float = 4e-4
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    warmup_max_steps: int = 2000
    warmup_frac: float = 0.02
    decay_frac: float = 0.2  # WSD: final 20% linear decay to zero (App. I anneal)
    reservoir: int = 0  # extra stable checkpoints, each annealed independently (App. I)
    anneal: str = "all"  # which of them get an anneal branch: "all" | "every:K" | "ends" (docs/anneal.md)
    base_size: str = ""  # the models.SIZES preset ``size`` is built from ("" = ``size`` itself)
    model_overrides: dict = field(default_factory=dict)
    data: dict = field(default_factory=lambda: {"kind": "synthetic"})
    vocab_size: int = 512
    val_fraction: float = 0.05
    eval_batches: int = 8
    log_every: int = 10
    plugins: tuple[str, ...] = ()  # modules registering the family (models.plugins), imported by RunSpec.load

    def __post_init__(self) -> None:
        if self.batch_tokens % self.seq_len:
            raise ConfigError(f"batch_tokens={self.batch_tokens} is not a multiple of seq_len={self.seq_len}")
        if self.tokens < self.batch_tokens:
            raise ConfigError(f"{self.family}/{self.size}: D={self.tokens} tokens is smaller than one batch "
                              f"({self.batch_tokens} tokens)")
        if not 0.0 <= self.decay_frac < 1.0:
            raise ConfigError(f"decay_frac must be in [0, 1), got {self.decay_frac}")
        anneal_every(self.anneal)  # a bad rule fails here, naming the value
        object.__setattr__(self, "betas", tuple(self.betas))
        object.__setattr__(self, "plugins", tuple(self.plugins))

    @property
    def steps(self) -> int:
        return self.tokens // self.batch_tokens

    @property
    def model_size(self) -> str:
        return self.base_size or self.size

    @property
    def batch_size(self) -> int:
        return self.batch_tokens // self.seq_len

    @property
    def stable_steps(self) -> int:
        return self.steps - self.decay_steps

    @property
    def decay_steps(self) -> int:
        return int(round(self.decay_frac * self.steps))

    @property
    def warmup_steps(self) -> int:
        # App. G: min(2000 steps, 2% of total steps), at least one step
        return max(1, min(self.warmup_max_steps, int(round(self.warmup_frac * self.steps))))

    @property
    def run_id(self) -> str:
        digest = hashlib.sha256(self.to_json().encode()).hexdigest()[:10]
        return f"{self.family.replace('+', '_')}-{self.size}-C{self.slice_flops:.3g}-{digest}".replace("+", "")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not d["plugins"]:  # runs of built-in families keep the ids they had before plugins existed
            del d["plugins"]
        if d["anneal"] == "all":  # likewise for runs that anneal every reservoir checkpoint
            del d["anneal"]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunSpec":
        if unknown := set(d) - {f.name for f in fields(cls)}:
            raise UserError(f"unknown RunSpec field(s) {sorted(unknown)}")
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> "RunSpec":
        p = Path(path)
        if p.is_dir():
            p = p / "spec.json"
        try:
            spec = cls.from_dict(json.loads(p.read_text()))
        except (json.JSONDecodeError, TypeError) as exc:
            raise UserError(f"{p} is not a valid RunSpec: {exc}") from exc
        if spec.plugins:  # every process that reads a run imports its family's plugin before the lookup
            from interpscale.models.plugins import load_plugins

            load_plugins(spec.plugins)
        return spec


# -- the schedule: segments and learning rate ---------------------------------------------------
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
