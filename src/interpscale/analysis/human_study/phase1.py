"""Phase 1 agreement (App. D.2) and the dependence of Phase 2 fit on coherence (App. D.5)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ._validate import require_columns, require_no_missing, validate_phase1


def icc1(data: pd.DataFrame, *, target: str, value: str) -> float:
    """One-way random-effects ICC(1) (Shrout & Fleiss ICC(1,1)): (MSB - MSW) / (MSB + (k0 - 1) MSW).

    ``k0`` is the usual average group size for unbalanced designs,
    (N - sum n_i^2 / N) / (g - 1); it equals k when every target has k ratings.
    """
    require_columns(data, [target, value], "data")
    require_no_missing(data, [target, value], "data")
    y = data[value].astype(float)
    groups = y.groupby(data[target].astype(str))
    n_i, means = groups.size(), groups.mean()
    N, g = len(y), len(n_i)
    if g < 2 or N <= g:
        raise ValueError(f"ICC needs at least two targets and some with repeated ratings (targets={g}, ratings={N})")
    msb = float((n_i * (means - y.mean()) ** 2).sum() / (g - 1))
    msw = float(((y - groups.transform("mean")) ** 2).sum() / (N - g))
    k0 = (N - float((n_i**2).sum()) / N) / (g - 1)
    return (msb - msw) / (msb + (k0 - 1) * msw)


def phase1_agreement(phase1: pd.DataFrame, *, coherent: int = 4) -> dict:
    """App. D.2 statistics: mean coherence; shares >= 4, = 3, <= 2; ICC(1) over concepts;
    within-concept SD (mean of per-concept SDs, concepts with >= 2 responses; the pooled
    root-mean-square version alongside) vs total SD; share of concepts unanimous on the
    coherent (>= ``coherent``) vs not split."""
    df = validate_phase1(phase1)
    y = df["coherence"].astype(float)
    by = df.groupby("concept")["coherence"]
    multi = by.size() >= 2
    sds = by.std(ddof=1)[multi]
    pooled = np.sqrt(float((by.var(ddof=1)[multi] * (by.size()[multi] - 1)).sum() / (by.size()[multi] - 1).sum()))
    unanimous = by.apply(lambda s: bool((s >= coherent).all() or (s < coherent).all()))[multi]
    return {
        "n_responses": int(len(df)),
        "n_concepts": int(df["concept"].nunique()),
        "n_annotators": int(df["annotator"].nunique()),
        "median_annotators_per_concept": float(by.size().median()),
        "mean_coherence": float(y.mean()),
        "share_coherent": float((y >= 4).mean()),
        "share_borderline": float((y == 3).mean()),
        "share_incoherent": float((y <= 2).mean()),
        "icc1": float(icc1(df, target="concept", value="coherence")),
        "within_concept_sd": float(sds.mean()),
        "within_concept_sd_pooled": float(pooled),
        "total_sd": float(y.std(ddof=1)),
        "unanimity": float(unanimous.mean()),
    }


def coherence_dependence(
    ratings: pd.DataFrame,
    phase1: pd.DataFrame,
    *,
    types: Sequence[str] = ("human", "llm"),
    edges: Sequence[float] = (3.0, 4.0),
    labels: Sequence[str] = ("low", "mid", "high"),
) -> dict:
    """App. D.5: Pearson correlation of concept mean Phase 1 coherence with Phase 2 fit ratings
    (per type, over ratings), and the gap (types[1] - types[0] mean fit) per coherence bin.
    Bins split the concept mean coherence at ``edges`` (left-closed): low < 3 <= mid < 4 <= high.
    Ratings of concepts without Phase 1 data are reported as ``n_unmatched``, not used.
    """
    if len(labels) != len(edges) + 1:
        raise ValueError(f"need {len(edges) + 1} labels for edges {list(edges)}, got {list(labels)}")
    p1 = validate_phase1(phase1)
    coh = p1.groupby("concept")["coherence"].mean().rename("coherence")
    r = ratings.assign(concept=ratings["concept"].astype(str)).join(coh, on="concept")
    unmatched = int(r["coherence"].isna().sum())
    r = r.dropna(subset=["coherence"])
    r["bin"] = pd.Categorical.from_codes(np.searchsorted(np.asarray(edges), r["coherence"], side="right"),
                                         categories=list(labels))
    corr = {}
    for t in types:
        s = r[r["candidate_type"] == t]
        corr[t] = float(np.corrcoef(s["coherence"], s["rating"])[0, 1]) if len(s) > 2 else float("nan")
    base, other = types[0], types[1]
    bins = []
    for lab in labels:
        s = r[r["bin"] == lab]
        m = s.groupby("candidate_type")["rating"].mean()
        bins.append({"bin": lab, "n_concepts": int(s["concept"].nunique()),
                     f"mean_{base}": float(m.get(base, np.nan)), f"mean_{other}": float(m.get(other, np.nan)),
                     "gap": float(m.get(other, np.nan) - m.get(base, np.nan))})
    return {"correlation": corr, "bins": bins, "edges": list(edges), "n_unmatched": unmatched}
