"""Training-loss curves of every run, read from RUN_DIR/metrics.jsonl (one panel per family)."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Iterable

import matplotlib.pyplot as plt
import numpy as np

from interpscale._jsonl import iter_jsonl
from interpscale.analysis.figures._style import (
    family_label,
    new_figure,
    ordered_families,
    paper_style,
)

log = logging.getLogger("interpscale.analysis.figures")
FIGURE = "Loss curves (loss_curves_figure)"


def read_metrics(run_dir: str | os.PathLike) -> dict[str, np.ndarray]:
    """``step``, ``loss``, ``tokens``, ``lr`` (NaN when not logged) and ``segment`` (the
    training segment name, "" when not logged) from RUN_DIR/metrics.jsonl.

    Lines without a finite ``loss`` (e.g. evaluation-only records) are skipped; a line that
    is not JSON raises ValueError naming the file and line number.
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise ValueError(f"{FIGURE}: {path} does not exist")
    cols: dict[str, list[float]] = {"step": [], "loss": [], "tokens": [], "lr": []}
    segments: list[str] = []
    try:
        records = [rec for _, rec in iter_jsonl(path)]
    except ValueError as exc:
        raise ValueError(f"{FIGURE}: {exc}") from None
    for rec in records:
        loss = rec.get("loss")
        if not isinstance(loss, (int, float)) or not math.isfinite(loss) or "step" not in rec:
            continue
        for key in cols:
            val = rec.get(key)
            cols[key].append(float(val) if isinstance(val, (int, float)) else math.nan)
        segments.append(str(rec.get("segment", "")))
    out = {k: np.asarray(v, dtype=float) for k, v in cols.items()}
    out["segment"] = np.asarray(segments, dtype=object)
    return out


def _run_info(run_dir: Path) -> dict:
    spec = run_dir / "spec.json"
    if spec.exists():
        try:
            data = json.loads(spec.read_text())
            if isinstance(data, dict):
                return data.get("spec", data) if isinstance(data.get("spec"), dict) else data
        except json.JSONDecodeError:
            log.warning("%s: spec.json unreadable; run grouped as 'unknown'", run_dir)
    return {}


def _size_key(info: dict, name: str) -> tuple:
    """Order runs by parameter count: ``params`` if logged, else a size name like '85M' / '1.5B'."""
    if isinstance(info.get("params"), (int, float)):
        return (float(info["params"]), name)
    size = str(info.get("size", ""))
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}.get(size[-1:].upper())
    try:
        return (float(size[:-1]) * scale, name) if scale else (math.inf, size or name)
    except ValueError:
        return (math.inf, size or name)


def loss_curves_figure(run_dirs: Iterable[str | os.PathLike], *, x: str = "tokens", smooth: int = 1):
    """One line per run and training segment (loss vs ``x`` = "tokens" or "step", log axis),
    panels per family, coloured by model size within a panel (light = small; one legend entry
    per size). ``smooth`` > 1 applies a trailing moving average of that many logged points."""
    if x not in ("tokens", "step"):
        raise ValueError(f"{FIGURE}: x must be 'tokens' or 'step', got {x!r}")
    runs = []
    for rd in run_dirs:
        rd = Path(rd)
        m = read_metrics(rd)
        if m["loss"].size == 0:
            log.warning("%s: metrics.jsonl has no loss records; skipped", rd)
            continue
        info = _run_info(rd)
        runs.append((rd.name, str(info.get("family", "unknown")), info, m))
    if not runs:
        raise ValueError(f"{FIGURE}: no run directory with logged losses")
    families = ordered_families(r[1] for r in runs)
    ncols = min(len(families), 4)
    nrows = math.ceil(len(families) / ncols)
    with paper_style():
        fig, axes = new_figure(nrows, ncols, sharey=False, panel_height=1.8)
        for ax in axes.ravel()[len(families):]:
            ax.set_visible(False)
        for ax, fam in zip(axes.ravel(), families):
            fam_runs = [r for r in runs if r[1] == fam]
            fam_runs.sort(key=lambda r: _size_key(r[2], r[0]))
            cmap = plt.get_cmap("viridis")
            # colour = model size (one legend entry per size; a size's runs at larger slices run longer)
            sizes = list(dict.fromkeys(str(r[2].get("size", r[0])) for r in fam_runs))
            shade = {sz: cmap(0.85 - 0.75 * i / max(len(sizes) - 1, 1)) for i, sz in enumerate(sizes)}
            labelled: set[str] = set()
            seen: list[np.ndarray] = []
            for name, _, info, m in fam_runs:
                size = str(info.get("size", name))
                color = shade[size]
                seen.append(m["loss"])
                # one line per training segment (stable phase, then each independently annealed tail)
                for k, seg in enumerate(dict.fromkeys(m["segment"])):
                    sel = m["segment"] == seg
                    xs = m[x][sel] if np.isfinite(m[x][sel]).all() else m["step"][sel]
                    ys = m["loss"][sel]
                    if smooth > 1 and ys.size >= smooth:
                        ys = np.convolve(ys, np.ones(smooth) / smooth, mode="valid")
                        xs = xs[smooth - 1:]
                    first = k == 0 and size not in labelled
                    labelled.add(size)
                    ax.plot(xs, ys, color=color, lw=0.9 if k == 0 else 0.6, label=size if first else "_nolegend_")
            # the first few logged steps can sit an order of magnitude above the rest: clip them
            allv = np.concatenate(seen)
            ax.set_ylim(allv.min() * 0.97, np.quantile(allv, 0.97) * 1.05)
            ax.set_xscale("log")
            ax.set_xlabel("Tokens" if x == "tokens" else "Step")
            ax.set_ylabel("Training loss (nats)")
            ax.set_title(family_label(fam))
            ax.legend(loc="lower left", fontsize=5.5, ncol=1 if len(sizes) < 6 else 2)
    return fig
