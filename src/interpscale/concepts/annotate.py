"""Stage 3 (§4.2.3, §4.5.1): a multi-label annotator trained on the tagged sample, applied
to the whole corpus streaming, one task per chunk file.

A sampled chunk's positives are the concepts it inherits from its tags
(``library.inherit``); every other concept is *unlabeled*, not negative. Loss: the
non-negative PU risk of Kiryo et al. (2017), logistic loss ℓ, per concept k with class
prior π_k = (labeled rate of k) / ``label_frequency``, P the labeled positives, U the whole
sample (why nnPU and not BCE: docs/concepts.md, "Why nnPU"):

    R_k(f) = π_k E_P[ℓ(f, +1)] + max(0, E_U[ℓ(f, -1)] - π_k E_P[ℓ(f, -1)])

Features: hashed word uni- and bigrams (stateless, so the corpus is featurised in constant
memory; only the columns seen in training carry weights), or the endpoint's embeddings. One
linear score per concept, trained with Adam; thresholds per concept on a held-out split,
maximising recall² / P(ŷ = 1) (Lee & Liu 2003), computable without negatives.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from interpscale._atomic import atomic_path
from interpscale.concepts.library import inherited
from interpscale.concepts.store import ANNOTATOR, CACHE_NAME, LABELLED, iter_doc_chunks, part_files, read_json, write_json
from interpscale.errors import FailedWork, UserError

log = logging.getLogger(__name__)

N_FEATURES = 1 << 20
APPLY_BATCH = 512  # chunks featurised and scored at once


@dataclass(frozen=True)
class AnnotatorOptions:
    label_frequency: float = 0.9
    heldout: float = 0.2
    epochs: int = 60
    lr: float = 0.05
    weight_decay: float = 1e-4
    features: str = "hashed"  # or "embedding": the endpoint's /embeddings (LLM path only)
    max_concepts: int = 8  # per chunk (the paper caps predictions per domain)
    min_concepts: int = 1  # a chunk with no concept over its threshold keeps its best one
    min_heldout_positives: int = 3  # fewer: threshold at score 0 (probability 1/2)
    seed: int = 0


def featurizer():
    """Hashed uni- and bigram counts, sublinear tf, L2-normalised rows (stateless)."""
    from sklearn.feature_extraction.text import HashingVectorizer

    return HashingVectorizer(n_features=N_FEATURES, ngram_range=(1, 2), alternate_sign=False, norm="l2",
                             lowercase=True, token_pattern=r"(?u)\b\w\w+\b")


def logistic_loss(z: np.ndarray) -> np.ndarray:  # ℓ(z, +1) = log(1 + e^{-z})
    return np.logaddexp(0.0, -z)


def nnpu_step(z: np.ndarray, y: np.ndarray, prior: np.ndarray) -> tuple[float, np.ndarray]:
    """nnPU risk (module doc) summed over concepts, and dR/dz. z, y: [n, K]; prior: [K]."""
    n_pos = np.maximum(y.sum(0), 1.0)
    n = z.shape[0]
    lp, ln = logistic_loss(z), logistic_loss(-z)  # ℓ(z,+1), ℓ(z,-1)
    r_pos = prior * (lp * y).sum(0) / n_pos
    r_neg = ln.sum(0) / n - prior * (ln * y).sum(0) / n_pos
    active = r_neg > 0  # max(0, .): the negative part stops pushing once it would go below zero
    s = 0.5 * (1.0 + np.tanh(0.5 * z))  # σ(z), without overflow
    g = prior * (-(1 - s)) * y / n_pos  # d ℓ(z,+1)/dz = -(1 - σ(z))
    g = g + active * (s / n - prior * s * y / n_pos)  # d ℓ(z,-1)/dz = σ(z)
    return float((r_pos + np.maximum(r_neg, 0)).sum()), g


def train_linear(x, y: np.ndarray, prior: np.ndarray, opts: AnnotatorOptions) -> tuple[np.ndarray, np.ndarray]:
    """Weights [d, K] and biases [K] minimising the nnPU risk with full-batch Adam."""
    d, k = x.shape[1], y.shape[1]
    w, b = np.zeros((d, k)), np.zeros(k)
    mw, vw, mb, vb = np.zeros_like(w), np.zeros_like(w), np.zeros_like(b), np.zeros_like(b)
    b1, b2, eps = 0.9, 0.999, 1e-8
    for t in range(1, opts.epochs + 1):
        _, g = nnpu_step(x @ w + b, y, prior)
        gw, gb = x.T @ g + opts.weight_decay * w, g.sum(0)
        mw, vw = b1 * mw + (1 - b1) * gw, b2 * vw + (1 - b2) * gw * gw
        mb, vb = b1 * mb + (1 - b1) * gb, b2 * vb + (1 - b2) * gb * gb
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        w -= opts.lr * (mw / c1) / (np.sqrt(vw / c2) + eps)
        b -= opts.lr * (mb / c1) / (np.sqrt(vb / c2) + eps)
    return w, b


def pu_thresholds(z: np.ndarray, y: np.ndarray, min_pos: int) -> np.ndarray:
    """Per concept, the score threshold maximising recall² / P(ŷ=1) (Lee & Liu 2003) on held-out data."""
    th = np.zeros(z.shape[1])
    for k in range(z.shape[1]):
        pos = z[y[:, k] > 0, k]
        if len(pos) < min_pos:
            continue
        cand = np.unique(pos)[:, None]
        rec, rate = (pos >= cand).mean(1), (z[:, k] >= cand).mean(1)
        th[k] = cand[np.argmax(rec * rec / np.maximum(rate, 1e-12)), 0]  # the first best, as a scan would
    return th


@dataclass
class Features:
    """The annotator's features: the hashed n-gram columns ``cols`` seen in training, or
    with an ``embedder`` the endpoint's ``/embeddings`` (cached; a chunk it could not embed
    gets no concepts and is counted)."""

    cols: np.ndarray
    embedder: Optional[Callable[[Sequence[str]], np.ndarray]] = None

    @property
    def kind(self) -> str:
        return "hashed" if self.embedder is None else "embedding"

    def transform(self, texts: Sequence[str]):
        """(rows [n, d], which rows are usable [n])."""
        if self.embedder is None:
            return featurizer().transform(texts)[:, self.cols].tocsr(), np.ones(len(texts), bool)
        x = np.asarray(self.embedder(list(texts)), dtype=np.float64)
        ok = ~np.isnan(x).any(1)
        return np.where(ok[:, None], x, 0.0), ok


@dataclass
class Annotator:
    """A trained annotator: one linear score per concept over its features."""

    features: Features
    w: np.ndarray  # [d, K]
    b: np.ndarray  # [K]
    thresholds: np.ndarray  # [K]
    labels: list[str]
    max_concepts: int = 8
    min_concepts: int = 1

    def predict(self, texts: Sequence[str]) -> list[Optional[list[str]]]:
        """Each chunk's concepts, most confident first (margin over its threshold); None
        for a chunk whose features could not be computed."""
        x, ok = self.features.transform(texts)
        z = np.asarray(x @ self.w) + self.b - self.thresholds
        out: list[Optional[list[str]]] = []
        for row, good in zip(z, ok):
            order = np.argsort(-row, kind="stable")
            keep = [int(i) for i in order[: self.max_concepts] if row[i] >= 0]
            if len(keep) < self.min_concepts:
                keep = [int(i) for i in order[: self.min_concepts]]
            out.append([self.labels[i] for i in keep] if good else None)
        return out

    def save(self, folder: Path, meta: dict) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(folder / "model.npz", suffix=".npz") as tmp:
            np.savez(tmp, cols=self.features.cols, w=self.w.astype(np.float32), b=self.b, thresholds=self.thresholds)
        write_json(folder / "meta.json", {"labels": self.labels, "max_concepts": self.max_concepts,
                                          "min_concepts": self.min_concepts, "features": self.features.kind, **meta})

    @classmethod
    def load(cls, folder: str | os.PathLike) -> "Annotator":
        """The annotator in ``folder``; embedding features reconnect to the endpoint recorded
        in meta.json, caching in the concepts directory's judge cache."""
        folder = Path(folder)
        meta = read_json(folder / "meta.json", "annotate")
        with np.load(folder / "model.npz", allow_pickle=False) as z:
            cols, w, b, th = z["cols"], z["w"].astype(np.float64), z["b"], z["thresholds"]
        embedder = None
        if meta.get("features", "hashed") == "embedding":
            from interpscale.concepts.llm import endpoint_embedder

            embedder = endpoint_embedder(meta["endpoint"], folder.parent / CACHE_NAME)
        return cls(Features(cols, embedder), w, b, th, meta["labels"], meta["max_concepts"], meta["min_concepts"])


def train_annotator(out: str | os.PathLike, opts: AnnotatorOptions = AnnotatorOptions(), *,
                    embedder: Optional[Callable[[Sequence[str]], np.ndarray]] = None,
                    endpoint: Optional[dict] = None) -> dict:
    """Stage 3, training: DIR/annotator/ (model.npz, meta.json); returns the meta. With
    ``embedder`` (and the ``endpoint`` settings it was built from, recorded so the per-file
    tasks can reconnect) the features are the endpoint's embeddings, else hashed n-grams."""
    out = Path(out)
    lib, recs, positives = inherited(out)
    texts, labels = [r["text"] for r in recs], [c["label"] for c in lib["concepts"]]
    if not labels:
        raise UserError(f"{out}: the concept library is empty; nothing to annotate with")
    y = np.zeros((len(recs), len(labels)))  # the tagged sample's inherited positives
    for i, cs in enumerate(positives):
        y[i, cs] = 1.0
    held = np.random.default_rng([opts.seed, 3]).random(len(texts)) < opts.heldout
    if embedder is None:  # the columns of the training chunks' n-grams
        feats = Features(np.unique(featurizer().transform([t for t, h in zip(texts, held) if not h]).indices))
    else:
        feats = Features(np.zeros(0, np.int64), embedder)
    x, ok = feats.transform(texts)
    train, test = ~held & ok, held & ok  # chunks without features sit out
    prior = np.clip(y[train].mean(0) / opts.label_frequency, 1e-4, 0.5)
    w, b = train_linear(x[train], y[train], prior, opts)
    th = pu_thresholds(np.asarray(x[test] @ w) + b, y[test], opts.min_heldout_positives)
    ann = Annotator(feats, w, b, th, labels, opts.max_concepts, opts.min_concepts)
    meta = {"options": asdict(opts), "n_train": int(train.sum()), "n_heldout": int(test.sum()),
            "n_without_features": int((~ok).sum()), "prior": prior.round(5).tolist(),
            "heldout_positives": y[test].sum(0).astype(int).tolist(),
            "heldout_ids": [int(i) for i in np.flatnonzero(test)], "endpoint": endpoint or {},
            "loss": "nnPU (Kiryo et al. 2017), logistic loss; thresholds: recall^2/P(yhat=1) (Lee & Liu 2003)"}
    ann.save(out / ANNOTATOR, meta)
    return meta


def _stamp(annotator_dir: str, src: str) -> dict:
    """What a labelled file was made from: the annotator's files and the chunk file."""
    h = hashlib.sha256()
    for name in ("model.npz", "meta.json"):
        h.update((Path(annotator_dir) / name).read_bytes())
    st = os.stat(src)
    return {"annotator": h.hexdigest()[:16], "chunks_size": st.st_size, "chunks_mtime_ns": st.st_mtime_ns}


def _done_path(annotator_dir: str, dest: str) -> Path:
    return Path(annotator_dir) / "done" / (Path(dest).stem + ".json")


def finished(annotator_dir: str, src: str, dest: str) -> Optional[dict]:
    """The stats of ``dest`` when it is complete and made from this annotator and chunk file."""
    done = _done_path(annotator_dir, dest)
    if not (done.exists() and Path(dest).exists()):
        return None
    rec = json.loads(done.read_text())
    return rec["stats"] if rec.get("stamp") == _stamp(annotator_dir, src) else None


def annotate_file(annotator_dir: str, src: str, dest: str) -> dict:
    """One chunk file → its labelled file, streamed in batches (constant memory); one task.
    A marker in DIR/annotator/done/ records what it was made from, so a rerun skips it."""
    ann = Annotator.load(annotator_dir)
    stats = {"file": os.path.basename(dest), "docs": 0, "chunks": 0, "labels": 0, "without_features": 0}
    with atomic_path(dest) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        batch: list[list[str]] = []

        def flush() -> None:
            texts = [t for ts in batch for t in ts]
            preds = ann.predict(texts) if texts else []
            stats["without_features"] += sum(p is None for p in preds)
            stats["labels"] += sum(len(p or []) for p in preds)
            it = iter(preds)
            for ts in batch:
                fh.write(json.dumps({"chunks": [{"text": t, "concepts": next(it) or []} for t in ts]},
                                    ensure_ascii=False) + "\n")
            batch.clear()

        for _, texts in iter_doc_chunks(Path(src)):
            batch.append(texts)
            stats["docs"] += 1
            stats["chunks"] += len(texts)
            if sum(map(len, batch)) >= APPLY_BATCH:
                flush()
        flush()
    write_json(_done_path(annotator_dir, dest), {"stamp": _stamp(annotator_dir, src), "stats": stats})
    return stats


def annotate_corpus(out: str | os.PathLike, *, executor: str = "inline", slurm: dict | None = None,
                    max_parallel: int = 2, progress: Optional[Callable[[int, int], None]] = None) -> list[dict]:
    """Stage 3, application: DIR/labelled/NNNNN.jsonl for every chunk file, one task per file
    (``inline`` in this process, else a job of ``interpscale.executors``)."""
    from interpscale.executors import EXECUTORS, JobsFailed, make_executor

    out = Path(out)
    if executor not in ("inline", *EXECUTORS):
        raise UserError(f"unknown executor {executor!r}; expected one of {('inline', *EXECUTORS)}")
    read_json(out / ANNOTATOR / "meta.json", "annotate")
    files = part_files(out)
    (out / LABELLED).mkdir(parents=True, exist_ok=True)
    args = [(str(out / ANNOTATOR), str(out / "chunks" / f), str(out / LABELLED / f)) for f in files]
    results = {i: finished(*a) for i, a in enumerate(args)}
    todo = [i for i, r in results.items() if r is None]
    if len(todo) < len(args):
        log.info("annotate: %d of %d files already labelled by this annotator", len(args) - len(todo), len(args))
    if executor == "inline":
        results.update({i: annotate_file(*args[i]) for i in todo})
    elif todo:
        launcher = make_executor(executor, out / ".submitit", name="concepts-annotate", slurm=slurm,
                                 max_parallel=max_parallel)
        with launcher:
            jobs = launcher.map(annotate_file, *zip(*[args[i] for i in todo]))
            try:
                results.update(zip(todo, launcher.wait(jobs, progress=progress)))
            except JobsFailed as exc:
                raise FailedWork(f"{len(exc.errors)} annotation task(s) failed (finished files are kept; "
                                 f"rerun to resume):\n{exc}") from None
    return [results[i] for i in range(len(args))]
