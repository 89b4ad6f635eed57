"""The training loop (App. G recipe), resumable bit-exactly from its last saved state.

State saved in RUN_DIR/state/resume.pt: weights, AdamW state, torch RNG, the segment
and the step (the step is the data position: batches are a pure function of it).
Stable checkpoints at the reservoir steps and the end of the stable phase go to
RUN_DIR/checkpoints/ (``annealed=False``); every anneal branch ends in an annealed one.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from interpscale.models.types import PhaseSchedule
from interpscale.orchestration.loaders import PreparedData, open_data, prepare_data
from interpscale.orchestration.rundir import append_jsonl, atomic_write_text, ensure_writable, read_status, write_status
from interpscale.orchestration.schedule import Segment, lr_at, reservoir_steps, segments
from interpscale.orchestration.spec import RunSpec

log = logging.getLogger(__name__)


def _dist() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def init_run_dir(spec: RunSpec, run_dir: str | os.PathLike, data_root: str | os.PathLike | None = None) -> Path:
    """Create RUN_DIR with spec.json, tokenizer.json, concepts.json and data.json (where the
    prepared data lives and the sequence length its rows are cut at)."""
    run_dir = ensure_writable(run_dir)
    spec_path = run_dir / "spec.json"
    if spec_path.exists():
        old = RunSpec.load(spec_path)
        if old != spec:
            raise ValueError(f"{run_dir} already holds a different run ({old.run_id}); use another directory")
    else:
        atomic_write_text(spec_path, json.dumps(spec.to_dict(), indent=1))
    if not (run_dir / "data.json").exists():
        root = Path(data_root) if data_root else run_dir.parent / "_data"
        data_dir = prepare_data(spec.data, root, seq_len=spec.seq_len, vocab_size=spec.vocab_size,
                                val_fraction=spec.val_fraction, seed=spec.seed)
        data = PreparedData(data_dir, spec.seq_len)
        if getattr(data.val, "n_tokens", 1) == 0:
            raise ValueError(f"{data_dir}: the data has no validation split; prepare it with val_fraction > 0")
        model_kwargs(spec, data)  # a vocabulary / concept mismatch fails here, before any job starts
        for name in ("tokenizer.json", "concepts.json"):
            shutil.copyfile(data_dir / name, run_dir / name)
        link = {"path": str(data_dir.resolve()), "seq_len": spec.seq_len}
        atomic_write_text(run_dir / "data.json", json.dumps(link))
    return run_dir


def open_run_data(run_dir: str | os.PathLike) -> PreparedData:
    """The prepared data of a run directory (its data.json), cut at the run's seq_len."""
    return open_data(run_dir)


def model_kwargs(spec: RunSpec, data: PreparedData) -> dict[str, Any]:
    """Model overrides: the data's concept count, the spec's vocabulary and the data's
    special-token ids where they differ from the defaults, then the spec's own."""
    from interpscale.orchestration.loaders import DEFAULT_SPECIAL_IDS

    ids = getattr(data, "special_ids", DEFAULT_SPECIAL_IDS)
    special = {f"{k}_id": v for k, v in ids.items() if DEFAULT_SPECIAL_IDS.get(k) != v}
    kw = {"vocab_size": spec.vocab_size, "n_concepts": data.n_concepts, **special, **spec.model_overrides}
    if kw["n_concepts"] != data.n_concepts:
        raise ValueError(f"model n_concepts={kw['n_concepts']} but the data has {data.n_concepts} concepts")
    if kw["vocab_size"] < data.vocab_size:
        raise ValueError(f"model vocab_size={kw['vocab_size']} < tokenizer vocabulary {data.vocab_size}")
    return kw


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only: embeddings (and the tied head), norms, biases excluded."""
    emb = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    decay, no_decay, seen = [], [], set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (no_decay if p.ndim < 2 or id(p) in emb or "norm" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class Trainer:
    """Trains one RunSpec in its run directory; ``run()`` resumes wherever it stopped.

    Data parallel over the ranks of an initialised ``torch.distributed`` group: each rank
    takes its share of Table 24's global batch (``spec.batch_size`` rows whatever the
    world size), split into micro-batches of ``micro_batch_tokens`` for gradient
    accumulation.  ``parallel``: ``"ddp"`` (default) or ``"fsdp"`` (FSDP2 ``fully_shard``).
    On CUDA: bf16 autocast, ``torch.compile`` of the loss (``compile=False`` turns it
    off), fused AdamW, pinned batches copied without blocking; the CPU default is eager.
    """

    def __init__(self, spec: RunSpec, run_dir: str | os.PathLike, *, data_root: str | os.PathLike | None = None,
                 device: str | None = None, progress: bool = True, save_every_s: float = 60.0,
                 save_every_steps: int | None = None, micro_batch_tokens: int | None = None,
                 parallel: str = "ddp", compile: bool | None = None, tensorboard: bool = True):
        from interpscale.orchestration.parallel import PARALLEL

        self.spec, self.progress = spec, progress
        self.rank, self.world = _dist()
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if device is None:
            device = f"cuda:{self.local_rank}" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if self.device.type == "cuda":
            if self.device.index is None:
                self.device = torch.device("cuda", self.local_rank)
            torch.cuda.set_device(self.device)
        if parallel not in PARALLEL:
            raise ValueError(f"unknown parallelism {parallel!r}; expected one of {PARALLEL}")
        self.parallel = parallel
        self.compile = self.device.type == "cuda" if compile is None else bool(compile)
        self.tensorboard = tensorboard
        if self.rank == 0:
            init_run_dir(spec, run_dir, data_root)
        if self.world > 1:
            torch.distributed.barrier()
        self.run_dir = Path(run_dir)
        self.save_every_s, self.save_every_steps = save_every_s, save_every_steps
        self.data = open_data(self.run_dir)
        if spec.batch_size % self.world:
            raise ValueError(f"batch of {spec.batch_size} sequences does not split over {self.world} tasks")
        self.rows = spec.batch_size // self.world  # this rank's rows of every global batch
        micro_rows = self.rows if micro_batch_tokens is None else max(1, int(micro_batch_tokens) // spec.seq_len)
        if micro_batch_tokens is not None and (int(micro_batch_tokens) % spec.seq_len or self.rows % micro_rows):
            raise ValueError(
                f"micro_batch_tokens={micro_batch_tokens} must be a multiple of seq_len={spec.seq_len} and "
                f"divide this rank's {self.rows} rows x {spec.seq_len} tokens ({self.world} ranks, global "
                f"batch {spec.batch_tokens} tokens)")
        self.n_micro = self.rows // min(micro_rows, self.rows)
        self.segments = segments(spec)
        from interpscale.models import get_family

        self.concepts = get_family(spec.family).is_concept  # only concept families take labels
        self._last_save = time.monotonic()

    def _lock(self) -> None:
        """One trainer per run directory: an flock held for the process lifetime (released
        by the kernel even on SIGKILL), so a relaunched sweep never trains a run twice at once."""
        import fcntl

        if getattr(self, "_lock_file", None) is not None:
            return
        f = open(self.run_dir / ".lock", "w")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise RuntimeError(f"{self.run_dir} is being trained by another process; not starting a second one")
        self._lock_file = f

    def _barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def _agree(self, flag: bool) -> bool:
        """Rank 0's ``flag`` on every rank (one tiny broadcast)."""
        dev = self.device if torch.distributed.get_backend() == "nccl" else "cpu"
        t = torch.tensor([int(flag)], device=dev)
        torch.distributed.broadcast(t, 0)
        return bool(t.item())

    # -- state -----------------------------------------------------------------------------
    def _build(self):
        from interpscale.models import build_model
        from interpscale.orchestration.teachers import attach_frozen

        model = build_model(self.spec.family, self.spec.model_size, **model_kwargs(self.spec, self.data))
        return attach_frozen(model)  # CoCoMix teachers: loaded here, never by the model

    def _fresh(self):
        torch.manual_seed(self.spec.seed)
        return self._setup(self._build(), None)

    def _setup(self, model, opt_state):
        """Move to the device, wrap for data parallelism, build AdamW (loading its state)."""
        from interpscale.orchestration.parallel import load_optimizer, wrap

        model = model.to(self.device)
        module = wrap(model, self.parallel, self.world, self.device)
        s = self.spec
        opt = torch.optim.AdamW(param_groups(model, s.weight_decay), lr=s.lr, betas=s.betas, eps=s.eps,
                                fused=self.device.type == "cuda" or None)
        if opt_state is not None:
            load_optimizer(module, opt, opt_state)
        self.module = module
        self.loss_fn = torch.compile(module) if self.compile else module
        return model, opt

    def _load(self, path: Path):
        from interpscale.models import load_checkpoint
        from interpscale.orchestration.teachers import attach_frozen

        try:
            model, extra = load_checkpoint(path, map_location="cpu")
            model = attach_frozen(model)
        except Exception as exc:  # truncated zip, wrong format, config mismatch, ...
            raise ValueError(f"cannot resume from {path}: {exc}. The file is corrupt or foreign; "
                             f"delete it to restart from the previous state (nothing else was changed)") from exc
        model, opt = self._setup(model, extra["optimizer"])
        torch.set_rng_state(extra["rng"])
        if self.device.type == "cuda" and "cuda_rng" in extra:
            torch.cuda.set_rng_state(extra["cuda_rng"])
        return model, opt, extra

    def _saveable(self, model, opt):
        """(a whole model on CPU or this rank's model, full optimizer state); collective under FSDP2."""
        from interpscale.orchestration.parallel import full_state, is_sharded

        msd, osd = full_state(self.module, model, opt)
        if not is_sharded(self.module) or self.rank != 0:  # only rank 0 holds the gathered state
            return model, osd
        whole = self._build()
        whole.load_state_dict(msd)
        return whole, osd

    def _save_state(self, path: Path, model, opt, seg: Segment, step: int) -> None:
        from interpscale.models import save_checkpoint

        model, osd = self._saveable(model, opt)
        if self.rank != 0:
            return
        extra = {"segment": seg.name, "step": step, "optimizer": osd, "rng": torch.get_rng_state()}
        if self.device.type == "cuda":
            extra["cuda_rng"] = torch.cuda.get_rng_state()
        save_checkpoint(model, path, extra=extra)
        self._last_save = time.monotonic()

    def _save_eval_checkpoint(self, model, seg: Segment, step: int) -> None:
        from interpscale.models import save_checkpoint
        from interpscale.orchestration.parallel import full_state, is_sharded

        if is_sharded(self.module):  # collective: every rank gathers, rank 0 keeps the whole model
            msd = full_state(self.module, model, self._opt)[0]
            if self.rank == 0:
                model = self._build()
                model.load_state_dict(msd)
        if self.rank != 0:
            return
        annealed = seg.phase == "anneal" and step == seg.end
        name = f"anneal{seg.start:07d}_step{step:07d}.pt" if annealed else f"stable_step{step:07d}.pt"
        save_checkpoint(model, self.run_dir / "checkpoints" / name, extra={
            "step": step, "phase": seg.phase, "tokens": step * self.spec.batch_tokens, "annealed": annealed,
            "anneal_from": seg.start if annealed else None, "run_id": self.spec.run_id})

    # -- loop ------------------------------------------------------------------------------
    def run(self, stop_at_step: int | None = None) -> dict[str, Any]:
        """Train every unfinished segment.  ``stop_at_step`` interrupts the stable phase
        after that step has been saved (used by tests to simulate preemption)."""
        status = read_status(self.run_dir)
        if status.get("state") == "done":
            return status
        if self.rank == 0:
            self._lock()
        if self.rank == 0:
            write_status(self.run_dir, "running", run_id=self.spec.run_id, host=os.uname().nodename,
                         started=status.get("started", time.time()), attempts=status.get("attempts", 0) + 1,
                         world=self.world, micro_batches=self.n_micro, device=str(self.device))
        done = set(status.get("segments_done", []))
        state_dir = self.run_dir / "state"
        if self.compile:
            # Dynamo keeps at most 8 graphs per function and silently runs eager past that; a
            # job that trains several sizes in one process would hit it, so each run starts clean
            torch.compiler.reset()
        for seg in self.segments:
            if seg.name in done:
                continue
            self._barrier()  # rank 0's files for this segment are complete before anyone reads them
            resume = state_dir / "resume.pt"
            extra: dict[str, Any] = {}
            if resume.exists():
                model, opt, extra = self._load(resume)
                if extra.get("segment") != seg.name:  # a leftover from a finished segment
                    extra = {}
            if not extra:
                if seg.phase == "stable":
                    model, opt = self._fresh()
                    step = 0
                else:  # each anneal branch starts from its own stable state (App. I)
                    model, opt, _ = self._load(state_dir / f"stable_{seg.start:07d}.pt")
                    step = seg.start
            else:
                step = int(extra["step"])
                log.info("%s: resuming %s at step %d", self.spec.run_id, seg.name, step)
                if self.rank == 0:
                    write_status(self.run_dir, "running", resumed_at=read_status(self.run_dir).get(
                        "resumed_at", []) + [step])
            finished = self._train_segment(model, opt, seg, step, stop_at_step)
            if not finished:
                return read_status(self.run_dir)
            done.add(seg.name)
            if self.rank == 0:
                write_status(self.run_dir, "running", segments_done=sorted(done))
        self._barrier()
        if self.rank == 0:
            (state_dir / "resume.pt").unlink(missing_ok=True)
            status = write_status(self.run_dir, "done", step=self.spec.steps, finished=time.time())
        return status

    def _host_batch(self, step: int, check=None):
        """This rank's rows of global batch ``step`` on the host (pinned on CUDA), validated
        by ``check`` (the model's ``check_batch``); runs on the prefetch thread."""
        from interpscale.orchestration.parallel import pin

        spec = self.spec
        batch = self.data.train.batch(step, spec.batch_size, seed=spec.seed, rank=self.rank, world=self.world,
                                      concepts=self.concepts)
        if check is not None:  # host-side value checks, off the training thread
            check(batch)
        return pin(batch) if self.device.type == "cuda" else batch

    def _train_segment(self, model, opt, seg: Segment, step: int, stop_at_step: int | None) -> bool:
        from interpscale.orchestration.observe import StepMeter, TensorBoard
        from interpscale.orchestration.parallel import Prefetcher, seed_step, split, step_seed, sync

        spec, dev = self.spec, self.device
        self._opt = opt
        model.train()
        if seg.phase == "stable":  # Table 25 ramps over T_max = the stable run's length
            model.set_phase(PhaseSchedule("stable", max_steps=max(1, spec.stable_steps)))
        else:  # Table 26 ramps over this branch's decay, counted from its first step
            model.set_phase(PhaseSchedule("anneal", max_steps=max(1, seg.start), anneal_steps=seg.length,
                                          anneal_start=seg.start))
        keep = set(reservoir_steps(spec)) | {spec.stable_steps}
        metrics = self.run_dir / "metrics.jsonl"
        lead = self.rank == 0
        bar = tqdm(total=seg.length, initial=step - seg.start, desc=f"{spec.run_id} {seg.name}",
                   disable=not self.progress or not lead, leave=False, mininterval=2.0)
        tb = TensorBoard(self.run_dir, purge_step=step if step > seg.start else None) \
            if lead and self.tensorboard else None
        meter = StepMeter(dev, tokens_per_step=spec.batch_tokens, flops_per_token=spec.flops_per_token,
                          world=self.world)
        autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=dev.type == "cuda")
        check = getattr(model, "check_batch", None)
        batches = Prefetcher(lambda s: self._host_batch(s, check), step, seg.end)
        params = [p for p in model.parameters() if p.requires_grad]
        try:
            while step < seg.end:
                lr = lr_at(spec, seg, step)
                for g in opt.param_groups:
                    g["lr"] = lr
                t0 = time.monotonic()
                batch = next(batches)
                meter.data_wait += time.monotonic() - t0
                opt.zero_grad(set_to_none=True)
                total, parts = 0.0, {}
                micro = split(batch, self.n_micro)
                for i, mb in enumerate(micro):  # equal rows each: the mean of micro-batch losses
                    last = i == self.n_micro - 1
                    seed_step(dev, step_seed(spec.seed, step, self.rank, i))  # noise/gating draws
                    with sync(self.module, last):
                        with autocast:
                            loss, p = self.loss_fn(mb.to(dev), step)
                        (loss / self.n_micro).backward()
                    total = total + loss.detach() / self.n_micro
                    for k, v in p.items():
                        parts[k] = parts.get(k, 0.0) + (v.detach() if torch.is_tensor(v) else v) / self.n_micro
                gnorm = torch.nn.utils.clip_grad_norm_(params, spec.grad_clip)
                opt.step()
                step += 1
                bar.update(1)
                meter.add({"loss": total, "grad_norm": gnorm, **parts})
                if step % spec.log_every == 0 or step == seg.end:
                    rec = meter.record()  # every rank: the window's one host sync
                    if lead:
                        rec = {"step": step, "segment": seg.name, "lr": lr, **rec,
                               "tokens": step * spec.batch_tokens, "time": time.time()}
                        append_jsonl(metrics, rec)
                        if tb is not None:
                            tb.log(seg.name, step, rec)
                if seg.phase == "stable" and step in keep:
                    self._save_eval_checkpoint(model, seg, step)
                    self._save_state(self.run_dir / "state" / f"stable_{step:07d}.pt", model, opt, seg, step)
                logged = step % spec.log_every == 0 or step == seg.end
                due = bool(self.save_every_steps and step % self.save_every_steps == 0)
                if self.world == 1:
                    due = due or time.monotonic() - self._last_save > self.save_every_s
                elif logged:  # ranks agree on rank 0's clock (FSDP2 saving is collective), at log steps only
                    due = due or self._agree(time.monotonic() - self._last_save > self.save_every_s)
                if due and step < seg.end:
                    self._save_state(self.run_dir / "state" / "resume.pt", model, opt, seg, step)
                if stop_at_step is not None and step >= stop_at_step and step < seg.end:
                    self._save_state(self.run_dir / "state" / "resume.pt", model, opt, seg, step)
                    return False
        finally:
            batches.close()
            bar.close()
            if tb is not None:
                tb.close()
        if seg.phase == "anneal":
            self._save_eval_checkpoint(model, seg, step)
        self._save_state(self.run_dir / "state" / "resume.pt", model, opt, seg, step)
        self.final_model = model
        return True




def train_run(spec: RunSpec, run_dir: str | os.PathLike, **kwargs: Any) -> dict[str, Any]:
    """Train (or resume, or skip if done) one run; returns its status dict."""
    return Trainer(spec, run_dir, **kwargs).run()
