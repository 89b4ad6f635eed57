"""Human-rating study analysis (Steerling §4.4, App. D): ordinal mixed models and checks.

    from interpscale.analysis.human_study import simulate_study, analyse_study
    study = simulate_study(seed=0)                       # the paper's design, known effects
    report = analyse_study(study.ratings, study.phase1)  # Tables 4 and 21, App. D.2-D.5
    report.write("out/")                                 # markdown, JSON, Figure 14
"""

from ._validate import validate_phase1, validate_ratings
from .bayes import Diagnostics, OrdinalMixedModel, OrdinalMixedResult, Priors, build_model, fit_ordinal_mixed
from .design import Design, build_design
from .design import parse_random
from .frequentist import GaussianMixedResult, OrdinalResult, compare, fit_gaussian_mixed, fit_ordinal
from .phase1 import coherence_dependence, icc1, phase1_agreement
from .power import PowerResult, power_analysis, truth_from_fit
from .robust import PairedComparison, paired_comparison, type_summary
from .simulate import SimulatedStudy, StudyTruth, draw_ratings, resimulate, simulate_study
from .study import HumanStudyReport, analyse_study

__all__ = [
    "Design", "Diagnostics", "GaussianMixedResult", "HumanStudyReport", "OrdinalMixedModel", "OrdinalMixedResult", "OrdinalResult",
    "PairedComparison", "PowerResult", "Priors", "SimulatedStudy", "StudyTruth", "analyse_study", "build_design",
    "build_model", "coherence_dependence", "compare", "draw_ratings", "fit_gaussian_mixed", "fit_ordinal", "fit_ordinal_mixed", "icc1",
    "paired_comparison", "parse_random", "phase1_agreement", "power_analysis", "resimulate", "simulate_study", "truth_from_fit", "type_summary",
    "validate_phase1", "validate_ratings",
]
