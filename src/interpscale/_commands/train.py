"""``interpscale train RUN_DIR [--spec spec.json]``: train (or resume) one run.

Under ``torchrun`` (RANK / WORLD_SIZE / LOCAL_RANK set, world > 1) the processes form one
data-parallel group: ``torchrun --nproc-per-node 8 -m interpscale.cli train RUN_DIR``.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from interpscale._commands.options import existing_file
from interpscale.orchestration import RunSpec, train_run
from interpscale.orchestration.config import TrainConfig, add_flags, flag_values


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory (holds spec.json, or gets --spec copied in)")
    p.add_argument("--spec", type=existing_file, help="a RunSpec JSON file (default: RUN_DIR/spec.json)")
    p.add_argument("--data-root", help="shared prepared-data cache (default: RUN_DIR/../_data)")
    p.add_argument("--device", help="cpu / cuda (default: cuda:<local rank> when available)")
    add_flags(p, TrainConfig)  # --micro-batch-tokens, --parallel, --compile/--no-compile, ... (TrainConfig's fields)


def run(args: argparse.Namespace) -> int:
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.distributed.is_initialized()
    if distributed:  # torchrun's env:// variables
        torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    try:
        spec = RunSpec.load(args.spec or args.run_dir)
        status = train_run(spec, args.run_dir, config=TrainConfig(**flag_values(args, TrainConfig)),
                           data_root=args.data_root, device=args.device)
    finally:
        if distributed:
            torch.distributed.destroy_process_group()
    sys.stdout.write(f"{spec.run_id}: {status.get('state')}\n")
    return 0
