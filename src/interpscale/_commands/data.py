"""``interpscale data prepare SOURCE... --out DIR``: tokenize a corpus into memory-mapped shards.

``interpscale data info DIR`` prints what a prepared directory holds.
"""

from __future__ import annotations

import argparse
import json
import sys

_FORMATS_HELP = """\
input formats (by extension, .gz allowed; or --format):
  .jsonl  one document per line: {"chunks": [{"text": ..., "concepts": [label, ...]}, ...]}
          or {"text": ..., "concepts": [...]}  (concepts optional)
  .parquet  one chunk per row: column text, optional concepts (list or "a,b") and doc_id
          (consecutive rows with one doc_id are one document; without it a row is a document)
  .txt    plain text, documents separated by blank lines, no concepts
output DIR: {train,val}.tokens.bin (np.memmap, uint16/uint32), CSR concept labels,
tokenizer.json, concepts.json, meta.json.  Use it in a sweep TOML as
  [data]
  kind = "prepared"
  path = "DIR"
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    pr = sub.add_parser("prepare", help="tokenize files into memory-mapped shards (resumable)",
                        description="Stream JSONL / Parquet / plain-text files (globs, gzip) into token shards "
                                    "that np.memmap opens; rerun the same command to resume.",
                        epilog=_FORMATS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    pr.add_argument("sources", nargs="+", metavar="SOURCE", help="input files or glob patterns (quote globs)")
    pr.add_argument("--out", required=True, metavar="DIR", help="output data directory")
    pr.add_argument("--format", choices=("jsonl", "parquet", "text"), help="input format (default: by extension)")
    pr.add_argument("--tokenizer", metavar="PATH", help="a Hugging Face tokenizer.json to use (special tokens "
                                                         "[PAD] [EOS] [EOC] [MASK] are added if missing)")
    pr.add_argument("--vocab-size", type=int, default=32768, help="vocabulary of the trained BPE (default 32768)")
    pr.add_argument("--tokenizer-sample-bytes", type=int, default=100_000_000,
                    help="text the BPE is trained on, spread over the inputs (default 1e8)")
    pr.add_argument("--concepts", metavar="JSON", help="concepts.json fixing the concept cards and their order "
                                                        "(default: the sorted labels found in the data)")
    pr.add_argument("--val-fraction", type=float, default=0.05, help="held-out share of documents, by "
                                                                      "document hash (default 0.05)")
    pr.add_argument("--seed", type=int, default=0, help="key of the validation-split hash")
    pr.add_argument("--executor", choices=("inline", "local", "slurm"), default="inline",
                    help="inline: this process; local / slurm: submitit jobs, one array task per input file")
    pr.add_argument("--workers", type=int, default=1, help="inline: processes tokenizing input files side by "
                                                            "side (default 1: one process, multi-threaded encoder)")
    pr.add_argument("--max-parallel", type=int, default=2, help="local / slurm: tasks running at once")
    pr.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                    help="submitit SLURM parameter, e.g. --slurm slurm_partition=cpu --slurm timeout_min=120")
    info = sub.add_parser("info", help="summarise a prepared data directory")
    info.add_argument("dir", metavar="DIR")


def _slurm_params(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--slurm expects KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def run(args: argparse.Namespace) -> int:
    try:
        if args.action == "info":
            from interpscale.orchestration import open_data

            data = open_data(args.dir)
            m = data.meta
            sys.stdout.write(f"{args.dir}: vocab {data.vocab_size}, {data.n_concepts} concepts, special ids "
                             f"{data.special_ids}\n")
            for s, v in m.get("splits", {}).items():
                sys.stdout.write(f"  {s}: {v['tokens']:,} tokens, {v['docs']:,} documents, {v['chunks']:,} chunks, "
                                 f"{v['labels']:,} labels\n")
            return 0
        from interpscale.orchestration.prepare import prepare

        out = prepare(args.sources, args.out, executor=args.executor, slurm=_slurm_params(args.slurm),
                      max_parallel=args.max_parallel, workers=args.workers, progress=True, fmt=args.format,
                      tokenizer=args.tokenizer,
                      vocab_size=args.vocab_size, sample_bytes=args.tokenizer_sample_bytes,
                      concepts=args.concepts, val_fraction=args.val_fraction, seed=args.seed)
    except (ValueError, FileNotFoundError, PermissionError) as exc:
        sys.stderr.write(f"interpscale data: {exc}\n")
        return 2
    meta = json.loads((out / "meta.json").read_text())
    sp = meta["splits"]
    sys.stdout.write(f"{out}: {sp['train']['tokens']:,} train / {sp['val']['tokens']:,} val tokens, "
                     f"{meta['n_concepts']} concepts\n")
    return 0
