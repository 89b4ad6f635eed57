"""The honest check: recovered concepts against known chunk labels, aligned in order (the
i-th chunk of the labelled files is the i-th chunk of the truth file(s))."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from interpscale.concepts.store import LABELLED, part_files
from interpscale.errors import UserError

RAW, TRUTH = "raw.jsonl", "truth.jsonl"


def iter_labels(path: str | os.PathLike) -> Iterator[list[str]]:
    """Each chunk's concept labels of a labelled JSONL (``{"chunks": [{"text", "concepts"}]}``)."""
    from interpscale.data.sources import iter_documents

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
    from interpscale.data.sources import expand_sources

    out = Path(out)
    files = [out / LABELLED / f for f in part_files(out)]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
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
    import json

    from interpscale._atomic import atomic_path
    from interpscale.data.corpus import CorpusConfig, generate_documents

    concepts, docs = generate_documents(CorpusConfig(n_docs=n_docs, seed=seed))
    out = Path(out)
    paths = out / RAW, out / TRUTH
    with atomic_path(paths[0]) as raw, atomic_path(paths[1]) as truth:
        with open(raw, "w", encoding="utf-8") as r, open(truth, "w", encoding="utf-8") as t:
            for d in docs:
                r.write(json.dumps({"chunks": [{"text": x} for x, _ in d]}) + "\n")
                t.write(json.dumps({"chunks": [{"text": x, "concepts": [concepts[c].label for c in labs]}
                                               for x, labs in d]}) + "\n")
    return paths
