"""Simulated two-phase human studies with the design of App. D.1 and known effects, and
power analysis by simulation (App. D.6): simulate the clustered design, refit, count hits."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pandas as pd
from scipy.special import expit
from scipy.stats import norm
from tqdm.auto import tqdm

from interpscale._jsonl import jsonable
from .bayes import OrdinalMixedModel, OrdinalMixedResult
from .frequentist import fit_gaussian_mixed, fit_ordinal
from interpscale.errors import UserError

log = logging.getLogger(__name__)

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
    coherence_link: float = 0.0  # corr. between the Phase 2 concept effect and Phase 1 latent clarity
    gap_slope: float = 0.0  # change in the LLM effect per unit of latent clarity


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


def simulate_study(*, n_concepts: int = 100, n_strata: int = 10, n_annotators: int = 9,
                   n_phase1_responses: int = 303, n_raters: int = 8, n_rated_concepts: int = 34,
                   n_full_concepts: int = 20, n_records: int = 205, effects: dict[str, float] | None = None,
                   thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS, sd: dict[str, float] | None = None,
                   coherence_link: float = 0.9, gap_slope: float = 0.0, seed: int = 0) -> SimulatedStudy:
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
        raise UserError(f"n_raters ({n_raters}) cannot exceed n_annotators ({n_annotators})")
    if not n_full_concepts <= n_rated_concepts <= n_concepts:
        raise UserError("need n_full_concepts <= n_rated_concepts <= n_concepts")
    if n_records < n_full_concepts * n_raters + (n_rated_concepts - n_full_concepts):
        raise UserError(f"n_records={n_records} too small for {n_full_concepts} fully rated concepts")
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
    """Ratings 1..K for the design ``rows`` under the cumulative-logit model of App. D.3 with
    fresh crossed intercepts. The concept intercept is ``sd * (link * clarity + sqrt(1 - link^2)
    * e)`` and the LLM effect moves by ``gap_slope * clarity``, ``clarity`` the latent Phase 1
    clarity per concept (fresh standard normals when not given)."""
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


METHODS = ("ordinal_cluster", "gaussian_mixed", "bayes")


def truth_from_fit(result: OrdinalMixedResult, *, factor: str = "candidate_type") -> StudyTruth:
    """Turn a fitted model's posterior medians into simulation parameters."""
    prefix = f"{factor}["
    effects = {k[len(prefix):-1]: v for k, v in result.coef.items() if k.startswith(prefix)}
    return StudyTruth(effects=effects, thresholds=result.thresholds, sd=dict(result.random_sd))


@dataclass(frozen=True)
class PowerResult:
    table: pd.DataFrame  # n_concepts, n_ratings, power, power_se, mean_estimate, n_sims
    contrast: str
    method: str
    level: float
    truth: StudyTruth

    def to_dict(self) -> dict:
        return jsonable({"contrast": self.contrast, "method": self.method, "level": self.level,
                          "effects": self.truth.effects, "table": self.table.to_dict(orient="records")})

    def summary(self) -> str:
        return (f"Power for {self.contrast} vs reference ({self.method}, {self.level:.0%} interval "
                f"excludes 0)\n{self.table.to_string(index=False, float_format=lambda v: f'{v:.3f}')}")


def _refitter(design_rows: pd.DataFrame, method: str, level: float, coef: str):
    """ratings -> (estimate, interval) on one fixed design (the Bayesian model is compiled once)."""
    if method == "bayes":
        model = OrdinalMixedModel(design_rows)

        def refit(ratings, seed):
            b = model.fit(ratings["rating"], draws=400, tune=400, chains=2, seed=seed, ess_min=0).draws(coef)
            return float(np.median(b)), tuple(np.quantile(b, [0.5 - level / 2, 0.5 + level / 2]))
        return refit
    fit = partial(fit_ordinal, cluster="concept") if method == "ordinal_cluster" else fit_gaussian_mixed

    def refit(ratings, seed):
        r = fit(ratings, level=level)
        return r.coef[coef], r.ci[coef]
    return refit


def power_analysis(truth: StudyTruth | OrdinalMixedResult | None = None, *,
                   n_concepts: Sequence[int] = (5, 10, 15, 20, 34), n_raters: int = 8, n_sims: int = 100,
                   contrast: str = "llm", method: str = "ordinal_cluster", level: float = 0.95, seed: int = 0,
                   progress: bool = False) -> PowerResult:
    """Power to detect ``contrast`` vs the human reference against the number of fully rated
    concepts (each scored by all ``n_raters``): one design per size, fresh crossed intercepts
    and ratings per simulation, a detection when the ``level`` interval excludes zero.

    ``truth``: a ``StudyTruth``, a fitted ``OrdinalMixedResult`` (its posterior medians) or None
    (the simulator's defaults: OR 2.38). ``method``: ``"ordinal_cluster"`` (ML with
    concept-clustered sandwich SEs; fast, mildly liberal with very few concepts),
    ``"gaussian_mixed"`` (crossed REML on raw scores) or ``"bayes"`` (short chains; slow).
    """
    if method not in METHODS:
        raise UserError(f"method must be one of {METHODS}, got {method!r}")
    if isinstance(truth, OrdinalMixedResult):
        truth = truth_from_fit(truth)
    truth = truth or StudyTruth(effects=dict(DEFAULT_EFFECTS), thresholds=DEFAULT_THRESHOLDS, sd=dict(DEFAULT_SD))
    if contrast not in truth.effects:
        raise UserError(f"contrast {contrast!r} not among the simulated effects {sorted(truth.effects)}")
    coef = f"candidate_type[{contrast}]"
    rows = []
    ss = np.random.SeedSequence(seed)
    for n, child in zip(n_concepts, ss.spawn(len(n_concepts))):
        seeds = child.generate_state(n_sims + 1)
        design = simulate_study(n_concepts=max(100, n), n_rated_concepts=n, n_full_concepts=n,
                                n_records=n * n_raters, n_raters=n_raters, n_annotators=max(9, n_raters + 1),
                                effects=truth.effects, thresholds=truth.thresholds, sd=truth.sd,
                                seed=int(seeds[0])).ratings
        refit = _refitter(design, method, level, coef)
        hits, ests = [], []
        for s in tqdm(seeds[1:], desc=f"power n={n}", disable=not progress):
            ratings = resimulate(design, truth, seed=int(s))
            try:
                est, (lo, hi) = refit(ratings, int(s))
            except (ValueError, np.linalg.LinAlgError) as exc:  # e.g. an empty rating level
                log.warning("power n=%d seed=%d: refit failed (%s); counted as a miss", n, s, exc)
                est, lo, hi = np.nan, -np.inf, np.inf
            hits.append(lo > 0 or hi < 0)
            ests.append(est)
        p = float(np.mean(hits))
        rows.append({"n_concepts": n, "n_ratings": len(design), "power": p,
                     "power_se": float(np.sqrt(p * (1 - p) / n_sims)),
                     "mean_estimate": float(np.nanmean(ests)), "n_sims": n_sims})
    return PowerResult(table=pd.DataFrame(rows), contrast=contrast, method=method, level=level, truth=truth)
