"""Validation of every stage with the relevance judge (App. C: 1–5, success = score ≥ 2).

On a seeded sample of chunks per stage (raw tags, inherited concepts, the annotator on
held-out chunks) the judge scores each (candidate, chunk) pair; failures are counted by
status, never averaged in (what is reported: docs/concepts.md, the ``validate`` stage).

The honest check (``check``): recovered concepts against known chunk labels, aligned in
order (the i-th chunk of the labelled files is the i-th chunk of the truth file(s)).
"""

from __future__ import annotations

import json
import logging
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from interpscale._atomic import atomic_path, atomic_write_text
from interpscale._markdown import md_table
from interpscale.concepts.annotate import Annotator
from interpscale.concepts.library import inherited
from interpscale.concepts.store import ANNOTATOR, LABELLED, VALIDATION, part_files, read_json, write_json
from interpscale.data.corpus import CorpusConfig, generate_documents
from interpscale.data.sources import expand_sources, iter_documents
from interpscale.errors import UserError
from interpscale.judges import LEXICAL_LABEL, ConceptCard, LexicalJudge, score_relevance
from interpscale.judges.scorers import fmt

log = logging.getLogger(__name__)

BINS = np.arange(1.0, 5.01, 0.5)  # histogram edges on the 1-5 scale
MAX_CANDIDATES = 26  # letters A-Z in one relevance call
RAW, TRUTH = "raw.jsonl", "truth.jsonl"


def judge_stage(chunks: Sequence[str], candidates: Sequence[Sequence[ConceptCard]], judge: Any) -> dict:
    """Relevance of each chunk's candidates: success rate, means and histograms."""
    keep = [i for i, c in enumerate(candidates) if c]  # none: every number empty (no call is made)
    res = score_relevance([chunks[i] for i in keep], [list(candidates[i])[:MAX_CANDIDATES] for i in keep], judge=judge)
    scored = [[r for r in row if r.score is not None] for row in res.records]
    per_chunk = [float(np.mean([r.score for r in row])) for row in scored if row]
    per_item: dict[str, list[float]] = defaultdict(list)
    for r in (r for row in scored for r in row):
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
    atomic_write_text(out / VALIDATION / "report.md", report_markdown(report))
    _figure(report, out / VALIDATION / "stages.png")
    return report


def stage_headlines(report: dict) -> dict:
    """Success rate, mean and pairs scored of each stage of a ``validate`` report."""
    return {k: {m: s.get(m) for m in ("success_rate", "mean", "n_scored")} for k, s in report["stages"].items()}


def report_markdown(report: dict) -> str:
    names = {"tags": "Stage 1: tags", "concepts": "Stage 2: concepts", "annotator": "Stage 3: annotator (held out)"}
    rows = [(names.get(k, k), s["n_chunks"], s.get("n_scored", 0), fmt(s["success_rate"]), fmt(s["mean"]),
             f"{fmt(s.get('per_item_mean'))} ({fmt(s.get('per_item_sd'))})",
             sum(s.get(f, 0) for f in ("parse_failures", "api_errors", "refused")))
            for k, s in report["stages"].items()]
    table = md_table(("stage", "chunks", "pairs scored", "success (>=2)", "mean", "per-item mean (sd)",
                      "failed"), rows)
    lexical = ("\nScored by the offline lexical backend (word overlap), a proxy and not an LLM judge: "
               "pass --base-url and --model for the App. C judge.\n")
    return (f"# Concept pipeline validation\n\nRelevance judge (App. C, 1-5; success = score >= 2): "
            f"{report['judge']}\n\n{table}\nHistograms of per-chunk and per-tag/per-concept mean scores (bins"
            " of 0.5 from 1 to 5) are in validation.json and stages.png (as the paper's Figs. 6, 10, 11).\n"
            + (lexical if report["backend"] == "lexical" else ""))


def _figure(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def iter_labels(path: str | os.PathLike) -> Iterator[list[str]]:
    """Each chunk's concept labels of a labelled JSONL (``{"chunks": [{"text", "concepts"}]}``)."""
    for doc in iter_documents(path, "jsonl"):
        for _, labs in doc.chunks:
            yield list(labs)


def _membership(labels: Sequence[Sequence[str]], n: int) -> tuple[list[str], np.ndarray]:
    """The sorted concept names and their [name, chunk] 0/1 membership over the first ``n`` chunks."""
    names = sorted({c for ls in labels for c in ls})
    index = {c: i for i, c in enumerate(names)}
    m = np.zeros((len(names), n), np.int64)
    for j, ls in zip(range(n), labels):
        m[[index[c] for c in ls], j] = 1
    return names, m


def best_match_f1(truth: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict:
    """For each true concept the best F1 of chunk membership over the recovered concepts
    (``per_concept``: ``{"f1", "match", "support"}``) and their mean (``mean_best_f1``)."""
    (t_names, tm), (p_names, pm) = _membership(truth, len(truth)), _membership(pred, len(truth))
    inter = tm @ pm.T  # [true, pred]
    f1 = 2 * inter / np.maximum(tm.sum(1)[:, None] + pm.sum(1)[None, :], 1)
    per = {}
    for i, c in enumerate(t_names):
        b = int(np.argmax(f1[i])) if len(p_names) else -1
        per[c] = {"f1": round(float(f1[i, b]) if b >= 0 else 0.0, 4), "match": p_names[b] if b >= 0 else None,
                  "support": int(tm[i].sum())}
    mean = float(np.mean([v["f1"] for v in per.values()])) if per else 0.0
    return {"mean_best_f1": round(mean, 4), "per_concept": per}


def ami(truth: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> float:
    """Adjusted mutual information (scikit-learn) between the true and recovered assignment of
    the chunks with exactly one true concept; a chunk's recovered one is its first, or "none"."""
    from sklearn.metrics import adjusted_mutual_info_score

    pairs = [(ts[0], ps[0] if ps else "none") for ts, ps in zip(truth, pred) if len(ts) == 1]
    if not pairs:
        return float("nan")
    return float(adjusted_mutual_info_score([a for a, _ in pairs], [b for _, b in pairs]))


def check(out: str | os.PathLike, truth_paths: Sequence[str | os.PathLike]) -> dict:
    """Compare DIR/labelled/ with the truth file(s), chunk by chunk in order."""
    out = Path(out)
    files = [out / LABELLED / f for f in part_files(out)]
    if missing := [str(f) for f in files if not f.exists()]:
        raise UserError(f"{missing[0]}: missing; run `interpscale concepts annotate {out}` first")
    pred = [ls for f in files for ls in iter_labels(f)]
    truth = [ls for p in expand_sources(truth_paths) for ls in iter_labels(p)]
    if len(truth) != len(pred):
        raise UserError(f"{truth_paths[0]}: {len(truth)} chunks but {out / LABELLED} has {len(pred)}; "
                        "the truth must list the same chunks in the same order")
    res = best_match_f1(truth, pred)
    return {"mean_best_f1": res["mean_best_f1"], "ami": round(ami(truth, pred), 4), "n_chunks": len(truth),
            "n_true_concepts": len(res["per_concept"]), "n_recovered_concepts": len({c for ls in pred for c in ls}),
            "per_concept": res["per_concept"]}


def write_synthetic(out: str | os.PathLike, n_docs: int = 400, seed: int = 0) -> tuple[Path, Path]:
    """The bundled generator's corpus as DIR/raw.jsonl (chunks, labels removed: what the
    pipeline sees) and DIR/truth.jsonl (the same chunks with their concept labels)."""
    concepts, docs = generate_documents(CorpusConfig(n_docs=n_docs, seed=seed))
    rows = [[{"text": x, "concepts": [concepts[c].label for c in labs]} for x, labs in d] for d in docs]
    raw = "".join(json.dumps({"chunks": [{"text": r["text"]} for r in rs]}) + "\n" for rs in rows)
    truth = "".join(json.dumps({"chunks": rs}) + "\n" for rs in rows)
    return atomic_write_text(Path(out) / RAW, raw), atomic_write_text(Path(out) / TRUTH, truth)
