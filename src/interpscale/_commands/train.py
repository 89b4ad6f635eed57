"""``interpscale train RUN_DIR [--spec spec.json]``: train (or resume) one run.

Under ``torchrun`` (RANK / WORLD_SIZE / LOCAL_RANK set, world > 1) the processes form one
data-parallel group: ``torchrun --nproc-per-node 8 -m interpscale.cli train RUN_DIR``.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from interpscale._commands.options import given, option
from interpscale.orchestration import RunSpec, train_run
from interpscale.orchestration.parallel import PARALLEL
from interpscale.orchestration.trainer import Trainer


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="run directory (holds spec.json, or gets --spec copied in)")
    p.add_argument("--spec", help="a RunSpec JSON file (default: RUN_DIR/spec.json)")
    p.add_argument("--data-root", help="shared prepared-data cache (default: RUN_DIR/../_data)")
    p.add_argument("--device", help="cpu / cuda (default: cuda:<local rank> when available)")
    p.add_argument("--micro-batch-tokens", type=int,
                   help="tokens per rank per micro-batch (gradient accumulation); the global batch is unchanged")
    option(p, "--parallel", Trainer, choices=PARALLEL, help="data parallelism across ranks")
    p.add_argument("--no-compile", action="store_true", help="do not torch.compile the loss (CUDA default: on)")


def run(args: argparse.Namespace) -> int:
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.distributed.is_initialized()
    if distributed:  # torchrun's env:// variables
        torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    try:
        spec = RunSpec.load(args.spec or args.run_dir)
        status = train_run(spec, args.run_dir, data_root=args.data_root, device=args.device,
                           micro_batch_tokens=args.micro_batch_tokens, compile=False if args.no_compile else None,
                           **given(args, "parallel"))
    finally:
        if distributed:
            torch.distributed.destroy_process_group()
    sys.stdout.write(f"{spec.run_id}: {status.get('state')}\n")
    return 0
