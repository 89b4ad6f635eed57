"""The training loop's checkpointing: what to save, when, and with every rank agreeing
(docs/training.md, "Checkpoints"), modelled on torchtitan's ``CheckpointManager``.  The time
rule uses rank 0's clock, broadcast at log steps only (clocks differ; FSDP2 saving is collective).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable

import torch

from interpscale.models.checkpoint import load_checkpoint, save_checkpoint
from interpscale.orchestration.schedule import Segment, reservoir_steps
from interpscale.orchestration.spec import RunSpec
from interpscale.orchestration.teachers import attach_frozen

log = logging.getLogger(__name__)

RESUME = "resume.pt"


def eval_checkpoint_name(seg: Segment, step: int) -> str:
    """``anneal<start>_step<step>.pt`` at the end of an anneal branch, else ``stable_step<step>.pt``."""
    if seg.phase == "anneal" and step == seg.end:
        return f"anneal{seg.start:07d}_step{step:07d}.pt"
    return f"stable_step{step:07d}.pt"


def restore_rng(extra: dict[str, Any], device: torch.device) -> None:
    """Put back the RNG states a resume state saved (CPU, and CUDA on a CUDA device)."""
    torch.set_rng_state(extra["rng"])
    if device.type == "cuda" and "cuda_rng" in extra:
        torch.cuda.set_rng_state(extra["cuda_rng"])


class Checkpointer:
    """Saves and loads one run's checkpoints.  ``build()`` makes a fresh model of the run:
    under FSDP2 rank 0 loads the gathered weights into one to save a whole model."""

    def __init__(self, run_dir: str | Path, spec: RunSpec, *, rank: int, world: int, device: torch.device,
                 build: Callable[[], torch.nn.Module], save_every_s: float = 60.0,
                 save_every_steps: int | None = None):
        self.spec, self.rank, self.world, self.device, self.build = spec, rank, world, device, build
        self.state_dir = Path(run_dir) / "state"
        self.eval_dir = Path(run_dir) / "checkpoints"
        self.save_every_s, self.save_every_steps = save_every_s, save_every_steps
        self.stable_saves = frozenset(reservoir_steps(spec)) | {spec.stable_steps}
        self.last_save = time.monotonic()
        self.module = self.model = self.opt = None

    def bind(self, module: torch.nn.Module, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        """The wrapped loss module, the bare model and its optimizer: what gets saved."""
        self.module, self.model, self.opt = module, model, opt

    # -- load ------------------------------------------------------------------------------
    def load(self, path: Path) -> tuple[torch.nn.Module, dict[str, Any]]:
        """(model on CPU with its frozen parts attached, extra) from a resume state."""
        try:
            model, extra = load_checkpoint(path, map_location="cpu")
            return attach_frozen(model), extra
        except Exception as exc:  # truncated zip, wrong format, config mismatch, ...
            raise ValueError(f"cannot resume from {path}: {exc}. The file is corrupt or foreign; "
                             f"delete it to restart from the previous state (nothing else was changed)") from exc

    def start(self, seg: Segment) -> tuple[torch.nn.Module | None, dict[str, Any]]:
        """The saved state segment ``seg`` starts from: its own resume state when there is one
        (``extra["segment"] == seg.name``); else, for an anneal branch, the stable state at
        the branch's first step (App. I); else ``(None, {})``: a fresh start."""
        resume = self.state_dir / RESUME
        if resume.exists():
            model, extra = self.load(resume)
            if extra.get("segment") == seg.name:
                return model, extra
        if seg.phase == "anneal":
            return self.load(self.state_dir / f"stable_{seg.start:07d}.pt")
        return None, {}

    # -- when ------------------------------------------------------------------------------
    def after_step(self, seg: Segment, step: int, logged: bool) -> None:
        """After every optimizer step (``step``: the steps done)."""
        if seg.phase == "stable" and step in self.stable_saves:
            self.save_eval(seg, step)
            self.save_state(seg, step, f"stable_{step:07d}.pt")
        if step < seg.end and self.due(step, logged):
            self.save_state(seg, step)

    def due(self, step: int, logged: bool) -> bool:
        """Whether the resume state is due: the step cadence, else the time cadence (on rank
        0's clock, agreed at log steps only when there are several ranks)."""
        if self.save_every_steps and step % self.save_every_steps == 0:
            return True
        late = time.monotonic() - self.last_save > self.save_every_s
        return late if self.world == 1 else logged and self._agree(late)

    def end_segment(self, seg: Segment, step: int) -> None:
        if seg.phase == "anneal":
            self.save_eval(seg, step)
        self.save_state(seg, step)

    def finish(self) -> None:
        """Every segment done: the resume state is no longer needed (rank 0)."""
        (self.state_dir / RESUME).unlink(missing_ok=True)

    def _agree(self, flag: bool) -> bool:
        """Rank 0's ``flag`` on every rank (one one-element broadcast)."""
        dev = self.device if torch.distributed.get_backend() == "nccl" else "cpu"
        t = torch.tensor([int(flag)], device=dev)
        torch.distributed.broadcast(t, 0)
        return bool(t.item())

    # -- what ------------------------------------------------------------------------------
    def save_state(self, seg: Segment, step: int, name: str = RESUME) -> None:
        """The resume state at ``step``, also of a segment stopped there (collective under FSDP2)."""
        model, osd = self._whole()
        self.last_save = time.monotonic()
        if self.rank != 0:
            return
        extra = {"segment": seg.name, "step": step, "optimizer": osd, "rng": torch.get_rng_state()}
        if self.device.type == "cuda":
            extra["cuda_rng"] = torch.cuda.get_rng_state()
        save_checkpoint(model, self.state_dir / name, extra=extra)

    def save_eval(self, seg: Segment, step: int) -> None:
        """An evaluation checkpoint at ``step`` (collective under FSDP2; rank 0 writes)."""
        model, _ = self._whole()
        if self.rank != 0:
            return
        annealed = seg.phase == "anneal" and step == seg.end
        save_checkpoint(model, self.eval_dir / eval_checkpoint_name(seg, step), extra={
            "step": step, "phase": seg.phase, "tokens": step * self.spec.batch_tokens, "annealed": annealed,
            "anneal_from": seg.start if annealed else None, "run_id": self.spec.run_id})

    def _whole(self) -> tuple[torch.nn.Module, dict]:
        """(a model holding the whole weights, the full optimizer state).  Under FSDP2 every
        rank gathers (a collective) and rank 0 loads the result into a fresh model."""
        from interpscale.orchestration.parallel import full_state, is_sharded

        msd, osd = full_state(self.module, self.model, self.opt)
        if not is_sharded(self.module) or self.rank != 0:
            return self.model, osd
        whole = self.build()
        whole.load_state_dict(msd)
        return whole, osd
