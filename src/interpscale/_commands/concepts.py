"""`interpscale concepts chunk|tag|library|annotate|validate|build|check`: concept
annotation of a corpus (Steerling §4.2), ending in the labelled JSONL and concepts.json
that `interpscale data prepare --concepts` reads. Offline unless --base-url and --model
name an OpenAI-compatible server (tags, names, embeddings and the judge then go there)."""

from __future__ import annotations

import argparse
import json
import sys

from interpscale._commands.options import given, option

VERBS = ("chunk", "tag", "library", "annotate", "validate", "build", "check", "synthetic")


def _endpoint(p: argparse.ArgumentParser) -> None:
    from interpscale.concepts import Endpoint

    g = p.add_argument_group("LLM endpoint (offline when not given)")
    g.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    g.add_argument("--model", help="chat model for tags, names and the relevance judge")
    g.add_argument("--embed-model", help="embedding model for /embeddings (default: --model)")
    option(g, "--concurrency", Endpoint, type=int, help="requests in flight at once")
    option(g, "--max-retries", Endpoint, type=int, help="retries of a failed request")
    option(g, "--timeout", Endpoint, type=float, help="seconds per call")


def _chunk_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokenizer", help="tokenizer.json to count tokens in (default: one trained on the inputs)")
    p.add_argument("--format", dest="fmt", choices=("jsonl", "parquet", "text"), help="input format (default: by extension)")
    p.add_argument("--domain", choices=("prose", "code", "maths"), help="force one domain (default: guessed per document)")


def _library_opts(p: argparse.ArgumentParser) -> None:
    from interpscale.concepts import LibraryOptions

    option(p, "--n-concepts", LibraryOptions, type=int, help="k of k-means; None: the best silhouette over a grid")
    option(p, "--min-tag-support", LibraryOptions, type=int, help="chunks a tag needs to be clustered")
    option(p, "--min-support", LibraryOptions, type=int, help="chunks a concept needs")
    option(p, "--min-coherence", LibraryOptions, type=float, help="mean cosine of a cluster's tags to its centroid")


def _executor_opts(p: argparse.ArgumentParser) -> None:
    from interpscale.concepts import AnnotatorOptions, BuildOptions
    from interpscale.executors import EXECUTORS

    option(p, "--features", AnnotatorOptions, choices=("hashed", "embedding"),
           help="annotator features: hashed n-grams, or the endpoint's /embeddings")
    option(p, "--executor", BuildOptions, choices=("inline", *EXECUTORS), help="where the per-file tasks run")
    option(p, "--max-parallel", BuildOptions, type=int, help="local tasks at once")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from interpscale.concepts import BuildOptions

    sub = parser.add_subparsers(dest="verb", metavar="STAGE", required=True)
    c = sub.add_parser("chunk", help="documents -> chunks at sentence boundaries (150 / 256 tokens)")
    c.add_argument("inputs", nargs="+", help="JSONL / Parquet / text files or glob patterns")
    c.add_argument("--out", required=True, help="concepts directory")
    _chunk_opts(c)
    t = sub.add_parser("tag", help="stage 1: structured tags of a seeded sample of chunks")
    l_ = sub.add_parser("library", help="stage 2: tags -> clustered, filtered, named, deduplicated concepts")
    a = sub.add_parser("annotate", help="stage 3: train the PU annotator and label every chunk")
    v = sub.add_parser("validate", help="relevance-judge validation of every stage (App. C)")
    for p in (t, l_, a, v):
        p.add_argument("dir", help="concepts directory (made by `concepts chunk`)")
    for p in (t, v):
        option(p, "--seed", BuildOptions, type=int, help="seed of the sample")
    option(t, "--sample", BuildOptions, "n_sample", type=int, help="chunks to tag")
    option(v, "--n-validate", BuildOptions, type=int, help="chunks judged per stage")
    _library_opts(l_)
    _executor_opts(a)
    b = sub.add_parser("build", help="every stage: inputs -> DIR/labelled/*.jsonl, DIR/concepts.json, DIR/validation/")
    b.add_argument("inputs", nargs="+", help="JSONL / Parquet / text files or glob patterns")
    b.add_argument("--out", required=True, help="concepts directory")
    _chunk_opts(b)
    option(b, "--sample", BuildOptions, "n_sample", type=int, help="chunks to tag")
    option(b, "--n-validate", BuildOptions, type=int, help="chunks judged per stage")
    option(b, "--seed", BuildOptions, type=int, help="seed of the samples")
    _library_opts(b)
    _executor_opts(b)
    for p in (t, l_, a, v, b):
        _endpoint(p)
    y = sub.add_parser("synthetic", help="the bundled generator's corpus: DIR/raw.jsonl (no labels), DIR/truth.jsonl")
    y.add_argument("--out", required=True, help="directory to write into")
    option(y, "--docs", _synthetic(), "n_docs", type=int, help="documents")
    option(y, "--seed", _synthetic(), type=int, help="generator seed")
    k = sub.add_parser("check", help="compare DIR/labelled/ with known labels; last line: JSON")
    k.add_argument("dir", help="concepts directory")
    k.add_argument("--truth", nargs="+", required=True, help="labelled JSONL with the true concepts, same chunks in order")


def _synthetic():
    from interpscale.concepts import write_synthetic

    return write_synthetic


def _endpoint_of(args: argparse.Namespace):
    from interpscale.concepts import Endpoint

    return Endpoint(**given(args, "base_url", "model", "embed_model", "concurrency", "max_retries", "timeout"))


def _library_of(args: argparse.Namespace):
    from interpscale.concepts import LibraryOptions

    return LibraryOptions(**given(args, "n_concepts", "min_tag_support", "min_support", "min_coherence"))


def run(args: argparse.Namespace) -> int:
    import interpscale.concepts as C

    if args.verb == "check":
        res = C.check(args.dir, args.truth)
        for name, r in res["per_concept"].items():
            sys.stdout.write(f"{name}: best F1 {r['f1']:.3f} ({r['match']}, {r['support']} chunks)\n")
        sys.stdout.write(json.dumps({k: v for k, v in res.items() if k != "per_concept"}) + "\n")
        return 0
    if args.verb == "synthetic":
        raw, truth = C.write_synthetic(args.out, **given(args, "seed", n_docs="docs"))
        sys.stdout.write(f"{raw} (what the pipeline sees), {truth} (the true labels)\n")
        return 0
    if args.verb == "chunk":
        man = C.chunk_corpus(args.inputs, args.out, **given(args, "tokenizer", "fmt", "domain"))
        sys.stdout.write(json.dumps(man["totals"]) + "\n")
        return 0
    if args.verb == "build":
        opts = C.BuildOptions(library=_library_of(args), annotator=C.AnnotatorOptions(**given(args, "features")),
                              **given(args, "tokenizer", "fmt", "domain", "n_validate",
                                                                 "seed", "executor", "max_parallel",
                                                                 n_sample="sample"))
        s = C.build(args.inputs, args.out, opts, _endpoint_of(args))
        sys.stdout.write(f"{s['library']['n_concepts']} concepts, {s['chunks']['chunks']} chunks labelled in "
                         f"{args.out}/labelled/; validation: {args.out}/validation/report.md\n")
        return 0
    return _stage(args, C)


def _stage(args: argparse.Namespace, C) -> int:
    judge = C.make_judge(_endpoint_of(args), args.dir)
    try:
        if args.verb == "tag":
            out = C.tag_corpus(args.dir, judge=judge, **given(args, "seed", n_sample="sample"))
        elif args.verb == "library":
            out = C.library_stage(args.dir, _library_of(args), judge, _endpoint_of(args))
        elif args.verb == "annotate":
            ann = C.annotator_stage(args.dir, C.AnnotatorOptions(**given(args, "features")), judge, _endpoint_of(args))
            out = {"annotator": ann["loss"],
                   "files": C.annotate_corpus(args.dir, **given(args, "executor", "max_parallel"))}
        else:
            out = {k: {m: s.get(m) for m in ("success_rate", "mean", "n_scored")}
                   for k, s in C.validate(args.dir, judge=judge, **given(args, "seed", n_chunks="n_validate"))["stages"].items()}
    finally:
        if judge is not None:
            judge.close()
    sys.stdout.write(json.dumps(out, default=str) + "\n")
    return 0
