"""`interpscale judge alignment|steering|relevance`: LLM-judge scoring.

Without --base-url/--model (or $INTERPSCALE_JUDGE_BASE_URL / $INTERPSCALE_JUDGE_MODEL)
the offline lexical backend scores instead, and every output says so. Exit status: 0
when at least one score parsed, 1 when every judged item failed (the outputs are still
written, with each failure's status), 2 for bad input or an endpoint that refuses us.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from interpscale._atomic import atomic_write_text
from interpscale._commands.options import (count, existing_dir, existing_file, given, non_negative_int, option,
                                           out_dir, positive_float)
from interpscale.errors import FailedWork, UserError
from interpscale.models.checkpoint import weights_file


def _numbers(text: str) -> list[float]:
    """An argparse ``type``: comma-separated numbers."""
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated numbers, got {text!r}") from None


def _common(p: argparse.ArgumentParser) -> None:
    from interpscale.judges import JudgeClient

    g = p.add_argument_group("judge endpoint")
    g.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    g.add_argument("--model", help="judge model name (the paper: Mistral-Small-3.1-24B-Instruct)")
    option(g, "--api-key-env", JudgeClient, help="environment variable holding the API key")
    g.add_argument("--cache", default=None,
                   help="sqlite cache file (default: <out>/judge_cache.sqlite, else $XDG_CACHE_HOME/interpscale/)")
    option(g, "--concurrency", JudgeClient, type=count, help="requests in flight at once")
    option(g, "--max-retries", JudgeClient, type=non_negative_int, help="retries of a failed request")
    option(g, "--timeout", JudgeClient, type=positive_float, help="seconds per call")
    g.add_argument("--top-logprobs", type=count, default=None, help="request top_logprobs for an expected score")
    g.add_argument("--price-in", type=float, default=None, help="price per 1M prompt tokens (for the cost estimate)")
    g.add_argument("--price-out", type=float, default=None, help="price per 1M completion tokens")
    g.add_argument("--templates", default=None, type=existing_file, help="TOML/JSON file overriding prompt templates")
    g.add_argument("--batch-write", default=None, help="write an OpenAI Batch API request file and stop")
    g.add_argument("--batch-read", default=None, type=existing_file, help="read an OpenAI Batch API output file instead of calling")
    p.add_argument("--out", default=None, type=out_dir, help="directory for <kind>.json and <kind>.md")
    p.add_argument("--seed", type=int, help="seed of the sampled subset and of generation (default: the scorers' own, 0)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from interpscale.judges import run_steering_benchmark

    # (the checkpoint judges' own defaults, --k and --top, are not read here: that would import torch)
    sub = parser.add_subparsers(dest="verb", metavar="KIND", required=True)
    a = sub.add_parser("alignment", help="known concept alignment 1-5 (App. E)")
    src = a.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="RUN_DIR/checkpoints/*.pt of a concept model")
    src.add_argument("--input", type=existing_file, help="JSONL rows {label, description, tokens: [...]}")
    a.add_argument("--k", type=count, help="top-k tokens per concept (default: judge_checkpoint_alignment's)")
    a.add_argument("--n-sample", type=count, default=None, help="score a seeded random subset of concepts")
    s = sub.add_parser("steering", help="steering benchmark: concept and quality 0-2 (App. M)")
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="generate with this checkpoint, then judge")
    src.add_argument("--input", type=existing_file, help="JSONL rows {label, description, prompt, continuation, condition[, strength]}")
    s.add_argument("--prompts", type=existing_file, help="text file, one prompt per line (default: built-in neutral prompts)")
    option(s, "--n-concepts", run_steering_benchmark, type=count, help="concepts steered")
    option(s, "--strengths", run_steering_benchmark, type=_numbers, help="comma-separated τ values; >1 value "
           "selects per concept on held-out prompts")
    option(s, "--max-new-tokens", run_steering_benchmark, type=count)
    s.add_argument("--temperature", type=float, help="sampling temperature (default: judge_checkpoint_steering's)")
    s.add_argument("--instruction-judge", action="store_true", help="add AxBench's instruction-relevance judge")
    s.add_argument("--quality-with-prefix", action="store_true", help="show the prompt to the quality judge as context (paper App. M)")
    r = sub.add_parser("relevance", help="concept relevance 1-5 per candidate, JSON (App. C)")
    r.add_argument("--input", required=True, type=existing_file,
                   help="JSONL rows {text, candidates: [{label, description, words?}]}; with --checkpoint only {text}")
    r.add_argument("--checkpoint", help="judge this checkpoint's top predicted concepts for each text")
    r.add_argument("--top", type=count, help="predicted concepts per chunk with --checkpoint (default: "
                   "judge_checkpoint_relevance's)")
    for p in (a, s, r):
        p.add_argument("--run-dir", type=existing_dir, help="run directory (default: the checkpoint's grandparent)")
        _common(p)


def run(args: argparse.Namespace) -> int:
    from interpscale.judges import build_judge, outcome
    from interpscale.judges.batch import BatchWritten

    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    if getattr(args, "checkpoint", None) and not weights_file(args.checkpoint).is_file():
        raise UserError(f"{args.checkpoint}: no such checkpoint (a checkpoints/<name> directory or an old .pt file)")
    judge = build_judge(base_url=args.base_url, model=args.model, cache_path=args.cache, out_dir=args.out,
                        templates=args.templates, batch_write=args.batch_write, batch_read=args.batch_read,
                        top_logprobs=args.top_logprobs, price_in_per_mtok=args.price_in,
                        price_out_per_mtok=args.price_out, progress=sys.stderr.isatty(),
                        **given(args, "api_key_env", "concurrency", "max_retries", "timeout"))
    try:
        score = {"alignment": _alignment, "steering": _steering, "relevance": _relevance}[args.verb]
        result = score(args, judge)
    except BatchWritten as done:  # not an error: the request file is the output
        sys.stdout.write(f"{done}; submit it, then rerun with --batch-read <output file>\n")
        return 0
    md = result.to_markdown()
    if args.out:
        out = Path(args.out)
        atomic_write_text(out / f"{args.verb}.json", json.dumps(result.to_dict(), indent=1, default=str))
        atomic_write_text(out / f"{args.verb}.md", md)
    sys.stdout.write(md)
    sys.stderr.write(_usage_line(result.usage, judge) + "\n")
    o = outcome(result)
    if o.n_failed:
        sys.stderr.write(f"interpscale judge {args.verb}: {o.summary()}\n")
    if o.all_failed:
        raise FailedWork("no item could be scored (the outputs are written, with each failure's status)")
    return 0


def _usage_line(usage: dict[str, Any], judge: Any) -> str:
    u = defaultdict(int, usage)
    line = ("judge usage: {tasks} tasks, {cache_hits} cached, {requests} requests ({retries} retries, {reasks} "
            "re-asks), {parse_failures} parse failures, {api_errors} API errors, {refusals} refusals, "
            "{prompt_tokens}+{completion_tokens} tokens").format_map(u)
    if u.get("cost") is not None:
        line += f", cost {u['cost']:.4f}"
    cache = getattr(getattr(judge, "client", judge), "cache", None)  # none for the offline backend
    if cache is not None and str(cache.path) != ":memory:":
        total = cache.ledger_totals()["total"]
        cost = "" if total["cost"] is None else f", cost {total['cost']:.4f}"
        line += (f"\njudge ledger ({cache.path}): {total['requests']} requests, "
                 f"{total['prompt_tokens']}+{total['completion_tokens']} tokens over all runs{cost}")
    return line


def _alignment(args: argparse.Namespace, judge: Any) -> Any:
    if args.checkpoint:
        from interpscale.metrics.checkpoint_judging import judge_checkpoint_alignment

        return judge_checkpoint_alignment(args.checkpoint, run_dir=args.run_dir, judge=judge, n_sample=args.n_sample,
                                          **given(args, "k", "seed"))
    from interpscale.judges import score_alignment
    from interpscale.judges.inputs import read_alignment_input

    cards, tokens = read_alignment_input(args.input)
    return score_alignment(cards, tokens, judge=judge, n_sample=args.n_sample, **given(args, "seed"))


def _relevance(args: argparse.Namespace, judge: Any) -> Any:
    from interpscale.judges import inputs, score_relevance

    if args.checkpoint:
        from interpscale.metrics.checkpoint_judging import judge_checkpoint_relevance

        return judge_checkpoint_relevance(args.checkpoint, inputs.read_texts(args.input), run_dir=args.run_dir,
                                          judge=judge, **given(args, "top"))
    return score_relevance(*inputs.read_relevance_input(args.input), judge=judge)


def _steering(args: argparse.Namespace, judge: Any) -> Any:
    from interpscale.judges.steering import DEFAULT_PROMPTS

    if args.input:
        from interpscale.judges.inputs import read_steering_input
        from interpscale.judges.steering import score_steering_continuations

        return score_steering_continuations(read_steering_input(args.input), judge=judge,
                                            instruction_judge=args.instruction_judge,
                                            quality_with_prefix=args.quality_with_prefix)
    from interpscale.metrics.checkpoint_judging import judge_checkpoint_steering

    prompts = DEFAULT_PROMPTS
    if args.prompts:
        lines = Path(args.prompts).read_text(encoding="utf-8").splitlines()
        prompts = tuple(ln.strip() for ln in lines if ln.strip())
        if not prompts:
            raise UserError(f"{args.prompts}: no prompts (the file is empty)")
    gens = str(Path(args.out) / "generations.jsonl") if args.out else None
    return judge_checkpoint_steering(args.checkpoint, run_dir=args.run_dir, prompts=prompts, judge=judge,
                                     instruction_judge=args.instruction_judge,
                                     quality_with_prefix=args.quality_with_prefix, generations_path=gens,
                                     **given(args, "temperature", "n_concepts", "strengths", "seed", "max_new_tokens"))
