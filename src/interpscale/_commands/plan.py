"""``interpscale plan --preset P``: print the dry-run table of an IsoFLOP sweep."""

from __future__ import annotations

import argparse
import contextlib
import sys

from interpscale._commands.options import count, positive_float, share  # checked before any work (docs/errors.md)

PRESET_HELP = ("preset name (configs/<name>.toml, e.g. demo, demo-quick, paper) or a .toml path; required "
               "(the embedded demo end to end is `interpscale demo`)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from interpscale.orchestration.runtime import PLAN_DEVICES

    p.add_argument("--preset", required=True, help=PRESET_HELP)
    p.add_argument("--families", nargs="+", help="override the preset's families")
    p.add_argument("--sizes", nargs="+", help="override the preset's sizes (all planned, infeasible flagged)")
    p.add_argument("--slices", nargs="+", type=positive_float, help="slice targets C shared by all families")
    p.add_argument("--seq-len", type=count)
    p.add_argument("--batch-tokens", type=count)
    p.add_argument("--tolerance", type=positive_float)
    p.add_argument("--device", choices=sorted(PLAN_DEVICES),
                   help="runtime table: dense bf16 peak x --mfu (cpu: a timed matmul); default h100 for GPU "
                        "presets, else cpu")
    p.add_argument("--mfu", type=share, help="model FLOPs utilisation assumed (default: the device's, "
                   + ", ".join(f"{k} {v['mfu']:.2f}" for k, v in PLAN_DEVICES.items()) + ")")
    p.add_argument("--flops-per-s", type=positive_float, help="sustained FLOP/s for the runtime estimate (overrides --device)")
    p.add_argument("--all", action="store_true", help="also list skipped / infeasible points")
    p.add_argument("--csv", help="write the dry-run table to this CSV")
    p.add_argument("--unique-tokens", type=positive_float, metavar="U",
                   help="unique-token budget: add each point's epochs and their loss cost (data-constrained law, "
                        "Muennighoff et al. 2023; docs/laws.md)")
    p.add_argument("--retime", action="store_true",
                   help="time the training steps again (default: this machine's stored timings, so that `plan` and "
                        "`sweep launch` show one estimate)")
    p.add_argument("--force", action="store_true",
                   help="plan runs that would train for more than a year at the estimated speed (refused otherwise)")
    p.add_argument("--repetition-law", metavar="FIT.json",
                   help="with --unique-tokens: the law 'interpscale fit law data-constrained --out' saved "
                        "(default: the authors' published C4 law)")


def run(args: argparse.Namespace) -> int:
    from interpscale.orchestration import PlanOptions, Preset, plan
    from interpscale.orchestration.planner import corpus_tokens
    from interpscale.orchestration.runtime import estimate_line, retiming

    with retiming() if args.retime else contextlib.nullcontext():
        tree = Preset.load(args.preset, families=args.families, sizes=args.sizes, slices=args.slices,
                           seq_len=args.seq_len, batch_tokens=args.batch_tokens, tolerance=args.tolerance)
        pl = plan(tree, PlanOptions(flops_per_s=args.flops_per_s, device=args.device, mfu=args.mfu, strict=False,
                                    all_sizes=args.sizes is not None, force=args.force))
    if not args.all:
        pl.table = pl.table[pl.table.status == "ok"]
    sys.stdout.write(pl.summary() + "\n" + estimate_line(pl.estimate) + "\n")
    # the loss cost of the epochs this grid implies (scaling.laws): on --unique-tokens, else
    # on the prepared corpus when the preset trains on one
    unique = args.unique_tokens if args.unique_tokens is not None else (
        corpus_tokens(pl.config.data) if pl.config is not None else None)
    if unique is not None:
        from interpscale.scaling.laws import plan_epoch_costs, read_data_constrained

        law = read_data_constrained(args.repetition_law) if args.repetition_law else None
        pl.table, text = plan_epoch_costs(pl.table.drop(columns="epochs", errors="ignore"), unique, law)
        sys.stdout.write(text + "\n")
    if args.csv:
        pl.table.to_csv(args.csv, index=False)
    return 0
