"""Data parallelism for the trainer: DDP (default) or FSDP2, micro-batches, batch prefetch.
Every rank builds the same model from the same seed; gradients are averaged by the wrapper's
own all-reduce (DDP) or reduce-scatter (FSDP2), only on a step's last micro-batch (``sync``).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import torch

from interpscale.models.types import Batch

PARALLEL = ("ddp", "fsdp")


class LossModule(torch.nn.Module):
    """``model.loss`` as ``forward`` so DDP / FSDP2 / torch.compile see one module call."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch: Batch, step: int):
        out = self.model.loss(batch, step)
        return out.total, out.parts


def wrap(model: torch.nn.Module, parallel: str, world: int, device: torch.device) -> torch.nn.Module:
    """The loss module, data-parallel over ``world`` ranks when world > 1 (``parallel`` is
    checked by the trainer)."""
    module = LossModule(model)
    if world == 1:
        return module
    if parallel == "ddp":
        ids = [device.index if device.index is not None else torch.cuda.current_device()] \
            if device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(module, device_ids=ids)
    from torch.distributed.fsdp import fully_shard

    from interpscale.models.protocol import find_blocks

    for block in find_blocks(model):  # one all-gather unit per transformer block (the model protocol)
        fully_shard(block)
    fully_shard(module)
    return module


def sync(module: torch.nn.Module, last: bool):
    """Context for one micro-batch's forward+backward: gradient sync only on the last."""
    if isinstance(module, torch.nn.parallel.DistributedDataParallel):
        return contextlib.nullcontext() if last else module.no_sync()
    if hasattr(module, "set_requires_gradient_sync"):  # FSDP2
        module.set_requires_gradient_sync(last)
    return contextlib.nullcontext()


def is_sharded(module: torch.nn.Module) -> bool:
    return hasattr(module, "set_requires_gradient_sync") and not isinstance(
        module, torch.nn.parallel.DistributedDataParallel)


def split(batch: Batch, n: int) -> list[Batch]:
    """``n`` equal micro-batches along dim 0 (host tensors), strided: micro-batch ``i`` holds
    rows ``i::n``, the rows rank ``i`` of ``n`` ranks would hold (``data.step_rows``), so one
    rank accumulating ``n`` micro-batches sums the same per-rank gradients DDP averages.
    Each trims the chunk-label axis to the chunks its rows use."""
    rows = batch.tokens.size(0)
    if rows % n:
        raise ValueError(f"{rows} rows do not split into {n} equal micro-batches")
    if n == 1:
        return [batch]
    dense = lambda x: None if x is None else x.contiguous()  # noqa: E731  (strided views -> own memory)
    out = []
    for i in range(n):
        s = slice(i, None, n)
        ids = None if batch.chunk_ids is None else batch.chunk_ids[s]
        labels = batch.chunk_labels
        if labels is not None:
            c = max(1, int(ids.max()) + 1) if ids is not None and ids.numel() else labels.size(1)
            labels = labels[s, : min(c, labels.size(1))]
        out.append(Batch(dense(batch.tokens[s]), dense(ids), dense(labels),
                         None if batch.valid is None else dense(batch.valid[s])))
    return out


def pin(batch: Batch) -> Batch:
    """Page-locked host copies, so ``.to(cuda, non_blocking=True)`` overlaps compute."""
    p = lambda x: None if x is None else x.pin_memory()  # noqa: E731
    return Batch(p(batch.tokens), p(batch.chunk_ids), p(batch.chunk_labels), p(batch.valid))


def seed_step(device: torch.device, seed: int) -> None:
    """Seed the generators a training step draws from: the CPU one, and on CUDA the current
    device's. ``torch.manual_seed`` would also queue lazy seeds for every uninitialised
    accelerator backend (CUDA, XPU, MTIA), each formatting a stack trace."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed(seed)


AHEAD_BYTES = 64 * 2**20  # host memory a hand-off's batches may take (two hand-offs are alive)
MAX_AHEAD = 32  # batches per hand-off at most


class Prefetcher:
    """Builds the batches of the next steps on a background thread while the current ones train.

    Batches go over in blocks (``ahead`` steps: as many as fit in ``AHEAD_BYTES``, at most
    ``MAX_AHEAD``), not one per step: waking the thread and handing the GIL back and forth every
    step cost 10-20% of a tiny CPU model's step, more than building its batch (issue 45,
    benchmarks/README.md). A batch is a pure function of its step, so the values are the same;
    an error building a batch is raised at that batch's step."""

    def __init__(self, make: Callable[[int], Batch], start: int, end: int):
        self.make, self.end, self.step = make, end, start
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch-prefetch")
        self.ahead, self.ready = 1, collections.deque()  # the first block, one batch, sizes the rest
        self.next = self._submit(start)

    def _submit(self, start: int):
        stop = min(start + self.ahead, self.end)
        self.submitted = stop
        return self.pool.submit(self._build, start, stop) if start < stop else None

    def _build(self, start: int, stop: int) -> list:
        out = []
        for s in range(start, stop):
            try:
                out.append(self.make(s))
            except Exception as exc:  # raised at its own step, after the batches before it trained
                out.append(exc)
                break
        return out

    def __next__(self) -> Batch:
        if not self.ready:
            if self.next is None:
                raise StopIteration
            block = self.next.result()
            if self.ahead == 1 and isinstance(block[0], Batch):
                self.ahead = max(1, min(MAX_AHEAD, AHEAD_BYTES // max(1, batch_bytes(block[0]))))
            self.ready.extend(block)
            self.next = self._submit(self.submitted) if not isinstance(block[-1], Exception) else None
        item = self.ready.popleft()
        if isinstance(item, Exception):
            raise item
        self.step += 1
        return item

    def close(self) -> None:
        if self.next is not None:
            self.next.cancel()
        self.pool.shutdown(wait=True)


def batch_bytes(batch: Batch) -> int:
    return sum(x.numel() * x.element_size() for x in (batch.tokens, batch.chunk_ids, batch.chunk_labels,
                                                       batch.valid) if x is not None)


def full_state(module: torch.nn.Module, model: torch.nn.Module, opt: torch.optim.Optimizer) -> tuple[dict, dict]:
    """(model state, optimizer state) as whole, unsharded tensors on CPU.  Collective
    under FSDP2 (every rank must call it); plain ``state_dict()`` otherwise."""
    if not is_sharded(module):
        return model.state_dict(), opt.state_dict()
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_optimizer_state_dict)

    o = StateDictOptions(full_state_dict=True, cpu_offload=True)
    msd = get_model_state_dict(module, options=o)
    osd = get_optimizer_state_dict(module, opt, options=o)
    return {k.removeprefix("model."): v for k, v in msd.items()}, osd


IMPLEMENTATION = ("fused", "foreach", "capturable", "differentiable")  # how AdamW steps, not what it holds


def load_optimizer(module: torch.nn.Module, opt: torch.optim.Optimizer, state: dict) -> None:
    """Load an optimizer state saved by :func:`full_state` (every rank holds the full one). The
    optimizer keeps its own implementation (``fused`` / ``foreach``): a state saved before the CPU
    used fused AdamW would otherwise bring the per-tensor loop back, and a resumed run would no
    longer equal the uninterrupted one (as the DCP path keeps the built param groups)."""
    if not is_sharded(module):
        impl = [{k: g[k] for k in IMPLEMENTATION if k in g} for g in opt.param_groups]
        opt.load_state_dict(state)
        for group, keep in zip(opt.param_groups, impl):
            group.update(keep)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(module, opt, optim_state_dict=state, options=StateDictOptions(full_state_dict=True))


def step_seed(seed: int, step: int, rank: int, micro: int) -> int:
    """The RNG seed of one micro-batch: a pure function of (seed, step, rank, micro-batch), so
    a resumed run redraws exactly the same masks / gates and ranks draw independent ones."""
    digest = hashlib.blake2b(f"{seed}/{step}/{rank}/{micro}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)
