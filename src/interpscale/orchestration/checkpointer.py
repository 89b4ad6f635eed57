"""The training loop's checkpointing: what to save, when, and with every rank agreeing, modelled
on torchtitan's ``CheckpointManager`` (layout and rules: docs/training.md, "Checkpoints").
Resume states are DCP directories of every rank's shards (tensors only, so loading unpickles
nothing) that count once rank 0 has written ``COMPLETE``; evaluation checkpoints are safetensors
directories (``models.checkpoint.save_pretrained_dir``).
"""
from __future__ import annotations

import json
import logging
import shutil
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from interpscale._atomic import atomic_write_text
from interpscale.models.checkpoint import load_checkpoint, save_pretrained_dir
from interpscale.orchestration.spec import RunSpec, Segment, reservoir_steps
from interpscale.orchestration.teachers import attach_frozen
from interpscale.errors import UserError

log = logging.getLogger(__name__)
# one process saving / loading DCP states alone (no process group) is what we mean, not a slip
warnings.filterwarnings("ignore", message="torch.distributed is (disabled, )?unavailable or uninitialized")

RESUME = "resume.pt"  # the resume state of releases before DCP (read, never written)
MARKER = "COMPLETE"
STATE_FORMAT = "interpscale-dcp/1"


# -- sharded state (usable without a Checkpointer: benchmarks, tests) ------------------------------
def sharded_state(module: torch.nn.Module, opt: torch.optim.Optimizer, rank: int = 0) -> dict[str, Any]:
    """What a resume state holds, as this rank's shards: the model and optimizer state (FQN keys,
    DTensor shards under FSDP2, whole tensors under DDP / one process) and this rank's RNG.
    Tensors only: the optimizer's hyper-parameters come from the spec, the learning rate is
    ``lr_at(step)`` and the data position is the step, so nothing needs a pickle."""
    msd, osd = get_state_dict(module, opt)
    state = {"model": msd, "optim": {"state": osd["state"]}, "rng": {f"cpu{rank}": torch.get_rng_state()}}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["rng"][f"cuda{rank}"] = torch.cuda.get_rng_state()
    return state


def save_sharded(state: dict[str, Any], path: Path, *, pg=None, asynchronous: bool = True):
    """Write ``state`` with DCP to ``path`` (every rank its own shards); the future of an
    asynchronous save (staged to host memory first, so training may go on), else None."""
    kw = {"checkpoint_id": str(path), "process_group": pg, "no_dist": not _distributed()}
    if asynchronous:
        return dcp.async_save(state, **kw)
    dcp.save(state, **kw)
    return None


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def load_sharded(module: torch.nn.Module, opt: torch.optim.Optimizer, path: Path, rank: int = 0) -> dict[str, Any]:
    """Load a DCP state into the (wrapped) model and optimizer, resharding to this world size;
    returns this rank's saved RNG states (absent when the state had fewer ranks)."""
    msd, osd = get_state_dict(module, opt)
    saved = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    rng = {k: v for k, v in sharded_state(module, opt, rank)["rng"].items() if f"rng.{k}" in saved}
    state = {"model": msd, "optim": {"state": osd["state"]}, "rng": rng}
    dcp.load(state, checkpoint_id=str(path), no_dist=not _distributed())
    set_state_dict(module, opt, model_state_dict=state["model"],
                   optim_state_dict={"state": state["optim"]["state"], "param_groups": osd["param_groups"]})
    return {("rng" if k.startswith("cpu") else "cuda_rng"): v for k, v in state["rng"].items()}


def completed_states(state_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(directory, marker) of every complete DCP state under ``state_dir``, oldest first."""
    found = []
    for d in state_dir.glob("*_*_*") if state_dir.is_dir() else ():
        try:
            found.append((d, json.loads((d / MARKER).read_text())))
        except (OSError, ValueError):
            continue  # no marker (a save cut short) or a torn one: does not count
    return sorted(found, key=lambda x: x[1].get("seq", 0))


class Checkpointer:
    """Saves and loads one run's checkpoints.  ``build()`` makes a fresh model of the run (the
    shape a DCP state is loaded into).  ``keep``: complete resume states kept (stable states
    of the reservoir are all kept); ``asynchronous``: DCP saves overlap training."""

    def __init__(self, run_dir: str | Path, spec: RunSpec, *, rank: int, world: int, device: torch.device,
                 build: Callable[[], torch.nn.Module], save_every_s: float = 60.0,
                 save_every_steps: int | None = None, keep: int = 2, asynchronous: bool = True):
        self.spec, self.rank, self.world, self.device, self.build = spec, rank, world, device, build
        self.state_dir = Path(run_dir) / "state"
        self.eval_dir = Path(run_dir) / "checkpoints"
        self.save_every_s, self.save_every_steps = save_every_s, save_every_steps
        self.keep, self.asynchronous = max(1, int(keep)), asynchronous
        self.stable_saves = frozenset(reservoir_steps(spec)) | {spec.stable_steps}
        self.last_save = time.monotonic()
        self.module = self.model = self.opt = None
        self.pending: tuple[Any, Path, dict] | None = None  # (future, directory, marker)
        self.last_saved: tuple[int, str] | None = None
        # DCP's background collectives must not interleave with training's: their own gloo group
        self.pg = torch.distributed.new_group(backend="gloo") if world > 1 else None

    def bind(self, module: torch.nn.Module, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        """The wrapped loss module, the bare model and its optimizer: what gets saved."""
        self.module, self.model, self.opt = module, model, opt

    # -- load ------------------------------------------------------------------------------
    def load(self, path: Path) -> tuple[torch.nn.Module, dict[str, Any]]:
        """(model on CPU with its frozen parts attached, extra) from a ``.pt`` resume state."""
        try:
            model, extra = load_checkpoint(path, map_location="cpu")
            return attach_frozen(model), extra
        except Exception as exc:  # truncated zip, wrong format, config mismatch, ...
            raise UserError(f"cannot resume from {path}: {exc}. The file is corrupt or foreign; "
                            f"delete it to restart from the previous state (nothing else was changed)") from exc

    def latest_state(self, seg: Segment | None = None) -> tuple[Path, dict[str, Any]] | None:
        """The newest complete DCP state (of segment ``seg`` when given), or None."""
        states = [s for s in completed_states(self.state_dir) if seg is None or s[1]["segment"] == seg.name]
        return states[-1] if states else None

    def start(self, seg: Segment) -> tuple[torch.nn.Module | None, dict[str, Any]]:
        """The saved state segment ``seg`` starts from: its own resume state when there is one;
        else, for an anneal branch, the stable state at the branch's first step (App. I);
        else ``(None, {})``: a fresh start.  A DCP state comes back as a fresh model and
        ``extra["dcp"]``, loaded by :meth:`restore` once the model is wrapped."""
        self.wait()
        if self.pg is not None:  # rank 0 has marked the last save complete before anyone looks
            torch.distributed.barrier(group=self.pg)
        own = self.latest_state(seg)
        if own is None and seg.phase == "anneal":
            own = next((s for s in reversed(completed_states(self.state_dir))
                        if s[1]["kind"] == "stable" and s[1]["step"] == seg.start), None)
        if own is not None:
            return self.build(), {"dcp": str(own[0]), "segment": own[1]["segment"], "step": own[1]["step"]}
        return self._start_legacy(seg)

    def _start_legacy(self, seg: Segment) -> tuple[torch.nn.Module | None, dict[str, Any]]:
        """The same from the ``.pt`` states of earlier releases (one release of grace)."""
        resume = self.state_dir / RESUME
        if resume.exists():
            model, extra = self.load(resume)
            if extra.get("segment") == seg.name:
                return model, extra
        legacy = self.state_dir / f"stable_{seg.start:07d}.pt"
        if seg.phase == "anneal" and legacy.exists():
            return self.load(legacy)
        if seg.phase == "anneal":
            raise ValueError(f"anneal branch {seg.name} has no stable state at step {seg.start} in {self.state_dir}")
        return None, {}

    def restore(self, extra: dict[str, Any]) -> None:
        """After :meth:`start` and the wrap: load a DCP state's shards into the bound model and
        optimizer (any world size, any wrapper), then the RNG states."""
        if "dcp" in extra:
            try:
                extra.update(load_sharded(self.module, self.opt, Path(extra["dcp"]), self.rank))
            except (Exception, CheckpointException) as exc:  # DCP's exception is a BaseException
                raise UserError(f"cannot resume from {extra['dcp']}: {exc}. Delete that directory to restart "
                                "from the previous state") from exc
        if "rng" in extra:
            torch.set_rng_state(extra["rng"])
        if self.device.type == "cuda" and "cuda_rng" in extra:
            torch.cuda.set_rng_state(extra["cuda_rng"])

    # -- when ------------------------------------------------------------------------------
    def after_step(self, seg: Segment, step: int, logged: bool) -> None:
        """After every optimizer step (``step``: the steps done)."""
        self.poll()
        if seg.phase == "stable" and step in self.stable_saves:
            self.save_eval(seg, step)
            self.save_state(seg, step, kind="stable")
        elif step < seg.end and self.due(step, logged):
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
        """Every segment done (rank 0, after every rank's :meth:`wait`): resume states go,
        the reservoir's stable states stay."""
        self.wait()
        for d, marker in completed_states(self.state_dir):
            if marker["kind"] == "resume":
                shutil.rmtree(d, ignore_errors=True)
        (self.state_dir / RESUME).unlink(missing_ok=True)

    def _agree(self, flag: bool) -> bool:
        """Rank 0's ``flag`` on every rank (one one-element broadcast)."""
        dev = self.device if torch.distributed.get_backend() == "nccl" else "cpu"
        t = torch.tensor([int(flag)], device=dev)
        torch.distributed.broadcast(t, 0)
        return bool(t.item())

    # -- what ------------------------------------------------------------------------------
    def save_state(self, seg: Segment, step: int, kind: str = "resume", *, wait: bool = False) -> None:
        """The resume state at ``step`` (collective): waits for the previous save, stages this
        rank's shards and writes them in the background (unless ``wait`` or synchronous)."""
        if (step, seg.name) != self.last_saved:  # a stable state at the segment's end is its resume state
            self.wait()  # at most one save in flight
            self.last_save = time.monotonic()
            self.last_saved = (step, seg.name)
            # resume_<step>_<segment> (resume_0000040_anneal-80) or stable_<step>_stable
            path = self.state_dir / f"{kind}_{step:07d}_{seg.name.replace('@', '-')}"
            if (path / MARKER).exists():  # this very state is already complete (a resume that stops at once)
                return
            if self.rank == 0 and path.exists():  # left by a save a kill cut short: start it clean
                shutil.rmtree(path, ignore_errors=True)
            if self.pg is not None:
                torch.distributed.barrier(group=self.pg)
            marker = {"format": STATE_FORMAT, "kind": kind, "segment": seg.name, "step": step, "world": self.world,
                      "run_id": self.spec.run_id}
            future = save_sharded(sharded_state(self.module, self.opt, self.rank), path, pg=self.pg,
                                  asynchronous=self.asynchronous)
            self.pending = (future, path, marker)
        if wait or not self.asynchronous:
            self.wait()

    def poll(self) -> None:
        """Complete the save in flight if it has finished (no waiting)."""
        if self.pending is not None and (self.pending[0] is None or self.pending[0].done()):
            self.wait()

    def wait(self) -> None:
        """Wait for the save in flight; rank 0 then marks it complete and prunes old states."""
        if self.pending is None:
            return
        future, path, marker = self.pending
        self.pending = None
        if future is not None:
            future.result()  # DCP's finish step gathered every rank's writes: all ranks are done
        if self.rank == 0:
            done = completed_states(self.state_dir)
            marker["seq"] = 1 + max((m.get("seq", 0) for _, m in done), default=0)
            marker["time"] = time.time()
            atomic_write_text(path / MARKER, json.dumps(marker))
            self._prune(path)

    def _prune(self, newest: Path) -> None:
        """Keep the last ``keep`` resume states and every stable state; drop cut-short saves."""
        states = completed_states(self.state_dir)
        resumes = [d for d, m in states if m["kind"] == "resume"]
        complete = {d for d, _ in states}
        for d in resumes[:-self.keep] + [d for d in self.state_dir.glob("*_*_*")
                                         if d.is_dir() and d not in complete and d != newest]:
            shutil.rmtree(d, ignore_errors=True)

    def save_eval(self, seg: Segment, step: int) -> None:
        """An evaluation checkpoint at ``step``: safetensors streamed tensor by tensor (collective
        under FSDP2; rank 0 writes; no optimizer state is gathered)."""
        annealed = seg.phase == "anneal" and step == seg.end
        name = f"anneal{seg.start:07d}_step{step:07d}" if annealed else f"stable_step{step:07d}"
        save_pretrained_dir(self.model, self.eval_dir / name, extra={
            "step": step, "phase": seg.phase, "tokens": step * self.spec.batch_tokens, "annealed": annealed,
            "anneal_from": seg.start if annealed else None, "run_id": self.spec.run_id})
