"""Training observability: metrics summed on the device and read back (one host sync) every
``log_every`` steps, throughput/MFU/memory, the metrics file, TensorBoard and the progress bar
(docs/training.md)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator

import torch

from interpscale._atomic import atomic_write_text
from interpscale.orchestration.runtime import device_peak_flops
from interpscale.orchestration.outcome import PLAIN_EVERY_S
from interpscale.orchestration.rundir import append_jsonl

_log = logging.getLogger(__name__)


class StepMeter:
    """Window accumulator between two metrics records."""

    def __init__(self, device: torch.device, *, tokens_per_step: int, flops_per_token: float, world: int):
        self.tokens_per_step, self.flops_per_token, self.world = tokens_per_step, flops_per_token, world
        self.peak = device_peak_flops(device)  # None on CPU: MFU omitted
        self.t_start = time.monotonic()
        self._reset()

    def _reset(self) -> None:
        self.sums: dict[str, torch.Tensor | float] = {}
        self.n, self.data_wait, self.t0 = 0, 0.0, time.monotonic()

    def add(self, values: dict[str, Any]) -> None:
        """Add one step's scalars (tensors stay on the device; no sync)."""
        for k, v in values.items():
            v = v.detach().float() if torch.is_tensor(v) else float(v)
            self.sums[k] = self.sums[k] + v if k in self.sums else v
        self.n += 1

    def record(self) -> dict[str, float]:
        """Means over the window plus wall time, tokens/s, MFU and peak memory; resets."""
        rec = {k: float(v) / max(1, self.n) for k, v in self.sums.items()}  # the one host sync
        now = time.monotonic()
        dt = max(now - self.t0, 1e-9)
        tok_s = self.tokens_per_step * self.n / dt
        rec.update(wall_s=now - self.t_start, step_time_s=dt / max(1, self.n), tokens_per_s=tok_s,
                   data_wait_frac=self.data_wait / dt)
        if self.peak:  # Eq. 23/24 model FLOPs achieved / dense bf16 peak of all ranks' GPUs
            rec["mfu"] = self.flops_per_token * tok_s / (self.peak * self.world)
        rec.update(peak_memory())
        self._reset()
        return rec


def peak_memory() -> dict[str, float]:
    """Peak accelerator memory of this process (CUDA), else peak host RSS, in GiB."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return {"peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return {"peak_rss_gib": rss / (2**30 if sys.platform == "darwin" else 2**20)}


def rewind_metrics(path: Path, done: Iterable[str], segment: str, step: int) -> int:
    """Cut ``metrics.jsonl`` back to the rows of finished segments (``done``) and of
    ``segment`` up to ``step`` (the rest was logged past the state training restarts from
    and is logged again); rewritten atomically when something goes; the rows dropped."""
    path, done = Path(path), set(done)
    lines = path.read_text().splitlines() if path.exists() else []
    keep = []
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # a line torn by a kill mid-write
            continue
        if rec.get("segment") in done or (rec.get("segment") == segment and rec.get("step", 0) <= step):
            keep.append(line)
    if len(keep) < len(lines):
        atomic_write_text(path, "".join(f"{x}\n" for x in keep))
    return len(lines) - len(keep)


class SegmentLog:
    """One segment's logging on every rank: the metrics window (:class:`StepMeter`), and on
    the lead rank ``metrics.jsonl``, a tqdm bar and the run's :class:`Trackers` (TensorBoard,
    W&B, MLflow)."""

    def __init__(self, run_dir: Path, spec: Any, segment: Any, step: int, *, device: torch.device, world: int,
                 lead: bool, progress: bool, trackers: "Trackers | None" = None):
        from tqdm.auto import tqdm

        self.spec, self.segment, self.lead, self.trackers = spec, segment, lead, trackers
        self.metrics = Path(run_dir) / "metrics.jsonl"
        self.meter = StepMeter(device, tokens_per_step=spec.batch_tokens, flops_per_token=spec.flops_per_token,
                               world=world)
        # a bar on a terminal; elsewhere (a SLURM log, CI, a file) a plain line a minute and at the end
        self.plain = progress and lead and not sys.stderr.isatty()
        self.bar = tqdm(total=segment.length, initial=step - segment.start, desc=f"{spec.run_id} {segment.name}",
                        disable=not progress or not lead or self.plain, leave=False, mininterval=2.0)
        self.plain_at = time.monotonic()

    def _plain_line(self, step: int, rec: dict[str, Any]) -> None:
        now = time.monotonic()
        if self.plain and (now - self.plain_at >= PLAIN_EVERY_S or step == self.segment.end):
            self.plain_at = now
            seg = self.segment
            sys.stderr.write(f"{self.spec.run_id} {seg.name}: step {step - seg.start}/{seg.length}, "
                             f"loss {rec.get('loss', float('nan')):.4g}\n")
            sys.stderr.flush()

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Time spent waiting for data (reported as ``data_wait_frac``)."""
        t0 = time.monotonic()
        yield
        self.meter.data_wait += time.monotonic() - t0

    def step(self, step: int, lr: float, values: dict[str, Any]) -> bool:
        """Add one step's values; at log steps (every ``log_every`` and the segment's last)
        write the window's record.  Returns whether this was a log step."""
        self.bar.update(1)
        self.meter.add(values)
        if step % self.spec.log_every and step != self.segment.end:
            return False
        rec = self.meter.record()  # every rank: the window's one host sync
        if self.lead:
            rec = {"step": step, "segment": self.segment.name, "lr": lr, **rec,
                   "tokens": step * self.spec.batch_tokens, "time": time.time()}
            append_jsonl(self.metrics, rec)
            self._plain_line(step, rec)
            if self.trackers is not None:
                self.trackers.log(self.segment.name, step, rec)
        return True

    def close(self) -> None:
        self.bar.close()


# -- trackers --------------------------------------------------------------------------------------
TRACKERS = ("tensorboard", "wandb", "mlflow")
TRACKER_IDS = "trackers.json"  # RUN_DIR/trackers.json: {tracker: run id}, so a resumed run continues it
TRACKER_LOGGED = "trackers_logged.json"  # {tracker: {segment: the last step it was given}}


def _read_json(path: Path) -> dict:
    try:
        out = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def wandb_history(path: Path) -> list[dict]:
    """The history rows ({key: value}) of one offline W&B run file (``run-<id>.wandb``: a
    LevelDB-style log of protobuf records in 32 KiB blocks), up to a record cut by a kill."""
    from wandb.proto import wandb_internal_pb2

    rows, data, pos, buf = [], Path(path).read_bytes(), 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7]) if left >= 7 else (0, 0)
        if left < 7 or (length == 0 and kind == 0):  # block padding
            pos += left
            continue
        if pos + 7 + length > len(data):  # a record cut by the kill
            break
        buf, pos = buf + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a full record or a record's last fragment
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(buf)
            buf = b""
            if rec.WhichOneof("record_type") == "history":
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
    return rows


def wandb_offline_steps(wandb_dir: Path, run_id: str) -> dict[str, int]:
    """{segment: the last ``train_step`` with a ``<segment>/...`` value} in the offline W&B files
    of ``run_id`` under ``wandb_dir`` (``wandb_history``). W&B writes them through a buffer a kill
    loses, so they, not what was sent, say what W&B holds; each attempt's file holds a prefix of
    what it was given."""
    last: dict[str, int] = {}
    for f in sorted(Path(wandb_dir).glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb")):
        for items in wandb_history(f):
            if "train_step" in items:
                step = int(items["train_step"])
                for seg in {k.split("/", 1)[0] for k in items if "/" in k}:
                    last[seg] = max(step, last.get(seg, -1))
    return last


class Trackers:
    """The experiment trackers of a run: TensorBoard (RUN_DIR/tb, so ``tensorboard --logdir
    SWEEP`` lists every run), W&B and MLflow (one tracker run per training run, its id in
    RUN_DIR/trackers.json); offline / local by default, and a tracker that fails is dropped
    with one warning (docs/training.md, Trackers).

    Each tracker gets every (segment, step) once: after a record is written (TensorBoard
    flushed, MLflow committed) its step is stored in RUN_DIR/trackers_logged.json (offline
    W&B: read back from its files, :func:`wandb_offline_steps`), and a resumed run gives a
    tracker the rows of metrics.jsonl it lacks, then only the steps past the last one it holds
    (training resumes bit-exactly: the steps redone after a kill carry the values it holds)."""

    def __init__(self, run_dir: str | Path, spec: Any, names: Iterable[str]):
        self.run_dir, self.spec = Path(run_dir), spec
        self.ids: dict[str, str] = _read_json(self.run_dir / TRACKER_IDS)
        self.logged: dict[str, dict[str, int]] = _read_json(self.run_dir / TRACKER_LOGGED)
        self.live: dict[str, Any] = {}
        for name in TRACKERS:
            if name in set(names):
                self._guard(name, getattr(self, f"_open_{name}"))
        if self.live.keys() - {"tensorboard"}:
            atomic_write_text(self.run_dir / TRACKER_IDS, json.dumps(self.ids, sort_keys=True))

    def _guard(self, name: str, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:  # no network, bad key, missing package, full disk: never fatal
            _log.warning("tracker %s disabled for run %s: %s: %s", name, self.spec.run_id, type(exc).__name__,
                         str(exc).splitlines()[0][:200] if str(exc) else "")
            self.live.pop(name, None)

    def _open_tensorboard(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.live["tensorboard"] = SummaryWriter(log_dir=str(self.run_dir / "tb"))

    def _open_wandb(self) -> None:
        import wandb

        run_id = self.ids.get("wandb") or uuid.uuid4().hex[:12]
        d = self.run_dir / "wandb"
        d.mkdir(parents=True, exist_ok=True)
        run = wandb.init(project=os.environ.get("WANDB_PROJECT", "interpscale"), id=run_id, resume="allow",
                         name=self.spec.run_id, dir=str(d), config=self.spec.to_dict(),
                         mode=os.environ.get("WANDB_MODE", "offline"),
                         settings=wandb.Settings(console="off", silent=True, x_disable_stats=True))
        self.ids["wandb"] = run.id
        self.live["wandb"] = run
        if run.settings.mode == "offline":  # what the files hold, not what a killed attempt sent
            try:
                self.logged["wandb"] = wandb_offline_steps(d, run.id)
            except Exception as exc:  # another W&B file format: the steps it was given stand
                _log.warning("run %s: W&B offline files not read back (%s: %s); steps a kill cut from them stay "
                             "missing", self.spec.run_id, type(exc).__name__, exc)

    def _open_mlflow(self) -> None:
        from mlflow.tracking import MlflowClient

        # a local store in the run directory: one SQLite file (MLflow's ./mlruns file store is frozen)
        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(self.run_dir / 'mlflow.db').resolve()}"
        client = MlflowClient(tracking_uri=uri)
        run_id = self.ids.get("mlflow")
        if run_id is None:
            exp = client.get_experiment_by_name("interpscale")
            exp_id = exp.experiment_id if exp else client.create_experiment("interpscale")
            run_id = client.create_run(exp_id, run_name=self.spec.run_id).info.run_id
            for k, v in sorted(self.spec.to_dict().items()):
                client.log_param(run_id, k, json.dumps(v)[:6000] if not isinstance(v, str) else v[:6000])
        else:
            client.update_run(run_id, status="RUNNING")
        self.ids["mlflow"] = run_id
        self.live["mlflow"] = client

    def _log_tensorboard(self, step: int, scalars: dict[str, float]) -> None:
        writer = self.live["tensorboard"]
        for k, v in scalars.items():
            writer.add_scalar(k, v, step)
        writer.flush()  # on disk before its step is counted as given

    def _log_wandb(self, step: int, scalars: dict[str, float]) -> None:
        self.live["wandb"].log({**scalars, "train_step": step})

    def _log_mlflow(self, step: int, scalars: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k.replace("@", "-"), v, now, step) for k, v in scalars.items()]
        self.live["mlflow"].log_batch(self.ids["mlflow"], metrics)

    def log(self, segment: str, step: int, rec: dict[str, Any]) -> None:
        """One metrics.jsonl record, its numbers under ``<segment>/<name>`` at ``step``, to each
        tracker not yet given this segment's ``step``."""
        scalars = {f"{segment}/{k}": float(v) for k, v in rec.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}
        given = False
        for name in list(self.live):
            if step > self.logged.get(name, {}).get(segment, -1):
                self._guard(name, getattr(self, f"_log_{name}"), step, scalars)
                if name in self.live:
                    self.logged.setdefault(name, {})[segment] = step
                    given = True
        if given:
            atomic_write_text(self.run_dir / TRACKER_LOGGED, json.dumps(self.logged, sort_keys=True))

    def replay(self, metrics: Path, segment: str, upto: int) -> None:
        """Give each tracker the metrics.jsonl records of ``segment`` up to step ``upto`` (a
        resumed segment's) that it was not given (a tracker named only now, or one that failed)."""
        if not self.live or not Path(metrics).exists():
            return
        for line in Path(metrics).read_text().splitlines():
            rec = json.loads(line)
            if rec.get("segment") == segment and rec.get("step", 0) <= upto:
                self.log(segment, rec["step"], rec)

    def close(self, finished: bool = False) -> None:
        if "tensorboard" in self.live:
            self._guard("tensorboard", self.live.pop("tensorboard").close)
        if "wandb" in self.live:
            self._guard("wandb", self.live.pop("wandb").finish)
        if "mlflow" in self.live:
            client = self.live.pop("mlflow")
            self._guard("mlflow", client.set_terminated, self.ids["mlflow"], "FINISHED" if finished else "KILLED")
