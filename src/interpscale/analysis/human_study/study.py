"""One call for the whole Phase 1 + Phase 2 analysis (Table 4, Table 21, App. D) and its files."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from interpscale._atomic import atomic_write_text
from interpscale._jsonl import jsonable
from ._common import z_value
from .bayes import Priors, fit_ordinal_mixed
from .design import RANDOM, parse_random, validate_phase1, validate_ratings
from .frequentist import OrdinalResult, fit_ordinal
from .gaussian import GaussianMixedResult, fit_gaussian_mixed
from .posterior import OrdinalMixedResult
from .robust import PairedComparison, coherence_dependence, paired_comparison, phase1_agreement, type_summary


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
            p = pd.DataFrame([self.phase1]).T.reset_index()
            p.columns = ["statistic", "value"]
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


def analyse_study(
    ratings: pd.DataFrame,
    phase1: pd.DataFrame | None = None,
    *,
    contrast: str = "llm",
    reference: str = "human",
    bayes: bool = True,
    clmm: bool = True,
    random: str | Sequence[str] = RANDOM,
    level: float = 0.95,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    sampler: str = "auto",
    mass_matrix: str = "low-rank",
    target_accept: float = 0.95,
    priors: Priors | None = None,
    n_boot: int = 2000,
    min_rater_ratings: int = 2,
    seed: int = 0,
) -> HumanStudyReport:
    """Validate the tables and run every analysis of App. D on them.

    ``random`` picks the random-effect terms of the mixed models (default: rater, concept,
    context and label intercepts; ``"rater,concept"``; ``"candidate_type|rater"`` adds
    random slopes to the Bayesian model, whose intercept groups the maximum-likelihood and
    Gaussian models use). ``bayes=False`` skips the MCMC fit, ``clmm=False`` the Laplace
    fit. Every interval is at ``level``. Ratings of concepts absent from Phase 1 are kept in
    every Phase 2 table and reported as ``n_unmatched`` in the coherence analysis."""
    terms = parse_random(random)
    if not terms:
        raise ValueError("random needs at least one grouping factor, e.g. 'rater,concept'")
    z_value(level)
    r = validate_ratings(ratings, reference=reference, min_rater_ratings=min_rater_ratings)
    missing = [g for g in terms if g not in r.columns]
    if missing:
        raise ValueError(f"random-effect factor(s) {missing} are not columns of ratings ({list(r.columns)})")
    if contrast not in set(r["candidate_type"]):
        raise ValueError(f"contrast type {contrast!r} not in candidate_type levels {sorted(set(r['candidate_type']))}")
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
        coherence=coherence_dependence(r, p1, types=(reference, contrast)) if p1 is not None else None,
    )
