"""`interpscale concepts chunk|tag|library|annotate|validate|build|check|synthetic`: concept
annotation of a corpus (Steerling §4.2), ending in the labelled JSONL and concepts.json
that `interpscale data prepare --concepts` reads. Offline unless --base-url and --model
name an OpenAI-compatible server (tags, names, embeddings and the judge then go there)."""

from __future__ import annotations

import argparse
import json
import sys

from interpscale._commands.options import (count, existing_dir, existing_file, given, non_negative_int, option,
                                           out_dir, positive_float)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from interpscale.concepts import AnnotatorOptions, BuildOptions, Endpoint, LibraryOptions, write_synthetic
    from interpscale.executors import EXECUTORS

    sub = parser.add_subparsers(dest="verb", metavar="STAGE", required=True)
    c = sub.add_parser("chunk", help="documents -> chunks at sentence boundaries (150 / 256 tokens)")
    t = sub.add_parser("tag", help="stage 1: structured tags of a seeded sample of chunks")
    l_ = sub.add_parser("library", help="stage 2: tags -> clustered, filtered, named, deduplicated concepts")
    a = sub.add_parser("annotate", help="stage 3: train the PU annotator and label every chunk")
    v = sub.add_parser("validate", help="relevance-judge validation of every stage (App. C)")
    b = sub.add_parser("build", help="every stage: inputs -> DIR/labelled/*.jsonl, DIR/concepts.json, DIR/validation/")
    for p in (c, b):
        p.add_argument("inputs", nargs="+", help="JSONL / Parquet / text files or glob patterns")
        p.add_argument("--out", required=True, type=out_dir, help="concepts directory")
        p.add_argument("--tokenizer", type=existing_file, help="tokenizer.json to count tokens in (default: one trained on the inputs)")
        p.add_argument("--format", dest="fmt", choices=("jsonl", "parquet", "text"),
                       help="input format (default: by extension)")
        p.add_argument("--domain", choices=("prose", "code", "maths"),
                       help="force one domain (default: by file extension, .py etc. code, .tex maths; else "
                            "guessed per document)")
        p.add_argument("--document-per-file", action="store_true",
                       help="each file is one plain-text document, never split at blank lines (code corpora; "
                            "any extension)")
        p.add_argument("--drop-sentences-over", dest="drop_over", type=count, metavar="TOKENS",
                       help="opt-in normalisation, recorded in chunks/manifest.json: drop sentences over TOKENS "
                            "tokens (the paper: 50000); by default no character of a document is dropped")
    for p in (t, l_, a, v):
        p.add_argument("dir", metavar="DIR", help="concepts directory (made by `concepts chunk`)")
    for p in (t, b):
        option(p, "--sample", BuildOptions, "n_sample", type=count, help="chunks to tag")
    for p in (v, b):
        option(p, "--n-validate", BuildOptions, type=count, help="chunks judged per stage")
    for p in (t, v, b):
        option(p, "--seed", BuildOptions, type=int, help="seed of the samples")
    for p in (l_, b):
        option(p, "--n-concepts", LibraryOptions, type=count, help="k of k-means; None: the best silhouette over a grid")
        option(p, "--min-tag-support", LibraryOptions, type=count, help="chunks a tag needs to be clustered")
        option(p, "--min-support", LibraryOptions, type=count, help="chunks a concept needs")
        option(p, "--min-coherence", LibraryOptions, type=float, help="mean cosine of a cluster's tags to its centroid")
    for p in (a, b):
        option(p, "--features", AnnotatorOptions, choices=("hashed", "embedding"),
               help="annotator features: hashed n-grams, or the endpoint's /embeddings")
        option(p, "--executor", BuildOptions, choices=("inline", *EXECUTORS), help="where the per-file tasks run")
        option(p, "--max-parallel", BuildOptions, type=count, help="local tasks at once")
    for p in (t, l_, a, v, b):
        g = p.add_argument_group("LLM endpoint (offline when not given)")
        g.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
        g.add_argument("--model", help="chat model for tags, names and the relevance judge")
        g.add_argument("--embed-model", help="embedding model for /embeddings (default: --model)")
        option(g, "--concurrency", Endpoint, type=count, help="requests in flight at once")
        option(g, "--max-retries", Endpoint, type=non_negative_int, help="retries of a failed request")
        option(g, "--timeout", Endpoint, type=positive_float, help="seconds per call")
    y = sub.add_parser("synthetic", help="the bundled generator's corpus: DIR/raw.jsonl (no labels), DIR/truth.jsonl")
    y.add_argument("--out", required=True, type=out_dir, help="directory to write into")
    option(y, "--docs", write_synthetic, "n_docs", type=count, help="documents")
    option(y, "--seed", write_synthetic, type=int, help="generator seed")
    k = sub.add_parser("check", help="compare DIR/labelled/ with known labels; last line: JSON")
    k.add_argument("dir", metavar="DIR", type=existing_dir, help="concepts directory")
    k.add_argument("--truth", nargs="+", required=True, type=existing_file, help="labelled JSONL with the true concepts, same chunks in order")


def run(args: argparse.Namespace) -> int:
    import interpscale.concepts as C

    if args.verb == "check":
        res = C.check(args.dir, args.truth)
        for name, r in res["per_concept"].items():
            sys.stdout.write(f"{name}: best F1 {r['f1']:.3f} ({r['match']}, {r['support']} chunks)\n")
        out = {k: v for k, v in res.items() if k != "per_concept"}
    elif args.verb == "synthetic":
        raw, truth = C.write_synthetic(args.out, **given(args, "seed", n_docs="docs"))
        sys.stdout.write(f"{raw} (what the pipeline sees), {truth} (the true labels)\n")
        return 0
    elif args.verb == "chunk":
        out = C.chunk_corpus(args.inputs, args.out, document_per_file=args.document_per_file,
                             **given(args, "tokenizer", "fmt", "domain", "drop_over"))["totals"]
    else:
        out = _stage(args, C)
    if out is not None:
        sys.stdout.write(json.dumps(out, default=str) + "\n")
    return 0


def _stage(args: argparse.Namespace, C) -> dict | None:
    """The stages that may call the endpoint; ``build`` runs them all."""
    endpoint = C.Endpoint(**given(args, "base_url", "model", "embed_model", "concurrency", "max_retries", "timeout"))
    library = C.LibraryOptions(**given(args, "n_concepts", "min_tag_support", "min_support", "min_coherence"))
    annotator = C.AnnotatorOptions(**given(args, "features"))
    if args.verb == "build":
        opts = C.BuildOptions(library=library, annotator=annotator, **given(
            args, "tokenizer", "fmt", "domain", "drop_over", "n_validate", "seed", "executor", "max_parallel",
            n_sample="sample"), document_per_file=args.document_per_file)
        s = C.build(args.inputs, args.out, opts, endpoint)
        sys.stdout.write(f"{s['library']['n_concepts']} concepts, {s['chunks']['chunks']} chunks labelled in "
                         f"{args.out}/labelled/; validation: {args.out}/validation/report.md\n")
        return None
    judge = C.make_judge(endpoint, args.dir)
    try:
        if args.verb == "tag":
            return C.tag_corpus(args.dir, judge=judge, **given(args, "seed", n_sample="sample"))
        if args.verb == "library":
            return C.library_stage(args.dir, library, judge, endpoint)
        if args.verb == "annotate":
            return {"annotator": C.annotator_stage(args.dir, annotator, judge, endpoint)["loss"],
                    "files": C.annotate_corpus(args.dir, **given(args, "executor", "max_parallel"))}
        return C.stage_headlines(C.validate(args.dir, judge=judge, **given(args, "seed", n_chunks="n_validate")))
    finally:
        if judge is not None:
            judge.close()
