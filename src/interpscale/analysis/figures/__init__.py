"""Paper figures from a results table: one function per figure returning a matplotlib ``Figure``
in the toolkit's style (``save_figure`` writes PNG and PDF), one ``FIGURES`` registry entry per
figure (``register_figure``), and ``render_figures`` for all of them.
A table missing a column a figure needs raises ``ValueError`` naming the column and the figure.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Mapping

import numpy as np
import pandas as pd
from tqdm import tqdm

from interpscale._registry import Registry
from interpscale.analysis.figures._style import (FAMILY_COLORS, FAMILY_LABELS, family_color, paper_style,
                                                 require_columns, save_figure)
from interpscale.analysis.figures.extrapolation import (anneal_interp_figure, default_target, extrapolation_figure,
                                                        interp_extrapolation_figure, interp_scaling_figure)
from interpscale.analysis.figures.human_study import forest_figure
from interpscale.analysis.figures.isoflop import (DEFAULT_FIG_BOOT, anneal_loss_figure, estimator_isoflop_figure,
                                                  estimator_power_law_figure, figure_analysis, isoflop_figure,
                                                  mask_rate_isoflop_figure, mask_rate_power_law_figure,
                                                  power_law_figure)
from interpscale.analysis.figures.loss_curves import loss_curves_figure, read_metrics
from interpscale.analysis.figures.multiplier import multiplier_figure
from interpscale.analysis.figures.overhead import concept_overhead_figure
from interpscale.scaling import log_once
from interpscale.errors import UserError

log = logging.getLogger("interpscale.analysis.figures")

CORE_COLUMNS = ("family", "slice_flops", "params", "loss")


@dataclass(frozen=True)
class FigureSpec:
    name: str  # file stem, e.g. "fig22_isoflop"
    title: str  # "Figure 22: IsoFLOP parabolas per family"
    draw: Callable[..., object]  # (results, fits, n_boot, target) -> Figure
    analysis: bool = False  # draw gets render_figures' Analysis (else the Analysis's fits) as its second argument


def _first_drawable(draw: Callable[..., object], results: pd.DataFrame, preferred: Iterable[str], *,
                    fall_back: bool = True, **kwargs):
    """``draw(results, family=f, **kwargs)`` for the first family of ``preferred`` that the table has
    and, with ``fall_back``, supports (e.g. Figure 24 falls back to AR when CDLM+Concept has no usable
    slices; Figures 34-37 draw the first of CDLM, CDLM+Concept the table has, or say why not)."""
    errors, present = [], set(results["family"])
    for fam in [f for f in preferred if f in present]:
        try:
            return draw(results, family=fam, **kwargs)
        except ValueError as exc:
            if not fall_back:
                raise
            errors.append(str(exc))
    raise UserError(errors[0] if errors else f"no rows for any of the families {list(preferred)}")


def _cdlm_first(draw: Callable[..., object]) -> Callable[..., object]:
    return lambda r, a, b, t: _first_drawable(draw, r, _CDLM, fall_back=False, n_boot=b, analysis=a)


def _fits(a):
    """The fits of render_figures' second argument: an Analysis's, or the fits themselves."""
    return getattr(a, "fits", a)


def figure_targets(results: pd.DataFrame, target: Mapping | None = None) -> tuple[tuple[str, float], ...]:
    """(family, compute) of Figure 24's forecast: the first family it draws (``_CONCEPT_FIRST``) at
    its target (``default_target``); an Analysis made with these ``forecast_targets`` holds it (a
    family the figure falls back to is forecast when it does)."""
    present = set(results["family"]) if "family" in results.columns else set()
    for fam in (f for f in _CONCEPT_FIRST if f in present):
        try:
            return ((fam, float(default_target(results, fam, target)["flops"])),)
        except ValueError:  # no usable target: the figure says why
            return ()
    return ()


def figure_options(results: pd.DataFrame, options, target: Mapping | None = None):
    """``options`` (``scaling.AnalysisOptions``) with what only the figures draw: Figure 24's forecast
    (``figure_targets``) and the IsoFLOP fits per estimator, mask rate and anneal state (Figures 34-38)."""
    return replace(options, forecast_targets=tuple(options.forecast_targets) + figure_targets(results, target),
                   isoflop_groups=True)


_CONCEPT_FIRST = ("cdlm+concept", "ar+concept", "cdlm", "ar")
_CDLM = ("cdlm", "cdlm+concept")


_PAPER_FIGURES = (
    FigureSpec("fig21_concept_overhead", "Figure 21: concept-module parameter overhead vs backbone size",
               lambda r, f, b, t: concept_overhead_figure()),
    FigureSpec("fig22_isoflop", "Figure 22: per-slice IsoFLOP parabolas per family",
               lambda r, a, b, t: isoflop_figure(r, fits=a, n_boot=b), analysis=True),
    FigureSpec("fig23_power_laws", "Figure 23: compute-optimal L*(C) and P*(C) power laws",
               lambda r, a, b, t: power_law_figure(r, fits=a, n_boot=b), analysis=True),
    FigureSpec("fig24_extrapolation", "Figure 24: joint vs log-linear extrapolation to the target",
               lambda r, a, b, t: _first_drawable(extrapolation_figure, r, _CONCEPT_FIRST, target=t, n_boot=b,
                                                 fits=a), analysis=True),
    FigureSpec("fig25_interp_scaling", "Figure 25: interpretability metrics vs compute",
               lambda r, a, b, t: interp_scaling_figure(r, fits=a, n_boot=b),
               analysis=True),
    FigureSpec("fig26_interp_extrapolation", "Figure 26: interpretability extrapolation to the target",
               lambda r, a, b, t: _first_drawable(interp_extrapolation_figure, r, ("cdlm+concept", "ar+concept"),
                                                 target=t, n_boot=b, fits=a),
               analysis=True),
    FigureSpec("fig34_estimator_isoflop", "Figure 34: IsoFLOP fits under four ELBO estimators",
               _cdlm_first(estimator_isoflop_figure), analysis=True),
    FigureSpec("fig35_estimator_power_laws", "Figure 35: power laws under four ELBO estimators",
               _cdlm_first(estimator_power_law_figure), analysis=True),
    FigureSpec("fig36_mask_rate_isoflop", "Figure 36: IsoFLOP fits at fixed mask rates",
               _cdlm_first(mask_rate_isoflop_figure), analysis=True),
    FigureSpec("fig37_mask_rate_power_laws", "Figure 37: power laws at fixed mask rates",
               _cdlm_first(mask_rate_power_law_figure), analysis=True),
    FigureSpec("multiplier", "Compute multiplier k(C) of each +Concept family against its backbone",
               lambda r, a, b, t: multiplier_figure(r, fits=_fits(a), n_boot=b,
                                                    multipliers=getattr(a, "multipliers", None)), analysis=True),
    FigureSpec("fig38_anneal_loss", "Figure 38: validation loss, pre-anneal vs annealed",
               lambda r, a, b, t: _first_drawable(anneal_loss_figure, r, _CONCEPT_FIRST, n_boot=b, analysis=a),
               analysis=True),
    FigureSpec("fig39_anneal_interp", "Figure 39: interpretability metrics, pre-anneal vs annealed",
               lambda r, a, b, t: _first_drawable(anneal_interp_figure, r, ("cdlm+concept", "ar+concept"),
                                                 analysis=a), analysis=True),
)

FIGURES: Registry[FigureSpec] = Registry("figure")  # drawn in registration order


def register_figure(spec: FigureSpec, *, overwrite: bool = False) -> FigureSpec:
    """A figure ``render_figures`` draws whenever the table supports it (a ValueError skips it)."""
    return FIGURES.register(spec.name, spec, overwrite=overwrite)


for _spec in _PAPER_FIGURES:
    register_figure(_spec)


@dataclass(frozen=True)
class FigureSet:
    """What ``render_figures`` drew (title -> files) and skipped (title -> reason)."""

    drawn: dict[str, list[Path]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def paths(self) -> list[Path]:
        return [p for ps in self.drawn.values() for p in ps]


@log_once()
def render_figures(results_df: pd.DataFrame, out_dir: str | os.PathLike, *, fits=None,
                   run_dirs: Iterable[str | os.PathLike] | None = None, n_boot: int = DEFAULT_FIG_BOOT,
                   target: Mapping | None = None, formats: tuple[str, ...] = ("png", "pdf"),
                   analysis=None) -> FigureSet:
    """Draw every figure the table supports into ``out_dir`` and record why the others were
    skipped; ``target`` (``flops`` plus observed values) is what Figures 24 and 26 extrapolate
    to (default: ``default_target``). ``analysis``: a ``scaling.analyse`` result of the table whose
    numbers the figures draw (without one, or without Figure 24's forecast, ``figure_analysis``
    makes it once, reusing ``fits``). A missing ``CORE_COLUMNS`` column is a ValueError."""
    require_columns(results_df, CORE_COLUMNS, "render_figures (Figures 22-24)")
    if results_df.empty:
        raise UserError("render_figures: the results table has no rows")
    analysis = figure_analysis(results_df, analysis if analysis is not None else fits, n_boot=n_boot,
                               forecasts=figure_targets(results_df, target), multipliers=True)
    drawn: dict[str, list[Path]] = {}
    skipped: dict[str, str] = {}
    run_dirs = list(run_dirs or [])
    curves = FigureSpec("loss_curves", "Loss curves of every run", lambda *_: loss_curves_figure(run_dirs))
    specs = tuple(FIGURES.values()) + ((curves,) if run_dirs else ())
    for spec in tqdm(specs, desc="figures", unit="fig", disable=None, leave=False):
        try:
            fig = spec.draw(results_df, analysis if spec.analysis else analysis.fits, n_boot, target)
        except (ValueError, np.linalg.LinAlgError) as exc:  # the table cannot support this figure
            skipped[spec.title] = str(exc)
            log.warning("skipped %s: %s", spec.title, exc)
            continue
        drawn[spec.title] = save_figure(fig, out_dir, spec.name, formats=formats)
    if not run_dirs:
        skipped[curves.title] = "no run directories given (run_dirs=...)"
        log.info("skipped %s: no run directories given", curves.title)
    skipped["Figure 14: human-study forest plot"] = ("needs a human-rating study, not a results table; "
                                                     "draw it with forest_figure(...)")
    return FigureSet(drawn=drawn, skipped=skipped)


__all__ = [
    "FAMILY_COLORS", "FAMILY_LABELS", "FIGURES", "FigureSet", "FigureSpec", "anneal_interp_figure", "anneal_loss_figure",
    "concept_overhead_figure", "estimator_isoflop_figure", "estimator_power_law_figure", "extrapolation_figure",
    "family_color", "figure_analysis", "figure_options", "figure_targets", "forest_figure",
    "interp_extrapolation_figure", "interp_scaling_figure", "isoflop_figure",
    "loss_curves_figure", "multiplier_figure", "mask_rate_isoflop_figure", "mask_rate_power_law_figure",
    "paper_style", "power_law_figure", "read_metrics", "register_figure", "render_figures", "require_columns", "save_figure",
]
