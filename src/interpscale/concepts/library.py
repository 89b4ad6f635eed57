"""Stage 2 (§4.2.2): tags → a deduplicated library of concepts with semantic cards (the
steps: docs/concepts.md, the ``library`` stage). Offline embeddings are the truncated SVD of
the tag–chunk PPMI matrix, PPMI(t, c) = max(0, log P(t, c) / (P(t) P(c))); k-means picks k by
silhouette (§4.2.2 sweeps k and reads silhouette and coherence); near-duplicates merge as
connected components of a cosine / Jaccard graph (the paper: Louvain communities on a k-NN
graph, App. C). A chunk inherits concept c when at least ``min_tags`` of its tags fall in
c's cluster (§4.2.3: tag → cluster → concept inheritance; one stray tag is not enough).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from interpscale.concepts.store import CONCEPTS_FILE, LIBRARY, read_json, write_json
from interpscale.concepts.tag import read_tags
from interpscale.data.corpus import write_concepts
from interpscale.errors import UserError

log = logging.getLogger(__name__)

MIN_FACTORS = 8
K_GRID = (4, 6, 8, 12, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)  # those < n_tags / 3


@dataclass(frozen=True)
class LibraryOptions:
    n_concepts: Optional[int] = None  # k; None: best silhouette over K_GRID
    min_tag_support: int = 3
    min_tags: int = 2  # tags of a chunk in a cluster for the chunk to inherit it
    min_support: int = 5
    min_coherence: float = 0.2
    dedupe_cos: float = 0.9
    dedupe_jaccard: float = 0.8
    dim: int = 64  # SVD factors computed; the eigengap picks how many are kept
    n_words: int = 8
    seed: int = 0


@dataclass
class Library:
    """The clustering behind a concept library: which tags make each concept."""

    cards: list[dict]
    tags: list[list[str]]  # member tags per concept, most central first
    stats: list[dict]  # support, coherence per concept
    dropped: list[dict] = field(default_factory=list)
    k: int = 0
    silhouette: dict[str, float] = field(default_factory=dict)
    embedding: str = ""
    min_tags: int = 2

    def to_dict(self) -> dict:
        return {"k": self.k, "min_tags": self.min_tags, "silhouette": self.silhouette, "embedding": self.embedding,
                "concepts": [{**card, "tags": ts, **st} for card, ts, st in zip(self.cards, self.tags, self.stats)],
                "dropped": self.dropped}


def inherit(tags: Sequence[str], tag_map: dict[str, int], min_tags: int) -> list[int]:
    """Concepts a chunk inherits from its tags: those holding ≥ ``min_tags`` of them."""
    hits = Counter(tag_map[t] for t in tags if t in tag_map)
    return sorted(c for c, n in hits.items() if n >= min_tags)


def ppmi_embeddings(chunk_tags: Sequence[Sequence[int]], n_tags: int, dim: int, seed: int
                    ) -> tuple[np.ndarray, int]:
    """Unit tag vectors U_d·sqrt(S_d) from the truncated SVD of the tag–chunk PPMI matrix,
    and d: the number of factors kept, at the largest ratio of consecutive singular values
    among the first ``dim`` (the eigengap heuristic; von Luxburg 2007, §8.3), at least
    ``MIN_FACTORS`` (on real text the first gap, between broad themes, is often the largest)."""
    from scipy import sparse
    from scipy.sparse.linalg import svds

    rows = np.array([t for ts in chunk_tags for t in ts], dtype=np.int64)
    cols = np.array([c for c, ts in enumerate(chunk_tags) for _ in ts], dtype=np.int64)
    a = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n_tags, len(chunk_tags)))
    total = a.sum()
    pt, pc = np.asarray(a.sum(1)).ravel() / total, np.asarray(a.sum(0)).ravel() / total
    coo = a.tocoo()
    pmi = np.log(coo.data / total / (pt[coo.row] * pc[coo.col]))
    m = sparse.csr_matrix((np.maximum(pmi, 0.0), (coo.row, coo.col)), shape=a.shape)
    k = max(3, min(dim, n_tags - 1, len(chunk_tags) - 1))
    v0 = np.random.default_rng(seed).random(min(m.shape))  # svds' start vector: seeded, so reproducible
    u, sv, _ = svds(m, k=k, v0=v0)
    order = np.argsort(-sv)
    u, sv = u[:, order], np.maximum(sv[order], 1e-12)
    keep = np.arange(1, len(sv))  # keeping i factors cuts between s_{i-1} and s_i
    keep = keep[keep >= min(MIN_FACTORS, len(sv) - 1)]
    d = int(keep[np.argmax(sv[keep - 1] / sv[keep])])
    return _unit(u[:, :d] * np.sqrt(sv[:d])), d


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def cluster(emb: np.ndarray, k: Optional[int], seed: int, hint: Optional[int] = None
            ) -> tuple[np.ndarray, int, dict[str, float]]:
    """k-means labels over unit tag vectors, the k used, and the silhouette (cosine) of
    each k tried: ``k`` if given, else ``K_GRID`` plus ``hint`` (the eigengap's d)."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    grid = [k] if k else sorted({g for g in (*K_GRID, hint or 0) if 2 <= g < len(emb) // 3}) or [max(2, len(emb) // 3)]
    labels, sil = {}, {}
    sub = np.random.default_rng(seed).choice(len(emb), size=min(len(emb), 4000), replace=False)  # O(n^2) score
    for g in grid:
        if g > len(emb):
            raise UserError(f"{g} concepts asked for but only {len(emb)} tags pass the support filter")
        labels[g] = KMeans(n_clusters=g, n_init=4, random_state=seed).fit_predict(emb)
        sil[g] = float(silhouette_score(emb[sub], labels[g][sub], metric="cosine")) if 1 < g < len(sub) else 0.0
    best = max(sil, key=sil.get)  # the first k with the highest silhouette
    return labels[best], best, {str(g): round(s, 4) for g, s in sil.items()}


def offline_card(tags: Sequence[str], n_words: int) -> dict:
    """A card from a cluster's most central tags: the label names the top two."""
    return {"label": " / ".join(tags[:2]), "description": f"Text about {', '.join(tags[:3])}.",
            "words": list(tags[:n_words])}


def build_library(out: str | os.PathLike, opts: LibraryOptions = LibraryOptions(), *,
                  embed: Optional[Callable[[list[str]], np.ndarray]] = None,
                  name: Optional[Callable[[list[list[str]]], list[Optional[dict]]]] = None) -> Library:
    """Stage 2 over DIR/tags.jsonl; writes DIR/library/ and DIR/concepts.json."""
    out = Path(out)
    chunk_tags = [r["flat"] for r in read_tags(out)]
    support = Counter(t for ts in chunk_tags for t in ts)
    vocab = sorted(t for t, n in support.items() if n >= opts.min_tag_support)
    if len(vocab) < 4:
        raise UserError(f"{out / 'tags.jsonl'}: only {len(vocab)} tags occur in >= {opts.min_tag_support} chunks; "
                        "tag a larger sample (--sample) or lower --min-tag-support")
    index = {t: i for i, t in enumerate(vocab)}
    members = [[index[t] for t in ts if t in index] for ts in chunk_tags]
    if embed is None:
        emb, d = ppmi_embeddings(members, len(vocab), opts.dim, opts.seed)
        how = f"offline: {d} SVD factors of the tag-chunk PPMI matrix"
    else:
        vocab, members, emb = _embedded(vocab, members, np.asarray(embed(vocab), dtype=np.float64))
        d, how = None, "judge endpoint /embeddings"
    labels, k, sil = cluster(emb, opts.n_concepts, opts.seed, hint=d)
    lib = _finish(*_clusters(vocab, emb, labels, k, members, support, opts), opts, name)
    lib.k, lib.silhouette, lib.embedding, lib.min_tags = k, sil, how, opts.min_tags
    write_json(out / LIBRARY / "library.json", lib.to_dict())
    write_concepts(lib.cards, out / CONCEPTS_FILE)
    log.info("library: k=%d, %d concepts kept, %d dropped", k, len(lib.cards), len(lib.dropped))
    return lib


def _embedded(vocab: list[str], members: list[list[int]], emb: np.ndarray):
    """Drop the tags the endpoint could not embed (NaN rows) and re-index the chunks' tags."""
    ok = ~np.isnan(emb).any(1)
    if ok.sum() < 4:
        raise UserError(f"the embeddings endpoint embedded only {int(ok.sum())} of {len(vocab)} tags")
    if not ok.all():
        log.warning("%d of %d tags could not be embedded and are left out", int((~ok).sum()), len(vocab))
    new = np.cumsum(ok) - 1
    members = [[int(new[m]) for m in ms if ok[m]] for ms in members]
    return [t for t, k in zip(vocab, ok) if k], members, _unit(emb[ok])


def _clusters(vocab, emb, labels, k, members, support, opts) -> tuple[list[dict], list[dict]]:
    """Clusters that pass the support and coherence filters, and the dropped ones."""
    from scipy import sparse

    rows = [j for j, ms in enumerate(members) for _ in ms]
    a = sparse.csr_matrix((np.ones(len(rows)), (rows, [m for ms in members for m in ms])), shape=(len(members), len(vocab)))
    onehot = sparse.csr_matrix((np.ones(len(labels)), (np.arange(len(labels)), labels)), shape=(len(vocab), k))
    hits = np.asarray((a @ onehot).todense())  # [chunk, cluster]: the chunk's tags in each cluster
    kept, dropped = [], []
    for c in range(k):
        idx = np.flatnonzero(labels == c)
        cen = emb[idx].mean(0)
        cen_u = cen / max(np.linalg.norm(cen), 1e-12)
        cos = emb[idx] @ cen_u
        order = idx[np.argsort(-(cos * np.log1p([support[vocab[i]] for i in idx])))]
        tags = [vocab[i] for i in order]
        chunks = set(np.flatnonzero(hits[:, c] >= opts.min_tags).tolist())
        rec = {"tags": tags, "support": len(chunks), "coherence": round(float(cos.mean()), 4),
               "centroid": cen_u, "chunks": chunks}
        if len(chunks) < opts.min_support:
            dropped.append({"tags": tags[:10], "why": f"support {len(chunks)} < {opts.min_support}"})
        elif rec["coherence"] < opts.min_coherence:
            dropped.append({"tags": tags[:10], "why": f"coherence {rec['coherence']} < {opts.min_coherence}"})
        else:
            kept.append(rec)
    return kept, dropped


def dedupe(clusters: list[dict], cos: float, jaccard: float) -> list[dict]:
    """Merge near-duplicate clusters: connected components of the graph joining two
    clusters whose unit centroids have cosine >= ``cos`` or whose chunk sets have Jaccard
    >= ``jaccard``. A cluster is ``{"tags", "support", "coherence", "centroid", "chunks"}``;
    a merged one lists the larger clusters' tags first and counts ``merged_from``."""
    from scipy.sparse.csgraph import connected_components

    n = len(clusters)
    near = np.eye(n, dtype=bool)
    for a in range(n):
        for b in range(a + 1, n):
            ca, cb = clusters[a]["chunks"], clusters[b]["chunks"]
            jac = len(ca & cb) / max(1, len(ca | cb))
            near[a, b] = float(clusters[a]["centroid"] @ clusters[b]["centroid"]) >= cos or jac >= jaccard
    k, comp = connected_components(near, directed=False)  # numbered in order of their first cluster
    merged = []
    for c in range(k):
        recs = [clusters[i] for i in np.flatnonzero(comp == c)]  # one cluster: itself, renormalised
        tags = [t for r in sorted(recs, key=lambda r: -r["support"]) for t in r["tags"]]
        chunks = set().union(*(r["chunks"] for r in recs))
        cen = sum(r["centroid"] for r in recs)
        merged.append({"tags": tags, "support": len(chunks), "coherence": min(r["coherence"] for r in recs),
                       "centroid": cen / max(np.linalg.norm(cen), 1e-12), "chunks": chunks, "merged_from": len(recs)})
    return merged


def _finish(kept, dropped, opts, name) -> Library:
    """Cards for the kept clusters, near-duplicates merged."""
    merged = dedupe(kept, opts.dedupe_cos, opts.dedupe_jaccard)
    named = name([m["tags"][:50] for m in merged]) if name is not None else [None] * len(merged)
    cards = []
    for m, nm in zip(merged, named):
        card = offline_card(m["tags"], opts.n_words)
        if nm is not None:
            card.update(label=nm["name"], description=nm["description"])
        cards.append(card)
    _unique_labels(cards)
    stats = [{"support": m["support"], "coherence": m["coherence"], "merged_from": m["merged_from"]} for m in merged]
    return Library(cards, [m["tags"] for m in merged], stats, dropped)


def _unique_labels(cards: list[dict]) -> None:
    """``data prepare --concepts`` needs distinct labels: repeats get ``(2)``, ``(3)``."""
    seen: Counter[str] = Counter()
    for c in cards:
        seen[c["label"]] += 1
        if seen[c["label"]] > 1:
            c["label"] = f"{c['label']} ({seen[c['label']]})"


def inherited(out: str | os.PathLike) -> tuple[dict, list[dict], list[list[int]]]:
    """The library, the tagged sample (``read_tags``) and the concepts each sampled chunk inherits."""
    lib = read_json(Path(out) / LIBRARY / "library.json", "library")
    tag_map = {t: c for c, con in enumerate(lib["concepts"]) for t in con["tags"]}
    recs = read_tags(out)
    return lib, recs, [inherit(r["flat"], tag_map, lib.get("min_tags", 2)) for r in recs]
