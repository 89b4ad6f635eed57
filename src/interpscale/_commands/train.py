"""``interpscale train RUN_DIR [--spec spec.json]``: train (or resume) one run."""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="run directory (holds spec.json, or gets --spec copied in)")
    p.add_argument("--spec", help="a RunSpec JSON file (default: RUN_DIR/spec.json)")
    p.add_argument("--data-root", help="shared prepared-data cache (default: RUN_DIR/../_data)")
    p.add_argument("--device", help="cpu / cuda (default: cuda when available)")


def run(args: argparse.Namespace) -> int:
    from interpscale.orchestration import RunSpec, train_run

    try:
        spec = RunSpec.load(args.spec or args.run_dir)
        status = train_run(spec, args.run_dir, data_root=args.data_root, device=args.device)
    except (ValueError, PermissionError, FileNotFoundError) as exc:
        sys.stderr.write(f"interpscale train: {exc}\n")
        return 2
    sys.stdout.write(f"{spec.run_id}: {status.get('state')}\n")
    return 0
