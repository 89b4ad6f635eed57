"""Validation of every stage with the relevance judge (App. C: 1–5, success = score ≥ 2).

On a seeded sample of chunks per stage the judge scores each (candidate, chunk) pair: the
raw tags (stage 1), the inherited concepts (stage 2), the annotator's predictions on chunks
held out of its training (stage 3). Per stage: success rate and mean over parsed scores,
failures by status (never averaged in), histograms of per-chunk and per-item means (the
paper's Figs. 6, 10, 11), in DIR/validation/ (validation.json, report.md, stages.png).
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from interpscale.concepts.annotate import Annotator
from interpscale.concepts.library import inherited
from interpscale.concepts.store import ANNOTATOR, VALIDATION, read_json, write_json
from interpscale.judges import LEXICAL_LABEL, ConceptCard, LexicalJudge, score_relevance

log = logging.getLogger(__name__)

BINS = np.arange(1.0, 5.01, 0.5)  # histogram edges on the 1-5 scale
MAX_CANDIDATES = 26  # letters A-Z in one relevance call


def judge_stage(chunks: Sequence[str], candidates: Sequence[Sequence[ConceptCard]], judge: Any) -> dict:
    """Relevance of each chunk's candidates: success rate, means and histograms."""
    keep = [i for i, c in enumerate(candidates) if c]
    if not keep:
        empty = [0] * (len(BINS) - 1)
        return {"n_chunks": 0, "n_pairs": 0, "n_scored": 0, "success_rate": None, "mean": None, "parse_failures": 0,
                "api_errors": 0, "refused": 0, "cached": 0, "chunk_success_rate": None, "per_chunk_hist": empty,
                "per_item_hist": empty, "per_item_mean": None, "per_item_sd": None}
    res = score_relevance([chunks[i] for i in keep], [list(candidates[i])[:MAX_CANDIDATES] for i in keep], judge=judge)
    per_item: dict[str, list[float]] = defaultdict(list)
    per_chunk = []
    for row in res.records:
        got = [r.score for r in row if r.score is not None]
        if got:
            per_chunk.append(float(np.mean(got)))
        for r in row:
            if r.score is not None:
                per_item[r.meta["concept"]].append(r.score)
    item_means = [float(np.mean(v)) for v in per_item.values()]
    s = res.summary
    return {"n_chunks": len(keep), "n_pairs": sum(len(r) for r in res.records), "n_scored": s.n,
            "success_rate": res.success_rate, "mean": s.mean, "parse_failures": s.n_parse_failures,
            "api_errors": s.n_api_errors, "refused": s.n_refused, "cached": s.n_cached,
            "chunk_success_rate": float(np.mean([m >= 2 for m in per_chunk])) if per_chunk else None,
            "per_chunk_hist": np.histogram(per_chunk, BINS)[0].tolist(),
            "per_item_hist": np.histogram(item_means, BINS)[0].tolist(),
            "per_item_mean": float(np.mean(item_means)) if item_means else None,
            "per_item_sd": float(np.std(item_means)) if item_means else None}


def _candidates(out: Path, n: int, seed: int) -> dict[str, tuple[list[str], list[list[ConceptCard]]]]:
    """(chunks, candidate cards) per stage, each on its own seeded sample."""
    lib, recs, positives = inherited(out)
    cards = [ConceptCard.from_dict(c) for c in lib["concepts"]]
    rng = np.random.default_rng([seed, 5])
    pick = sorted(rng.choice(len(recs), size=min(n, len(recs)), replace=False).tolist())
    texts = [recs[i]["text"] for i in pick]
    tag_cards = [[ConceptCard(label=t, description=f"The text is about {t}.", words=(t,)) for t in recs[i]["flat"]]
                 for i in pick]
    stages = {"tags": (texts, tag_cards),
              "concepts": (texts, [[cards[c] for c in positives[i]] for i in pick])}
    if (out / ANNOTATOR / "meta.json").exists():
        held = read_json(out / ANNOTATOR / "meta.json", "annotate")["heldout_ids"]
        held = sorted(rng.choice(held, size=min(n, len(held)), replace=False).tolist()) if held else []
        ann = Annotator.load(out / ANNOTATOR)
        h_texts = [recs[i]["text"] for i in held]
        by_label = {c.label: c for c in cards}
        preds = ann.predict(h_texts) if h_texts else []
        stages["annotator"] = (h_texts, [[by_label[p] for p in ps or []] for ps in preds])
    return stages


def validate(out: str | os.PathLike, *, judge: Any = None, n_chunks: int = 200, seed: int = 0) -> dict:
    """Judge every stage present in DIR (``judge``: a JudgeClient, else the offline lexical
    backend); writes DIR/validation/ and returns the numbers."""
    out = Path(out)
    if judge is None:  # offline unless an endpoint was given (not from the environment)
        log.info("validating with the %s", LEXICAL_LABEL)
        judge = LexicalJudge()
    report = {"judge": judge.label, "backend": judge.backend, "success_threshold": 2, "bins": BINS.tolist(),
              "stages": {name: judge_stage(t, c, judge) for name, (t, c) in _candidates(out, n_chunks, seed).items()},
              "usage": judge.usage.to_dict()}
    write_json(out / VALIDATION / "validation.json", report)
    from interpscale._atomic import atomic_write_text

    atomic_write_text(out / VALIDATION / "report.md", report_markdown(report))
    _figure(report, out / VALIDATION / "stages.png")
    return report


def stage_headlines(report: dict) -> dict:
    """Success rate, mean and pairs scored of each stage of a ``validate`` report."""
    return {k: {m: s.get(m) for m in ("success_rate", "mean", "n_scored")} for k, s in report["stages"].items()}


def _fmt(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def report_markdown(report: dict) -> str:
    names = {"tags": "Stage 1: tags", "concepts": "Stage 2: concepts", "annotator": "Stage 3: annotator (held out)"}
    lines = [f"# Concept pipeline validation\n\nRelevance judge (App. C, 1-5; success = score >= 2): {report['judge']}\n",
             "| stage | chunks | pairs scored | success (>=2) | mean | per-item mean (sd) | failed |",
             "|---|---|---|---|---|---|---|"]
    for k, s in report["stages"].items():
        failed = s.get("parse_failures", 0) + s.get("api_errors", 0) + s.get("refused", 0)
        lines.append(f"| {names.get(k, k)} | {s['n_chunks']} | {s.get('n_scored', 0)} | {_fmt(s['success_rate'])} | "
                     f"{_fmt(s['mean'])} | {_fmt(s.get('per_item_mean'))} ({_fmt(s.get('per_item_sd'))}) | {failed} |")
    lines.append("\nHistograms of per-chunk and per-tag/per-concept mean scores (bins of 0.5 from 1 to 5) are in "
                 "validation.json and stages.png (as the paper's Figs. 6, 10, 11).")
    if report["backend"] == "lexical":
        lines.append("\nScored by the offline lexical backend (word overlap), a proxy and not an LLM judge: "
                     "pass --base-url and --model for the App. C judge.")
    return "\n".join(lines) + "\n"


def _figure(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from interpscale._atomic import atomic_path

    stages = [(k, s) for k, s in report["stages"].items() if s.get("n_chunks")]
    if not stages:
        return
    fig, axes = plt.subplots(len(stages), 2, figsize=(8, 2.4 * len(stages)), squeeze=False)
    edges = np.asarray(report["bins"])
    for row, (name, s) in zip(axes, stages):
        for ax, key, what in ((row[0], "per_chunk_hist", "per-chunk"), (row[1], "per_item_hist", "per-item")):
            ax.bar(edges[:-1], s[key], width=np.diff(edges), align="edge", edgecolor="black", color="#7aa6c2")
            ax.set_title(f"{name}: {what} mean relevance", fontsize=9)
            ax.set_xlim(1, 5)
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
