"""Human-rating study analysis (Steerling §4.4, App. D): ordinal mixed models and checks.

    from interpscale.analysis.human_study import simulate_study, analyse_study
    study = simulate_study(seed=0)                       # the paper's design, known effects
    report = analyse_study(study.ratings, study.phase1)  # Tables 4 and 21, App. D.2-D.5
    report.write("out/")                                 # markdown, JSON, Figure 14
"""

from .bayes import Diagnostics, OrdinalMixedModel, OrdinalMixedResult, Priors, build_model, fit_ordinal_mixed
from .design import Design, build_design, parse_random, validate_phase1, validate_ratings
from .frequentist import GaussianMixedResult, OrdinalResult, compare, fit_gaussian_mixed, fit_ordinal
from .simulate import (PowerResult, SimulatedStudy, StudyTruth, draw_ratings, power_analysis, resimulate,
                       simulate_study, truth_from_fit)
from .study import (HumanStudyReport, PairedComparison, analyse_study, coherence_dependence, icc1,
                    paired_comparison, phase1_agreement, type_summary)

__all__ = [
    "Design", "Diagnostics", "GaussianMixedResult", "HumanStudyReport", "OrdinalMixedModel", "OrdinalMixedResult", "OrdinalResult",
    "PairedComparison", "PowerResult", "Priors", "SimulatedStudy", "StudyTruth", "analyse_study", "build_design",
    "build_model", "coherence_dependence", "compare", "draw_ratings", "fit_gaussian_mixed", "fit_ordinal", "fit_ordinal_mixed", "icc1",
    "paired_comparison", "parse_random", "phase1_agreement", "power_analysis", "resimulate", "simulate_study", "truth_from_fit", "type_summary",
    "validate_phase1", "validate_ratings",
]
