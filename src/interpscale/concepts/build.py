"""Every stage in one call: chunk → tag → library → annotate → validate (``concepts build``).

Online, tags, names, embeddings and the judge go through one judge client caching in
DIR/judge_cache.sqlite, so a rerun (after a crash or a change further down) asks only what
was never answered.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from interpscale.concepts.annotate import AnnotatorOptions, annotate_corpus, train_annotator
from interpscale.concepts.chunk import chunk_corpus
from interpscale.concepts.library import LibraryOptions, build_library
from interpscale.concepts.llm import CardNamer, EndpointEmbedder
from interpscale.concepts.store import CACHE_NAME, write_json
from interpscale.concepts.tag import tag_corpus
from interpscale.concepts.validate import stage_headlines, validate
from interpscale.errors import UserError
from interpscale.judges import build_judge
from interpscale.judges.retry import DEFAULT_CONCURRENCY, DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible server for the LLM path (None fields: offline)."""

    base_url: Optional[str] = None
    model: Optional[str] = None
    embed_model: Optional[str] = None  # default: ``model``
    concurrency: int = DEFAULT_CONCURRENCY
    max_retries: int = DEFAULT_MAX_RETRIES
    timeout: float = DEFAULT_TIMEOUT

    @property
    def online(self) -> bool:
        if bool(self.base_url) != bool(self.model):
            raise UserError("the LLM path needs both --base-url and --model "
                            f"(got base_url={self.base_url!r}, model={self.model!r})")
        return bool(self.base_url)


def make_judge(endpoint: Endpoint, out: str | os.PathLike) -> Any:
    """A JudgeClient caching in DIR/judge_cache.sqlite, or None when offline."""
    if not endpoint.online:
        return None
    Path(out).mkdir(parents=True, exist_ok=True)
    return build_judge(base_url=endpoint.base_url, model=endpoint.model, cache_path=Path(out) / CACHE_NAME,
                       concurrency=endpoint.concurrency, max_retries=endpoint.max_retries, timeout=endpoint.timeout)


def library_stage(out: str | os.PathLike, opts: LibraryOptions, judge: Any, endpoint: Endpoint) -> dict:
    """Stage 2 with the endpoint's embeddings and names when online; returns its summary."""
    embed = EndpointEmbedder(judge, endpoint.embed_model) if judge is not None else None
    namer = CardNamer(judge) if judge is not None else None
    lib = build_library(out, opts, embed=embed, name=namer)
    return {"k": lib.k, "n_concepts": len(lib.cards), "n_dropped": len(lib.dropped), "embedding": lib.embedding,
            "embed_failed": embed.failed if embed else 0, "naming": namer.status if namer else "offline"}


def annotator_stage(out: str | os.PathLike, opts: AnnotatorOptions, judge: Any, endpoint: Endpoint) -> dict:
    """Stage 3 training; ``features="embedding"`` takes the endpoint's embeddings."""
    if opts.features == "hashed":
        return train_annotator(out, opts)
    if opts.features != "embedding":
        raise UserError(f"unknown annotator features {opts.features!r}; expected 'hashed' or 'embedding'")
    if judge is None:
        raise UserError("annotator features 'embedding' need an endpoint (--base-url and --model)")
    settings = {k: v for k, v in asdict(endpoint).items() if k != "concurrency"}  # what a per-file task reconnects with
    return train_annotator(out, opts, embedder=EndpointEmbedder(judge, endpoint.embed_model), endpoint=settings)


@dataclass(frozen=True)
class BuildOptions:
    n_sample: int = 2000
    n_validate: int = 200
    seed: int = 0
    tokenizer: Optional[str] = None
    fmt: Optional[str] = None
    domain: Optional[str] = None
    document_per_file: bool = False  # each input file is one document (code corpora)
    drop_over: Optional[int] = None  # opt-in: drop sentences over this many tokens (the paper: 50,000)
    executor: str = "inline"
    max_parallel: int = 2
    library: LibraryOptions = field(default_factory=LibraryOptions)
    annotator: AnnotatorOptions = field(default_factory=AnnotatorOptions)


def build(inputs, out: str | os.PathLike, opts: BuildOptions = BuildOptions(),
          endpoint: Endpoint = Endpoint()) -> dict:
    """Run every stage into DIR; returns (and writes DIR/summary.json) what each did."""
    out = Path(out)
    judge = make_judge(endpoint, out)
    try:
        man = chunk_corpus(inputs, out, tokenizer=opts.tokenizer, fmt=opts.fmt, domain=opts.domain,
                           document_per_file=opts.document_per_file, drop_over=opts.drop_over)
        tags = tag_corpus(out, judge=judge, n_sample=opts.n_sample, seed=opts.seed, domain=opts.domain)
        lib = library_stage(out, opts.library, judge, endpoint)
        ann = annotator_stage(out, opts.annotator, judge, endpoint)
        files = annotate_corpus(out, executor=opts.executor, max_parallel=opts.max_parallel)
        val = validate(out, judge=judge, n_chunks=opts.n_validate, seed=opts.seed)
        summary = {"chunks": man["totals"], "tags": {k: v for k, v in tags.items() if k != "usage"},
                   "library": lib, "annotator": {k: ann[k] for k in ("n_train", "n_heldout", "loss")},
                   "labelled": files, "validation": stage_headlines(val), "judge": val["judge"],
                   "usage": judge.usage.to_dict() if judge is not None else {},
                   "options": {**asdict(opts), "endpoint": asdict(endpoint)}}
        write_json(out / "summary.json", summary)
        return summary
    finally:
        if judge is not None:
            judge.close()
