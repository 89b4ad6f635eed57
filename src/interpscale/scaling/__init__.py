"""Scaling-law fitters with bootstrap CIs (pure numpy/scipy/pandas; never imports torch).

Steerling paper §8.2.1 / §8.3.1: per-slice IsoFLOP parabolas (Eq. 25), power laws (Eq. 26),
the joint Chinchilla fit with a summed Huber loss (Eq. 27-28), bounded metric fits (Eq. 29),
bootstrap intervals, extrapolation and the Table 6 / Table 7 family comparison.

    fit = fit_chinchilla(params, tokens, loss)          # 4,500-start Epoch grid, 10,000 replicates
    fit.L_inf, fit.alpha, fit.ci["alpha"], fit.band_optimal(compute)
    fits = fit_families(results_df, annealed=True)      # one row per checkpoint (docs/architecture.md)
    fits.table6(), fits.table7(), fits.to_markdown(), fits.to_dict()

    bt = backtest(results_df)                            # rollout / leave-one-budget-out forecasts
    bt.summary(), bt.errors(), bt.to_frame()             # held-out error and PI coverage per method
    compare_approaches(iso, joint, 7.6e22).summary()     # Approach 2 vs 3: N*, D*, L* and disagreement
    forecast_family(rows, 1e22).summary()                # methods by name, default chosen by backtest, calibrated PIs
    ForecastLedger("forecasts.jsonl").record(...)        # write a forecast down; .check(id, observed) later

    fit_data_constrained(N, D, U, loss)                  # published laws (docs/laws.md): repeated data,
    fit_overtraining(N, D, loss), fit_ladder(N, D, task_loss, checkpoint_loss=..., checkpoint_accuracy=...)
    read_runs("logs.csv", params="N", loss="ce", run="run", step="step", tokens_per_step=2**20, last=5)

    analysis = analyse(results_df, AnalysisOptions(target_compute=7.6e22))  # every number the CLI,
    analysis.fits, analysis.trends, analysis.multipliers, analysis.backtest   # report and figures show

Every result is a frozen dataclass with ``ci``, ``converged``, ``warnings``, ``predict``,
``to_dict()`` and ``summary()``; fitted curves have bootstrap ``band(x, level)`` methods.
"""

from ._base import FitStatus, ScalingFitWarning, fit_status, fmt_sub, keep_repeats, log_once, quiet
from .backtest import Backtest, backtest, nearest_budget
from .bootstrap import KINDS as BOOTSTRAP_KINDS, N_BOOT, Bootstrap
from .bounded import METRICS, BoundedFit, fit_bounded
from .external import RunTable, read_runs
from .families import (ApproachComparison, Extrapolation, FamilyFit, FamilyFits, compare_approaches,
                       extrapolate, fit_families)
from .forecast import (METHODS as FORECAST_METHODS, FamilyForecast, FitOptions, ForecastMethod,
                       ForecastOptions, calibrate, forecast_family, register_method)
from .isoflop import IsoFlopFit, PowerLawFit, fit_isoflop, fit_power_law
from .joint import ChinchillaFit, coarse_grid, epoch_grid, fit_chinchilla
from .laws import (DataConstrainedFit, DownstreamErrorFit, LadderFit, OvertrainingFit, checkpoint_points,
                   data_constrained_law, data_constrained_objective, epoch_costs, fit_data_constrained,
                   fit_downstream_error, fit_ladder, fit_overtraining)
from .ledger import Forecast, ForecastLedger, forecast_from_results, inputs_hash
from .tables import fit_rows
from .trend import TrendFit, fit_trend
from .analysis import Analysis, AnalysisOptions, analyse  # last: it reads every fit above

__all__ = [
    "analyse", "Analysis", "AnalysisOptions", "FitStatus", "fmt_sub", "fit_status", "FitOptions", "N_BOOT", "fit_rows",
    "fit_isoflop", "IsoFlopFit", "fit_power_law", "PowerLawFit", "fit_chinchilla", "ChinchillaFit",
    "fit_bounded", "BoundedFit", "fit_families", "FamilyFits", "FamilyFit", "extrapolate", "Extrapolation",
    "METRICS", "ScalingFitWarning", "epoch_grid", "coarse_grid",
    "backtest", "Backtest", "nearest_budget", "compare_approaches", "ApproachComparison",
    "ForecastLedger", "Forecast", "forecast_from_results", "inputs_hash", "Bootstrap", "BOOTSTRAP_KINDS",
    "FORECAST_METHODS", "ForecastMethod", "ForecastOptions", "FamilyForecast", "forecast_family", "register_method",
    "calibrate", "log_once", "quiet", "keep_repeats", "fit_trend", "TrendFit",
    "fit_data_constrained", "DataConstrainedFit", "data_constrained_objective", "data_constrained_law", "epoch_costs", "fit_overtraining", "OvertrainingFit",
    "fit_downstream_error", "DownstreamErrorFit", "fit_ladder", "LadderFit", "checkpoint_points", "read_runs", "RunTable",
]
