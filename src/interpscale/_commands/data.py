"""``interpscale data prepare SOURCE --out DIR``: tokenize a corpus into memory-mapped shards;
``interpscale data info DIR``: what a prepared directory holds."""

from __future__ import annotations

import argparse
import json
import sys

from interpscale._commands.options import count, existing_file, fraction, given, option, out_dir
from interpscale.data import open_data
from interpscale.data.prepare import MODES, make_request, prepare
from interpscale.data.sources import FORMATS, FORMATS_HELP
from interpscale.errors import UserError

_OUTPUT_HELP = """\
output DIR: {train,val}.tokens.bin (np.memmap, uint16/uint32), CSR concept labels,
tokenizer.json, concepts.json, meta.json.  Use it in a sweep TOML as
  [data]
  kind = "prepared"
  path = "DIR"
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    pr = sub.add_parser("prepare", help="tokenize files into memory-mapped shards (resumable)",
                        description="Stream JSONL / Parquet / plain-text files (globs, gzip) into token shards "
                                    "that np.memmap opens; rerun the same command to resume.",
                        epilog=FORMATS_HELP + _OUTPUT_HELP,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    pr.add_argument("sources", nargs="+", metavar="SOURCE", help="input files or glob patterns (quote globs)")
    pr.add_argument("--out", required=True, type=out_dir, metavar="DIR", help="output data directory")
    pr.add_argument("--format", choices=FORMATS, help="input format (default: by extension)")
    pr.add_argument("--document-per-file", action="store_true",
                    help="each file is one plain-text document, never split at blank lines (code corpora; "
                         "any extension)")
    pr.add_argument("--tokenizer", type=existing_file, metavar="PATH", help="a Hugging Face tokenizer.json to use (special tokens "
                                                         "[PAD] [EOS] [EOC] [MASK] are added if missing)")
    option(pr, "--vocab-size", make_request, type=count, help="vocabulary of the trained BPE")
    option(pr, "--tokenizer-sample-bytes", make_request, "sample_bytes", type=count,
           help="text the BPE is trained on, spread over the inputs")
    pr.add_argument("--concepts", type=existing_file, metavar="JSON", help="concepts.json fixing the concept cards and their order "
                                                        "(default: the sorted labels found in the data)")
    option(pr, "--val-fraction", make_request, type=fraction, help="held-out share of documents, by document hash")
    option(pr, "--seed", make_request, type=int, help="key of the validation-split hash")
    option(pr, "--executor", prepare, choices=MODES,
           help="inline: this process; local / slurm: submitit jobs, one array task per input file; "
                "debug: those jobs run in this process")
    option(pr, "--workers", prepare, type=count,
           help="inline: processes tokenizing input files side by side (1: one process, multi-threaded encoder)")
    option(pr, "--max-parallel", prepare, type=count, help="local / slurm: tasks running at once")
    pr.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                    help="submitit SLURM parameter, e.g. --slurm slurm_partition=cpu --slurm timeout_min=120")
    info = sub.add_parser("info", help="summarise a prepared data directory")
    info.add_argument("dir", metavar="DIR")


def _slurm_params(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"--slurm expects KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def run(args: argparse.Namespace) -> int:
    if args.verb == "info":
        data = open_data(args.dir)
        sys.stdout.write(f"{args.dir}: vocab {data.vocab_size}, {data.n_concepts} concepts, special ids "
                         f"{data.special_ids}\n")
        for s, v in data.meta.get("splits", {}).items():
            sys.stdout.write(f"  {s}: {v['tokens']:,} tokens, {v['docs']:,} documents, {v['chunks']:,} chunks, "
                             f"{v['labels']:,} labels\n")
        return 0
    out = prepare(args.sources, args.out, slurm=_slurm_params(args.slurm), progress=True, fmt=args.format,
                  tokenizer=args.tokenizer, concepts=args.concepts, document_per_file=args.document_per_file,
                  **given(args, "executor", "max_parallel", "workers", "vocab_size", "val_fraction", "seed",
                          sample_bytes="tokenizer_sample_bytes"))
    meta = json.loads((out / "meta.json").read_text())
    sp = meta["splits"]
    sys.stdout.write(f"{out}: {sp['train']['tokens']:,} train / {sp['val']['tokens']:,} val tokens, "
                     f"{meta['n_concepts']} concepts\n")
    return 0
