"""One look for every figure: colours per family, column-width sizes, input checks, saving."""

from __future__ import annotations

import logging
import os
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.colors import to_rgb
from matplotlib.transforms import ScaledTranslation

from interpscale import paper
from interpscale._atomic import atomic_path
from interpscale.scaling.tables import fit_rows
from interpscale.errors import UserError

COLUMN_WIDTH = 3.4  # inches: one column of a two-column paper
PAGE_WIDTH = 7.0  # inches: full text width
DPI = 200  # PNG resolution: a one-column figure is 680 px wide, sharp when printed at 3.4 in
MIN_FONT_PT = 7.0  # the smallest text in any figure (ticks, legends) stays legible in print

FAMILY_ORDER = ("ar", "ar+concept", "cdlm", "cdlm+concept")
FAMILY_LABELS = {"ar": "AR", "ar+concept": "AR+Concept", "cdlm": "CDLM", "cdlm+concept": "CDLM+Concept"}
# Okabe-Ito colour-blind-safe hues; each backbone's pair shares a hue family. No yellow or
# light orange: every colour keeps a contrast ratio of at least 2.5:1 against white.
FAMILY_COLORS = {"ar": "#0072B2", "ar+concept": "#3A9AD9", "cdlm": "#D55E00", "cdlm+concept": "#A6611A"}
FAMILY_MARKERS = {f: "s" if c.concept else "o" for f, c in paper.PAPER_FAMILIES.items()}  # squares: concept module
ESTIMATOR_LABELS = {"fixed_rate": "Fixed-rate mask", "fixed_grid": "Fixed-grid ELBO", "mdlm_elbo": "MDLM ELBO",
                    "per_block": "Per-block ELBO", "ar_ce": "AR cross-entropy"}
ESTIMATOR_COLORS = {"fixed_rate": "#009E73", "fixed_grid": "#CC79A7", "mdlm_elbo": "#D55E00", "per_block": "#000000",
                    "ar_ce": "#0072B2"}
# panel titles; the arrow is the metric's direction (paper.INTERP_METRICS)
METRIC_LABELS = {k: f"{m.short} {'↓' if m.direction == 'lower' else '↑'}" for k, m in paper.INTERP_METRICS.items()}
_EXTRA_COLORS = ("#009E73", "#CC79A7", "#7B3294", "#000000", "#666666")

STYLE = {
    "font.size": 8, "axes.titlesize": 8.5, "axes.labelsize": 8, "legend.fontsize": 7,
    "xtick.labelsize": 7, "ytick.labelsize": 7, "axes.linewidth": 0.6, "lines.linewidth": 1.2,
    "lines.markersize": 4, "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
    "grid.linewidth": 0.3, "grid.alpha": 0.5, "legend.frameon": False, "figure.dpi": 100,
    "savefig.dpi": DPI, "savefig.bbox": "tight", "savefig.pad_inches": 0.02, "pdf.fonttype": 42,
    "font.family": "DejaVu Sans", "mathtext.default": "regular", "axes.titlepad": 3.0,
}


def family_color(family: str) -> str:
    # a zoo family gets a stable colour from its name
    return FAMILY_COLORS.get(family) or _EXTRA_COLORS[sum(map(ord, family)) % len(_EXTRA_COLORS)]


def family_label(family: str) -> str:
    return FAMILY_LABELS.get(family, family)


def slice_colors(n: int) -> list:
    """Sequential colours for IsoFLOP slices, light (small C) to dark (large C); the lightest
    (viridis at 0.6, a mid green) keeps a 3:1 contrast against white, unlike viridis' yellow end."""
    cmap = plt.get_cmap("viridis")
    return [cmap(x) for x in np.linspace(0.6, 0.0, max(n, 1))][:n] if n > 1 else [cmap(0.35)]


def contrast_ratio(color, background="white") -> float:
    """WCAG contrast ratio of ``color`` against ``background`` (1 = invisible, 21 = black on white)."""
    def lum(c):
        r = np.array(to_rgb(c))
        r = np.where(r <= 0.03928, r / 12.92, ((r + 0.055) / 1.055) ** 2.4)
        return 0.2126 * r[0] + 0.7152 * r[1] + 0.0722 * r[2]

    a, b = sorted((lum(color), lum(background)))
    return (b + 0.05) / (a + 0.05)


def ordered_families(families: Iterable[str]) -> list[str]:
    fams = list(dict.fromkeys(families))
    return [f for f in FAMILY_ORDER if f in fams] + sorted(f for f in fams if f not in FAMILY_ORDER)


@contextmanager
def paper_style() -> Iterator[None]:
    """Temporarily apply the toolkit's matplotlib style (font sizes for column width)."""
    with plt.rc_context(STYLE):
        yield


def new_figure(nrows: int, ncols: int, *, width: float | None = None, panel_height: float = 1.9, **kwargs):
    """(figure, 2-D axes array) sized for print: one column up to two panels across, full width beyond."""
    if width is None:
        width = COLUMN_WIDTH if ncols <= 1 else PAGE_WIDTH if ncols > 2 else 0.75 * PAGE_WIDTH
    return plt.subplots(nrows, ncols, figsize=(width, panel_height * nrows + 0.35), squeeze=False,
                        constrained_layout=True, **kwargs)


def require_columns(df: pd.DataFrame, columns: Sequence[str], figure: str) -> None:
    """UserError naming the first missing column and the figure that needed it."""
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{figure}: expected a pandas DataFrame results table, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        also = f" (also missing: {', '.join(map(repr, missing[1:]))})" if len(missing) > 1 else ""
        raise UserError(f"{figure} needs column {missing[0]!r}, which the results table lacks{also}"
                        f"; present: {', '.join(map(str, df.columns))}")


def main_rows(df: pd.DataFrame, family: str) -> pd.DataFrame:
    """The rows the family's fits use, by the one row rule (``scaling.tables.fit_rows``: annealed when
    any, the headline estimator, measured rows only); empty for a family the table lacks."""
    if "family" in df.columns and not (df["family"] == family).any():
        return df.iloc[:0]
    return fit_rows(df, family=family, caller="figure")


def compute_axis(ax, label: str = "Compute C (FLOPs)") -> None:
    """A log compute x axis with readable ticks, the one every compute-scaling panel uses."""
    ax.set_xscale("log")
    compact_log_ticks(ax, "x")
    ax.set_xlabel(label)


def save_figure(fig, out_dir: str | os.PathLike, name: str, *, formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Write ``name.png`` (``DPI`` dots per inch) and ``name.pdf`` atomically into ``out_dir``; closes it.

    The layout and the tight bounding box are computed once and every format reuses them: a plain
    ``savefig(bbox_inches="tight")`` lays the figure out and draws it twice per format, and on these
    tick-heavy log panels that layout is most of a report's figure time."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths, caught = [], []
    try:
        with paper_style(), warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fig.draw_without_rendering()  # the layout engine runs here, once
            bbox = fig.get_tightbbox(fig.canvas.get_renderer()).padded(0.03)
            fig.set_layout_engine("none")  # keep the positions just computed
            for fmt in formats:
                path = out / f"{name}.{fmt}"
                with atomic_path(path, suffix=f".{fmt}") as tmp:
                    fig.savefig(tmp, format=fmt, dpi=DPI, bbox_inches=bbox)
                paths.append(path)
        caught = list(w)
    finally:
        plt.close(fig)
    layout = [str(x.message) for x in caught if "layout" in str(x.message)]
    for x in caught:  # any other warning goes on as it came
        if "layout" not in str(x.message):
            warnings.warn_explicit(x.message, x.category, x.filename, x.lineno)
    if layout:  # matplotlib's own words, once, naming the figure (it is saved without the layout)
        logging.getLogger("interpscale.analysis.figures").warning(
            "figure %s: its panels did not fit their labels at this size, saved without the tidy layout "
            "(matplotlib: %s)", name, layout[0].split(".")[0])
    return paths


LEGEND_DROP_IN = 0.4  # inches from an axes' bottom edge to a legend below it: clears tick labels and x label


def legend_below(ax, handles=None, labels=None, **kwargs):
    """A legend under ``ax``, below its x label whatever the panel's height, so it never sits
    on the data (constrained layout makes room for it)."""
    drop = LEGEND_DROP_IN if ax.get_xlabel() else LEGEND_DROP_IN - 0.15
    transform = ax.transAxes + ScaledTranslation(0, -drop, ax.get_figure().dpi_scale_trans)
    args = () if handles is None else (handles, labels)
    return ax.legend(*args, loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=transform,
                     borderaxespad=0.0, **kwargs)


def plain_log_axis(ax, which: str = "y") -> None:
    """Log scale labelled with plain numbers (2.5, 3, 3.5 ...) — for losses spanning < 1 decade."""
    axis = ax.yaxis if which == "y" else ax.xaxis
    (ax.set_yscale if which == "y" else ax.set_xscale)("log")
    axis.set_major_locator(ticker.LogLocator(subs=(1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def compact_log_ticks(ax, which: str = "x", *, max_decades: float = 1.2) -> None:
    """On a log axis spanning under ``max_decades`` decades, ticks at 1, 2 and 5 × 10^k labelled
    ``2e10``-style (matplotlib's default labels every minor tick there and they collide)."""
    lo, hi = ax.get_xlim() if which == "x" else ax.get_ylim()
    if not (lo > 0 and hi > 0):
        return
    axis = ax.xaxis if which == "x" else ax.yaxis
    if np.log10(hi / lo) >= max_decades:
        # a span of a few decades always holds a power of ten: label only those (matplotlib
        # would also label the 2..9 minor ticks between them, and they collide)
        if np.log10(hi / lo) < 3:
            axis.set_minor_formatter(ticker.NullFormatter())
        return

    def fmt(v, _):
        mant, exp = f"{v:.0e}".split("e")
        return f"{mant}e{int(exp)}"

    axis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FuncFormatter(fmt))
    axis.set_minor_formatter(ticker.NullFormatter())
