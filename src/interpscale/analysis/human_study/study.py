"""The whole Phase 1 + Phase 2 analysis in one call (Table 4, Table 21, App. D) and its files,
with the model-free checks: paired comparisons, means and top-two rates (App. D.4, Table 4),
Phase 1 agreement (App. D.2) and the dependence of Phase 2 fit on coherence (App. D.5)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from interpscale._atomic import atomic_write_text
from interpscale._jsonl import jsonable
from interpscale.errors import UserError
from .bayes import OrdinalMixedResult, Priors, fit_ordinal_mixed
from .design import (RANDOM, parse_random, require_columns, require_no_missing, validate_phase1,
                     validate_ratings, z_value)
from .frequentist import GaussianMixedResult, OrdinalResult, fit_gaussian_mixed, fit_ordinal
from .simulate import TYPES

@dataclass(frozen=True)
class PairedComparison:
    """P(type ``a`` outscores type ``b`` in the same context), ties counted as one half."""

    a: str
    b: str
    prob: float
    ci: tuple[float, float]  # cluster-bootstrap percentile interval (resampling concepts)
    n_pairs: int
    n_clusters: int
    n_boot: int

    def to_dict(self) -> dict:
        return jsonable(dict(self.__dict__))


def paired_comparison(ratings: pd.DataFrame, a: str = "llm", b: str = "human", *, n_boot: int = 2000,
                      cluster: str = "concept", level: float = 0.95, seed: int = 0) -> PairedComparison:
    """Every (a, b) pair of ratings sharing a ``context`` scores 1 if a > b, 1/2 if tied; the CI
    resamples whole ``cluster``s, keeping the dependence of pairs within one (App. D.4: 0.62
    [0.58, 0.66] over 402 pairs)."""
    for t in (a, b):
        if t not in set(ratings["candidate_type"]):
            raise UserError(f"candidate_type {t!r} not in ratings "
                            f"(levels: {sorted(set(ratings['candidate_type']))})")
    A = ratings.loc[ratings["candidate_type"] == a, ["context", cluster, "rating"]]
    B = ratings.loc[ratings["candidate_type"] == b, ["context", "rating"]]
    pairs = A.merge(B, on="context", suffixes=("_a", "_b"))
    if pairs.empty:
        raise UserError(f"no context holds both a {a!r} and a {b!r} rating")
    score = (np.sign(pairs["rating_a"] - pairs["rating_b"]) + 1) / 2
    per = pd.DataFrame({"c": pairs[cluster], "s": score}).groupby("c")["s"].agg(["sum", "size"])
    wins, n = per["sum"].to_numpy(), per["size"].to_numpy(float)
    rng = np.random.default_rng(seed)
    k = len(per)
    counts = rng.multinomial(k, np.full(k, 1.0 / k), size=n_boot)  # (B, clusters)
    boot = (counts @ wins) / (counts @ n)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(boot, [alpha, 1 - alpha])
    return PairedComparison(a=a, b=b, prob=float(wins.sum() / n.sum()), ci=(float(lo), float(hi)),
                            n_pairs=int(n.sum()), n_clusters=k, n_boot=n_boot)


def type_summary(ratings: pd.DataFrame, *, ci: str = "t", n_boot: int = 2000, cluster: str = "concept",
                 level: float = 0.95, seed: int = 0, order: list[str] | None = None) -> pd.DataFrame:
    """Table 4 plus top-two rates: per candidate type the mean fit, SD, n, a ``level`` CI of the
    mean and the share of ratings >= 4 with its CI: t and Wilson intervals (``ci="t"``, ratings
    independent as in Figure 14) or concepts resampled for both (``ci="cluster"``)."""
    if ci not in ("t", "cluster"):
        raise UserError(f"ci must be 't' or 'cluster', got {ci!r}")
    g = ratings.groupby("candidate_type")["rating"]
    out = pd.DataFrame({"mean": g.mean(), "sd": g.std(ddof=1), "n": g.size(),
                        "top_two": g.apply(lambda r: float(np.mean(r >= 4)))})
    alpha = (1 - level) / 2
    if ci == "t":
        half = stats.t.ppf(1 - alpha, np.maximum(out["n"] - 1, 1)) * out["sd"].fillna(0) / np.sqrt(out["n"])
        out["ci_lo"], out["ci_hi"] = out["mean"] - half, out["mean"] + half
        z, n, p = stats.norm.ppf(1 - alpha), out["n"], out["top_two"]
        centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
        width = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
        out["top_two_lo"], out["top_two_hi"] = centre - width, centre + width
    else:
        rng = np.random.default_rng(seed)
        sums = ratings.assign(top=(ratings["rating"] >= 4).astype(float)).pivot_table(
            index=cluster, columns="candidate_type", values=["rating", "top"], aggfunc="sum", fill_value=0)
        cnt = ratings.pivot_table(index=cluster, columns="candidate_type", values="rating",
                                  aggfunc="size", fill_value=0)
        k = len(cnt)
        w = rng.multinomial(k, np.full(k, 1.0 / k), size=n_boot)
        with np.errstate(invalid="ignore", divide="ignore"):
            den = w @ cnt.to_numpy(float)
            for col, name in (("rating", "ci_"), ("top", "top_two_")):
                boot = (w @ sums[col][cnt.columns].to_numpy(float)) / den
                for end, v in zip(("lo", "hi"), np.nanquantile(boot, [alpha, 1 - alpha], axis=0)):
                    out[f"{name}{end}"] = pd.Series(v, index=cnt.columns)
    out = out[["mean", "sd", "n", "ci_lo", "ci_hi", "top_two", "top_two_lo", "top_two_hi"]]
    if order is None:  # the paper's order (Table 4), then any other types by mean
        order = [t for t in TYPES if t in out.index]
        order += [t for t in out.sort_values("mean", ascending=False).index if t not in order]
    return out.loc[[t for t in order if t in out.index]]


def icc1(data: pd.DataFrame, *, target: str, value: str) -> float:
    """One-way random-effects ICC(1) (Shrout & Fleiss ICC(1,1)): (MSB - MSW) / (MSB + (k0 - 1) MSW),
    k0 = (N - sum n_i^2 / N) / (g - 1) the average group size (k when every target has k ratings)."""
    require_columns(data, [target, value], "data")
    require_no_missing(data, [target, value], "data")
    y = data[value].astype(float)
    groups = y.groupby(data[target].astype(str))
    n_i, means = groups.size(), groups.mean()
    N, g = len(y), len(n_i)
    if g < 2 or N <= g:
        raise UserError("ICC needs at least two targets and some with repeated ratings "
                        f"(targets={g}, ratings={N})")
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
    dof = by.size()[multi] - 1
    pooled = np.sqrt(float((by.var(ddof=1)[multi] * dof).sum() / dof.sum()))
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


def coherence_dependence(ratings: pd.DataFrame, phase1: pd.DataFrame, *,
                         types: Sequence[str] = ("human", "llm"), edges: Sequence[float] = (3.0, 4.0),
                         labels: Sequence[str] = ("low", "mid", "high")) -> dict:
    """App. D.5: Pearson correlation of concept mean Phase 1 coherence with Phase 2 fit ratings
    (per type), and the gap (types[1] - types[0] mean fit) per coherence bin, split at ``edges``
    (left-closed: low < 3 <= mid < 4 <= high); ratings without Phase 1 data: ``n_unmatched``."""
    if len(labels) != len(edges) + 1:
        raise UserError(f"need {len(edges) + 1} labels for edges {list(edges)}, got {list(labels)}")
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


@dataclass(frozen=True)
class HumanStudyReport:
    """Every table of the analysis; ``write(out_dir)`` puts them on disk with Figure 14."""

    contrast: str
    reference: str
    table4: pd.DataFrame
    paired: PairedComparison
    ordinal: OrdinalResult
    gaussian: GaussianMixedResult
    bayes: OrdinalMixedResult | None
    phase1: dict | None
    coherence: dict | None
    ordinal_mixed: OrdinalResult | None = None  # ML cumulative-link mixed model (R clmm, Laplace)

    def table21(self) -> pd.DataFrame:
        """Robustness checks for the contrast vs the reference, as rows of Table 21."""
        c, r, t4 = self.contrast, self.reference, self.table4
        key = f"candidate_type[{c}]"

        def odds(fit, interval: str) -> str:
            lo, hi = fit.odds_ratio_ci[key]
            return f"OR {fit.odds_ratio[key]:.2f}, {interval} [{lo:.2f}, {hi:.2f}]"

        rows = [
            ("Mean Phase 2 fit score", f"{c} {t4.loc[c, 'mean']:.2f} vs. {r} {t4.loc[r, 'mean']:.2f}"),
            ("Top-two rating rate (>= 4)", f"{c} {t4.loc[c, 'top_two']:.0%} vs. {r} {t4.loc[r, 'top_two']:.0%}"),
        ]
        if self.bayes is not None:
            rows += [("Bayesian cumulative-link model", odds(self.bayes, f"{self.bayes.level:.0%} CrI")),
                     (f"Posterior probability of {c} advantage", f"{self.bayes.prob_positive[key]:.2f}")]
        if self.ordinal_mixed is not None and key in self.ordinal_mixed.odds_ratio:
            m = self.ordinal_mixed
            rows += [(f"Cumulative-link mixed model ({m.method})", odds(m, f"{m.level:.0%} CI"))]
        g = self.gaussian
        return pd.DataFrame(rows + [
            ("Cumulative-link model, no random effects", odds(self.ordinal, f"{self.ordinal.level:.0%} CI")),
            ("Paired comparison probability", f"{self.paired.prob:.2f}, bootstrap 95% CI "
             f"[{self.paired.ci[0]:.2f}, {self.paired.ci[1]:.2f}]"),
            ("Gaussian mixed model", f"{g.coef[key]:+.2f} points, {self.ordinal.level:.0%} CI "
             f"[{g.ci[key][0]:.2f}, {g.ci[key][1]:.2f}]"),
        ], columns=["analysis", "result"])

    def to_dict(self) -> dict:
        maybe = lambda fit: None if fit is None else fit.to_dict()  # noqa: E731
        return jsonable({
            "contrast": self.contrast, "reference": self.reference,
            "table4": self.table4.reset_index().to_dict(orient="records"),
            "table21": self.table21().to_dict(orient="records"),
            "paired": self.paired.to_dict(), "ordinal": self.ordinal.to_dict(),
            "ordinal_mixed": maybe(self.ordinal_mixed), "gaussian_mixed": self.gaussian.to_dict(),
            "bayes": maybe(self.bayes), "phase1": self.phase1, "coherence": self.coherence,
        })

    def to_markdown(self) -> str:
        t4 = self.table4.reset_index().rename(columns={"candidate_type": "candidate type"})
        parts = ["# Human study analysis", "", "## Phase 2 fit by candidate type (Table 4)", "",
                 t4.to_markdown(index=False, floatfmt=".3f"), "",
                 f"## Robustness checks: {self.contrast} vs {self.reference} (Table 21)", "",
                 self.table21().to_markdown(index=False), ""]
        if self.bayes is not None:
            parts += ["## Bayesian cumulative-link mixed model (App. D.3)", "", "```", self.bayes.summary(), "```", ""]
        mixed = [self.ordinal_mixed.summary(), ""] if self.ordinal_mixed is not None else []
        parts += ["## Frequentist cross-checks", "", "```", *mixed, self.ordinal.summary(), "",
                  self.gaussian.summary(), "```", ""]
        if self.phase1 is not None:
            p = pd.Series(self.phase1).rename_axis("statistic").reset_index(name="value")
            parts += ["## Phase 1 agreement (App. D.2)", "", p.to_markdown(index=False, floatfmt=".3f"), ""]
        if self.coherence is not None:
            corr = ", ".join(f"{k} {v:+.2f}" for k, v in self.coherence["correlation"].items())
            parts += ["## Dependence on coherence (App. D.5)", "", f"Correlation of coherence with fit: {corr}", "",
                      pd.DataFrame(self.coherence["bins"]).to_markdown(index=False, floatfmt=".3f"), ""]
        return "\n".join(parts)

    def write(self, out_dir: str | os.PathLike) -> list[Path]:
        """Write ``human_study.md``, ``human_study.json``, ``table4.csv`` and Figure 14 (PNG/PDF)."""
        from interpscale.analysis.figures.human_study import forest_figure

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = [atomic_write_text(out / "human_study.md", self.to_markdown()),
                 atomic_write_text(out / "human_study.json", json.dumps(self.to_dict(), indent=2, default=str)),
                 atomic_write_text(out / "table4.csv", self.table4.to_csv())]
        paths += forest_figure(self.table4, out_dir=out)
        return paths


def analyse_study(ratings: pd.DataFrame, phase1: pd.DataFrame | None = None, *, contrast: str = "llm",
                  reference: str = "human", bayes: bool = True, clmm: bool = True,
                  random: str | Sequence[str] = RANDOM, level: float = 0.95, draws: int = 1000,
                  tune: int = 1000, chains: int = 4, sampler: str = "auto", mass_matrix: str = "low-rank",
                  target_accept: float = 0.95, priors: Priors | None = None, n_boot: int = 2000,
                  min_rater_ratings: int = 2, seed: int = 0) -> HumanStudyReport:
    """Validate the tables and run every analysis of App. D on them.

    ``random`` picks the random-effect terms of the mixed models (default: rater, concept,
    context and label intercepts; ``"rater,concept"``; ``"candidate_type|rater"`` adds
    random slopes to the Bayesian model, whose intercept groups the maximum-likelihood and
    Gaussian models use). ``bayes=False`` skips the MCMC fit, ``clmm=False`` the Laplace
    fit. Every interval is at ``level``. Ratings of concepts absent from Phase 1 are kept in
    every Phase 2 table and reported as ``n_unmatched`` in the coherence analysis."""
    terms = parse_random(random)
    if not terms:
        raise UserError("random needs at least one grouping factor, e.g. 'rater,concept'")
    z_value(level)
    r = validate_ratings(ratings, reference=reference, min_rater_ratings=min_rater_ratings)
    missing = [g for g in terms if g not in r.columns]
    if missing:
        raise UserError(f"random-effect factor(s) {missing} are not columns of ratings ({list(r.columns)})")
    if contrast not in set(r["candidate_type"]):
        raise UserError(f"contrast type {contrast!r} not in candidate_type levels {sorted(set(r['candidate_type']))}")
    p1 = validate_phase1(phase1) if phase1 is not None else None
    ref = {"candidate_type": reference}
    return HumanStudyReport(
        contrast=contrast, reference=reference, table4=type_summary(r, seed=seed, n_boot=n_boot),
        paired=paired_comparison(r, contrast, reference, n_boot=n_boot, seed=seed),
        ordinal=fit_ordinal(r, reference=ref, cluster="concept", level=level),
        ordinal_mixed=fit_ordinal(r, reference=ref, random=list(terms), level=level) if clmm else None,
        gaussian=fit_gaussian_mixed(r, reference=reference, random=list(terms), level=level),
        bayes=fit_ordinal_mixed(r, reference=ref, random=random, draws=draws, tune=tune, chains=chains, seed=seed,
                                sampler=sampler, mass_matrix=mass_matrix, target_accept=target_accept,
                                priors=priors, level=level) if bayes else None,
        phase1=phase1_agreement(p1) if p1 is not None else None,
        coherence=coherence_dependence(r, p1, types=(reference, contrast)) if p1 is not None else None)
