"""Simulate a two-phase human study with the design of App. D.1 and known effects."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.special import expit
from scipy.stats import norm

TYPES = ("llm", "human", "embedding", "taxonomy", "filler")
# log-odds vs human labels; LLM = log(2.38) (App. D.3), distractors calibrated so that the
# simulated means land near Table 4 (3.98 / 3.50 / 2.72 / 2.08 / 1.62) under the default SDs.
DEFAULT_EFFECTS = {"llm": float(np.log(2.38)), "embedding": -1.35, "taxonomy": -2.55, "filler": -3.3}
DEFAULT_THRESHOLDS = (-2.65, -1.5, -0.6, 1.45)
DEFAULT_SD = {"rater": 0.5, "concept": 0.8, "context": 0.3, "label": 0.5}
# Phase 1 coherence: latent normal with concept share 0.5; cut-offs give the App. D.2 shares
# (6/11/28/34/21% at 1..5: mean ~3.5, 55% >= 4, 27-28% = 3, 17% <= 2).
PHASE1_CUTS = tuple(norm.ppf([0.06, 0.17, 0.45, 0.79]))


@dataclass(frozen=True)
class StudyTruth:
    effects: dict[str, float]  # log-odds of each type vs the reference (human)
    thresholds: tuple[float, ...]
    sd: dict[str, float]
    coherence_link: float  # corr. between the Phase 2 concept effect and Phase 1 latent clarity
    gap_slope: float  # change in the LLM effect per unit of latent clarity


@dataclass(frozen=True)
class SimulatedStudy:
    ratings: pd.DataFrame  # rater, concept, candidate_type, label, context, rating (+ stratum)
    phase1: pd.DataFrame  # concept, annotator, name, coherence (+ stratum)
    truth: StudyTruth = field(repr=False)


def _phase1_counts(n_concepts: int, n_responses: int, n_annotators: int, rng) -> np.ndarray:
    """Annotators per concept: mostly 3 (the median in App. D.1), some 2 and 4, summing to
    ``n_responses`` (303). Concepts with two names produce the occasional filler label."""
    counts = np.full(n_concepts, 3)
    perm = rng.permutation(n_concepts)
    k = n_concepts // 7
    counts[perm[:k]] -= 1
    counts[perm[k : 2 * k]] += 1
    deficit = n_responses - counts.sum()
    for i in perm[2 * k :][: abs(deficit)]:
        counts[i] += np.sign(deficit)
    return np.clip(counts, 1, n_annotators)


def simulate_study(
    *,
    n_concepts: int = 100,
    n_strata: int = 10,
    n_annotators: int = 9,
    n_phase1_responses: int = 303,
    n_raters: int = 8,
    n_rated_concepts: int = 34,
    n_full_concepts: int = 20,
    n_records: int = 205,
    effects: dict[str, float] | None = None,
    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS,
    sd: dict[str, float] | None = None,
    coherence_link: float = 0.9,
    gap_slope: float = 0.0,
    seed: int = 0,
) -> SimulatedStudy:
    """Generate Phase 1 and Phase 2 tables with the paper's design (App. D.1).

    Phase 1: ``n_concepts`` concepts over ``n_strata`` strata, each named and rated for
    coherence (1–5) by ~3 of ``n_annotators`` annotators. Phase 2: ``n_records`` scoring
    records (rater x concept contexts) over ``n_rated_concepts`` concepts, the first
    ``n_full_concepts`` rated by all ``n_raters`` raters (who are Phase 1 annotators 1..8).
    Each record rates the LLM label, two human labels written by *other* annotators (a
    filler label replaces a missing second one), an embedding and a taxonomy distractor:
    5 ratings per record, 1,025 in all. Ratings follow the cumulative-logit model of
    App. D.3 with crossed rater / concept / context / label intercepts.
    """
    if n_raters > n_annotators:
        raise ValueError(f"n_raters ({n_raters}) cannot exceed n_annotators ({n_annotators})")
    if not n_full_concepts <= n_rated_concepts <= n_concepts:
        raise ValueError("need n_full_concepts <= n_rated_concepts <= n_concepts")
    if n_records < n_full_concepts * n_raters + (n_rated_concepts - n_full_concepts):
        raise ValueError(f"n_records={n_records} too small for {n_full_concepts} fully rated concepts")
    rng = np.random.default_rng(seed)
    effects = {**DEFAULT_EFFECTS, **(effects or {})}
    sd = {**DEFAULT_SD, **(sd or {})}
    truth = StudyTruth(effects=effects, thresholds=tuple(thresholds), sd=sd,
                       coherence_link=coherence_link, gap_slope=gap_slope)
    concepts = [f"c{i:03d}" for i in range(n_concepts)]
    strata = np.arange(n_concepts) % n_strata
    annotators = [f"a{j + 1}" for j in range(n_annotators)]
    clarity = rng.standard_normal(n_concepts)  # latent clarity of each concept's lifted words

    # Phase 1 (App. D.2): coherence = cut(sqrt(.5) clarity + sqrt(.5) noise)
    counts = _phase1_counts(n_concepts, n_phase1_responses, n_annotators, rng)
    p1 = []
    for i, c in enumerate(concepts):
        for a in rng.choice(n_annotators, counts[i], replace=False):
            latent = np.sqrt(0.5) * clarity[i] + np.sqrt(0.5) * rng.standard_normal()
            p1.append((c, annotators[a], f"name {c} by {annotators[a]}",
                       int(np.searchsorted(PHASE1_CUTS, latent) + 1), f"s{strata[i]}"))
    phase1 = pd.DataFrame(p1, columns=["concept", "annotator", "name", "coherence", "stratum"])
    writers = phase1.groupby("concept")["annotator"].apply(list).to_dict()

    # Phase 2 design: which concepts, which raters score each
    per_stratum = [rng.permutation(np.flatnonzero(strata == s)) for s in range(n_strata)]
    order = [int(ix[k]) for k in range(max(map(len, per_stratum))) for ix in per_stratum if k < len(ix)]
    rated = order[:n_rated_concepts]
    raters = annotators[:n_raters]
    records = [(i, r) for i in rated[:n_full_concepts] for r in raters]
    partial = rated[n_full_concepts:]
    extra = n_records - len(records)
    per = np.full(len(partial), extra // max(len(partial), 1))
    per[: extra - per.sum()] += 1
    for i, k in zip(partial, per):
        records += [(i, r) for r in rng.choice(raters, min(k, n_raters), replace=False)]

    rows = []
    for i, r in records:
        c = concepts[i]
        others = [a for a in writers.get(c, []) if a != r]
        humans = list(rng.choice(others, min(2, len(others)), replace=False))
        cands = [("llm", f"{c}:llm")] + [("human", f"{c}:human:{a}") for a in humans]
        cands += [("filler", f"{c}:filler")] * (2 - len(humans))
        cands += [("embedding", f"{c}:embedding"), ("taxonomy", f"{c}:taxonomy")]
        rows += [(r, c, t, lab, f"{c}|{r}", f"s{strata[i]}") for t, lab in cands]
    ratings = pd.DataFrame(rows, columns=["rater", "concept", "candidate_type", "label", "context", "stratum"])
    ratings.insert(5, "rating", draw_ratings(ratings, truth, rng, clarity=dict(zip(concepts, clarity))))
    return SimulatedStudy(ratings=ratings, phase1=phase1, truth=truth)


def draw_ratings(rows: pd.DataFrame, truth: StudyTruth, rng: np.random.Generator, *,
                 clarity: dict[str, float] | None = None) -> np.ndarray:
    """Ratings 1..K for the design ``rows`` (rater, concept, candidate_type, label, context)
    under the cumulative-logit model of App. D.3 with fresh crossed intercepts.

    With ``clarity`` (latent Phase 1 clarity per concept) the concept intercept is
    ``sd * (link * clarity + sqrt(1 - link^2) * e)`` and the LLM effect moves by
    ``gap_slope * clarity``; without it both use a fresh standard-normal clarity.
    """
    sd, link = truth.sd, truth.coherence_link
    u = {}
    for g in ("rater", "concept", "context", "label"):
        keys = pd.unique(rows[g])
        u[g] = dict(zip(keys, sd.get(g, 0.0) * rng.standard_normal(len(keys))))
    concepts = pd.unique(rows["concept"])
    q = clarity or dict(zip(concepts, rng.standard_normal(len(concepts))))
    qc = rows["concept"].map(q).to_numpy(float)
    u_c = rows["concept"].map(u["concept"]).to_numpy(float)
    eta = (rows["candidate_type"].map(lambda t: truth.effects.get(t, 0.0)).to_numpy(float)
           + truth.gap_slope * qc * (rows["candidate_type"] == "llm").to_numpy()
           + link * sd.get("concept", 0.0) * qc + np.sqrt(1 - link**2) * u_c
           + sum(rows[g].map(u[g]).to_numpy(float) for g in ("rater", "context", "label")))
    cum = expit(np.asarray(truth.thresholds)[None, :] - eta[:, None])  # Pr(y <= k), App. D.3
    return (rng.random(len(rows))[:, None] > cum).sum(axis=1) + 1


def resimulate(ratings: pd.DataFrame, truth: StudyTruth, *, seed: int = 0) -> pd.DataFrame:
    """The same design rows with fresh random effects and ratings (for coverage / power runs)."""
    out = ratings.copy()
    out["rating"] = draw_ratings(ratings, truth, np.random.default_rng(seed))
    return out
