"""The training loop (App. G recipe), resumable bit-exactly from its last saved state: segments
(App. I) of short loops whose logging is ``observe`` and saving ``checkpointer`` (docs/training.md)."""

from __future__ import annotations

import fcntl
import functools
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from interpscale._atomic import atomic_write_text
from interpscale.data.loaders import PreparedData, open_data, prepare_data
from interpscale.executors import stop_requested
from interpscale.models import build_model, get_family
from interpscale.models.protocol import DataFields, set_phase
from interpscale.models.types import SPECIAL_IDS, PhaseSchedule
from interpscale.orchestration.checkpointer import Checkpointer
from interpscale.orchestration.config import ObserveConfig, TrainConfig, split_settings, with_settings
from interpscale.orchestration.observe import TRACKERS, SegmentLog, Trackers, rewind_metrics
from interpscale.orchestration.outcome import planned_steps
from interpscale.orchestration.parallel import (Prefetcher, load_optimizer, pin, seed_step, split, step_seed,
                                                sync, wrap)
from interpscale.orchestration.rundir import ensure_writable, read_status, write_status
from interpscale.orchestration.spec import RunSpec, Segment, lr_at, segments
from interpscale.orchestration.teachers import attach_frozen
from interpscale.errors import ConfigError, UserError

log = logging.getLogger(__name__)


def prepare_run_data(spec: RunSpec, data_root: str | os.PathLike) -> tuple[Path, PreparedData]:
    """Prepare (or find) ``spec``'s data under ``data_root`` and check the run against it (a
    validation split, the vocabulary, the concepts) before any job starts."""
    path = prepare_data(spec.data, data_root, seq_len=spec.seq_len, vocab_size=spec.vocab_size,
                        val_fraction=spec.val_fraction, seed=spec.seed)
    data = PreparedData(path, spec.seq_len)
    if data.val.n_tokens == 0:
        raise UserError(f"{path}: the data has no validation split; prepare it with val_fraction > 0")
    model_kwargs(spec, data)  # a vocabulary / concept mismatch fails here
    return path, data


def init_run_dir(spec: RunSpec, run_dir: str | os.PathLike, data_root: str | os.PathLike | None = None) -> Path:
    """Create RUN_DIR with spec.json, tokenizer.json, concepts.json and data.json (where the
    prepared data lives and the sequence length its rows are cut at)."""
    run_dir = ensure_writable(run_dir)
    spec_path = run_dir / "spec.json"
    if spec_path.exists():
        old = RunSpec.load(spec_path)
        if old != spec:
            raise UserError(f"{run_dir} already holds a different run ({old.run_id}); use another directory")
    else:
        atomic_write_text(spec_path, json.dumps(spec.to_dict(), indent=1))
    if not (run_dir / "data.json").exists():
        data_dir, _ = prepare_run_data(spec, data_root or run_dir.parent / "_data")
        for name in ("tokenizer.json", "concepts.json"):
            shutil.copyfile(data_dir / name, run_dir / name)
        link = {"path": str(data_dir.resolve()), "seq_len": spec.seq_len}
        atomic_write_text(run_dir / "data.json", json.dumps(link))
    return run_dir


open_run_data = open_data  # the prepared data of a run directory (its data.json), cut at the run's seq_len


def model_kwargs(spec: RunSpec, data: PreparedData) -> dict[str, Any]:
    """Build arguments (``models.build_model``): what the data decides through ``data=``
    (``models.protocol.DataFields``: the spec's vocabulary, the data's concept count, its
    special-token ids where they differ from the defaults), then the spec's own overrides."""
    fields = DataFields(vocab_size=spec.vocab_size, n_concepts=data.n_concepts,
                        special_ids={k: v for k, v in data.special_ids.items() if SPECIAL_IDS.get(k) != v})
    kw = dict(spec.model_overrides)
    if kw.get("n_concepts", data.n_concepts) != data.n_concepts:
        raise UserError(f"model n_concepts={kw['n_concepts']} but the data has {data.n_concepts} concepts")
    if kw.get("vocab_size", spec.vocab_size) < data.vocab_size:
        raise UserError(f"model vocab_size={kw.get('vocab_size', spec.vocab_size)} < tokenizer vocabulary "
                        f"{data.vocab_size}")
    return {"data": fields, **kw}


def build_run_model(spec: RunSpec, data: PreparedData) -> torch.nn.Module:
    """A fresh model of ``spec`` for ``data`` (with CoCoMix's frozen teacher attached)."""
    model = build_model(spec.family, spec.size, base=spec.base_size or None, **model_kwargs(spec, data))
    return attach_frozen(model)  # CoCoMix teachers: loaded here, never by the model


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

    Data parallel over an initialised ``torch.distributed`` group: each rank takes its share
    of Table 24's global batch (``spec.batch_size`` rows whatever the world size), in
    micro-batches of ``micro_batch_tokens``; ``parallel``: ``"ddp"`` or ``"fsdp"`` (FSDP2).
    On CUDA: bf16 autocast, ``torch.compile`` of the loss (unless ``compile=False``; in
    ``compile_mode``), pinned batches; the CPU default is eager. Fused AdamW on both.
    ``save_every_s`` / ``save_every_steps``: the resume-state cadence (``Checkpointer``).
    Every setting is a field of ``config`` (:class:`~interpscale.orchestration.config.TrainConfig`).
    """

    def __init__(self, spec: RunSpec, run_dir: str | os.PathLike, config: TrainConfig | None = None, *,
                 observe: ObserveConfig | None = None, data_root: str | os.PathLike | None = None,
                 device: str | None = None, progress: bool = True, **settings: Any):
        """``config`` / ``observe``: the preset's ``[train]`` / ``[observe]`` sections whole;
        ``settings``: fields of either by name, replacing theirs (``micro_batch_tokens=...``)."""
        train_kw, observe_kw = split_settings(settings, TrainConfig, ObserveConfig)
        self.config = with_settings(config or TrainConfig(), **train_kw)
        self.observe = with_settings(observe or ObserveConfig(), **observe_kw)
        cfg = self.config
        self.spec, self.progress = spec, progress
        dist = torch.distributed
        self.rank, self.world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        self.device = _pick_device(device)
        self.compile = self.device.type == "cuda" if cfg.compile is None else bool(cfg.compile)
        if self.rank == 0:
            init_run_dir(spec, run_dir, data_root)
        self._barrier()
        self.run_dir = Path(run_dir)
        self.data = open_data(self.run_dir)
        if spec.batch_size % self.world:
            raise UserError(f"batch of {spec.batch_size} sequences does not split over {self.world} tasks")
        self.n_micro = _micro_batches(spec, spec.batch_size // self.world, self.world, cfg.micro_batch_tokens)
        self.concepts = get_family(spec.family).is_concept  # only concept families take labels
        # build: a partial, not the bound method, so no cycle keeps this trainer (and its lock) alive
        self.ckpt = Checkpointer(self.run_dir, spec, rank=self.rank, world=self.world, device=self.device,
                                 build=functools.partial(build_run_model, spec, self.data),
                                 save_every_s=cfg.save_every_s, save_every_steps=cfg.save_every_steps)

    def _lock(self) -> None:
        """One trainer per run directory: an flock held for the process lifetime (released
        by the kernel even on SIGKILL), so a relaunched sweep never trains a run twice at once."""
        if getattr(self, "_lock_file", None):
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

    # -- model -----------------------------------------------------------------------------
    def _setup(self, model, opt_state):
        """Move to the device, wrap for data parallelism, build AdamW (loading its state)."""
        model = model.to(self.device)
        module = wrap(model, self.config.parallel, self.world, self.device)
        s = self.spec
        # Fused AdamW (one kernel over all parameters) on CUDA and CPU alike: the demo's tiny models
        # are per-step-overhead bound, and the per-tensor loop was ~15% of a CPU step (benchmarks/README.md)
        opt = torch.optim.AdamW(param_groups(model, s.weight_decay), lr=s.lr, betas=s.betas, eps=s.eps,
                                fused=self.device.type in ("cuda", "cpu") or None)
        if opt_state is not None:
            load_optimizer(module, opt, opt_state)
        self.module = module
        self.loss_fn = torch.compile(module, mode=self.config.compile_mode) if self.compile else module
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.ckpt.bind(module, model, opt)
        return model, opt

    def _start(self, seg: Segment):
        """(model, optimizer, step) segment ``seg`` starts from: its resume state, the
        stable state its anneal branch starts from, or a fresh seeded model."""
        model, extra = self.ckpt.start(seg)
        if model is None:
            torch.manual_seed(self.spec.seed)
            return (*self._setup(build_run_model(self.spec, self.data), None), 0)
        model, opt = self._setup(model, extra.get("optimizer"))  # a .pt state holds the whole optimizer
        self.ckpt.restore(extra)  # a DCP state: this rank's shards into the wrapped model, then RNG
        step = int(extra["step"])
        if extra.get("segment") == seg.name:
            log.info("%s: resuming %s at step %d", self.spec.run_id, seg.name, step)
            if self.rank == 0:
                write_status(self.run_dir, "running",
                             resumed_at=read_status(self.run_dir).get("resumed_at", []) + [step])
        return model, opt, step

    # -- loop ------------------------------------------------------------------------------
    def run(self, stop_at_step: int | None = None) -> dict[str, Any]:
        """Train every unfinished segment.  ``stop_at_step`` interrupts the segment in
        progress once that step is done and saved (tests use it to simulate preemption)."""
        status = read_status(self.run_dir)
        if status.get("state") == "done":
            return status
        if self.rank == 0:
            self._lock()
            write_status(self.run_dir, "running", run_id=self.spec.run_id, host=os.uname().nodename,
                         started=status.get("started", time.time()), attempts=status.get("attempts", 0) + 1,
                         world=self.world, micro_batches=self.n_micro, device=str(self.device))
        if self.compile:
            # Dynamo keeps at most 8 graphs per function and silently runs eager past that; a
            # job that trains several sizes in one process would hit it, so each run starts clean
            torch.compiler.reset()
        named = set(self.observe.trackers)
        if unknown := named - set(TRACKERS):
            raise ConfigError(f"[observe] trackers: unknown {sorted(unknown)}; expected some of {list(TRACKERS)}")
        named |= {"tensorboard"} if self.observe.tensorboard else set()
        self.trackers = Trackers(self.run_dir, self.spec, named) if self.rank == 0 and named else None
        try:
            return self._run_segments(status, stop_at_step)
        finally:
            if self.trackers is not None:
                self.trackers.close(finished=read_status(self.run_dir).get("state") == "done")

    def _run_segments(self, status: dict[str, Any], stop_at_step: int | None) -> dict[str, Any]:
        self.done = done = set(status.get("segments_done", []))
        for seg in segments(self.spec):
            if seg.name in done:
                continue
            self._barrier()  # rank 0's files for this segment are complete before anyone reads them
            model, opt, step = self._start(seg)
            if self.rank == 0:  # rows logged past the state we restart from are logged again
                rewind_metrics(self.run_dir / "metrics.jsonl", done, seg.name, step)
                if self.trackers is not None and step > seg.start:  # rows a tracker was not given
                    self.trackers.replay(self.run_dir / "metrics.jsonl", seg.name, step)
                self._progress(seg, step)
            if not self._train_segment(model, opt, seg, step, stop_at_step):
                return read_status(self.run_dir)
            done.add(seg.name)
            if self.rank == 0:
                write_status(self.run_dir, "running", segments_done=sorted(done))
        self.ckpt.wait()  # the last asynchronous save complete on every rank
        self._barrier()
        if self.rank == 0:
            self.ckpt.finish()
            planned = planned_steps(self.spec)
            status = write_status(self.run_dir, "done", step=self.spec.steps, segment=None, steps_done=planned,
                                  steps_planned=planned, finished=time.time())
        return status

    def _progress(self, seg: Segment, step: int) -> None:
        """status.json's ``step`` and ``segment`` (where training is), ``steps_done`` (steps
        trained over every segment) and ``steps_planned`` (lead rank)."""
        done = sum(s.length for s in segments(self.spec) if s.name in self.done) + step - seg.start
        write_status(self.run_dir, "running", step=step, segment=seg.name, steps_done=done,
                     steps_planned=planned_steps(self.spec))

    def _train_segment(self, model, opt, seg: Segment, step: int, stop_at_step: int | None) -> bool:
        """Steps ``step`` .. ``seg.end``; False when stopped early (state saved)."""
        _set_phase(model, seg, self.spec)
        model.train()
        check = getattr(model, "check_batch", None)
        batches = Prefetcher(lambda s: self._host_batch(s, check), step, seg.end)
        logs = SegmentLog(self.run_dir, self.spec, seg, step, device=self.device, world=self.world,
                          lead=self.rank == 0, progress=self.progress, trackers=self.trackers)
        try:
            while step < seg.end:
                lr = lr_at(self.spec, seg, step)
                with logs.waiting():
                    batch = next(batches)
                values = self._step(opt, batch, step, lr)
                step += 1
                logged = logs.step(step, lr, values)
                if logged and self.rank == 0:
                    self._progress(seg, step)
                self.ckpt.after_step(seg, step, logged)
                if stop_at_step is not None and stop_at_step <= step < seg.end or \
                        self.world == 1 and step < seg.end and stop_requested():  # a cancelled local job
                    self.ckpt.save_state(seg, step, wait=True)
                    if self.rank == 0:
                        self._progress(seg, step)
                    return False
        finally:
            batches.close()
            logs.close()
        self.ckpt.end_segment(seg, step)
        return True

    def _step(self, opt, batch, step: int, lr: float) -> dict[str, Any]:
        """One optimizer step over this rank's rows, accumulated over equal micro-batches
        (their mean loss is the batch's); returns the step's loss, parts and gradient norm
        as device tensors (no host sync)."""
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.device.type == "cuda")
        n = self.n_micro
        # the mean over micro-batches; with one, x / 1 is x: skipping its ops is bitwise the same (issue 45)
        mean = (lambda x: x) if n == 1 else (lambda x: x / n)  # noqa: E731
        total, parts = None, {}
        for i, mb in enumerate(split(batch, n)):
            seed_step(self.device, step_seed(self.spec.seed, step, self.rank, i))  # noise / gating draws
            with sync(self.module, i == n - 1):  # gradients all-reduced on the last only
                with autocast:
                    loss, p = self.loss_fn(mb.to(self.device), step)
                mean(loss).backward()
            total = _add(total, mean(loss.detach()))
            for k, v in p.items():
                parts[k] = _add(parts.get(k), mean(v.detach() if torch.is_tensor(v) else v))
        gnorm = torch.nn.utils.clip_grad_norm_(self.params, self.spec.grad_clip)
        opt.step()
        return {"loss": total, "grad_norm": gnorm, **parts}

    def _host_batch(self, step: int, check=None):
        """This rank's rows of global batch ``step`` on the host (pinned on CUDA), validated
        by ``check`` (the model's ``check_batch``); runs on the prefetch thread."""
        spec = self.spec
        batch = self.data.train.batch(step, spec.batch_size, seed=spec.seed, rank=self.rank, world=self.world,
                                      concepts=self.concepts)
        if check is not None:  # host-side value checks, off the training thread
            check(batch)
        return pin(batch) if self.device.type == "cuda" else batch


def _add(acc, x):
    """``acc + x``, ``x`` itself at the first term (no ``0.0 + x`` op per value and step)."""
    return x if acc is None else acc + x


def _pick_device(device: str | None) -> torch.device:
    """``device``, else this process's GPU (``cuda:<LOCAL_RANK>``) when there is one, else the CPU."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda":
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) if dev.index is None else dev.index)
        torch.cuda.set_device(dev)
    return dev


def _micro_batches(spec: RunSpec, rows: int, world: int, micro_batch_tokens: int | None) -> int:
    """Micro-batches per step: this rank's ``rows`` cut into ``micro_batch_tokens`` each."""
    if micro_batch_tokens is None:
        return 1
    micro_rows = max(1, int(micro_batch_tokens) // spec.seq_len)
    if int(micro_batch_tokens) % spec.seq_len or rows % micro_rows:
        raise UserError(
            f"micro_batch_tokens={micro_batch_tokens} must be a multiple of seq_len={spec.seq_len} and "
            f"divide this rank's {rows} rows x {spec.seq_len} tokens ({world} ranks, global "
            f"batch {spec.batch_tokens} tokens)")
    return rows // min(micro_rows, rows)


def _set_phase(model, seg: Segment, spec: RunSpec) -> None:
    """The model's phase schedule: Table 25 ramps over T_max = the stable run's length;
    Table 26 ramps over an anneal branch's decay, counted from its first step."""
    if seg.phase == "stable":
        set_phase(model, PhaseSchedule("stable", max_steps=max(1, spec.stable_steps)))
    else:
        set_phase(model, PhaseSchedule("anneal", max_steps=max(1, seg.start), anneal_steps=seg.length,
                                       anneal_start=seg.start))


def train_run(spec: RunSpec, run_dir: str | os.PathLike, **kwargs: Any) -> dict[str, Any]:
    """Train (or resume, or skip if done) one run; returns its status dict."""
    return Trainer(spec, run_dir, **kwargs).run()
