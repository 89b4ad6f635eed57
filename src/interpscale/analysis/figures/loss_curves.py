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
from interpscale.analysis.figures._style import family_label, new_figure, ordered_families, paper_style
from interpscale.errors import UserError

log = logging.getLogger("interpscale.analysis.figures")
FIGURE = "Loss curves (loss_curves_figure)"
# loss parts a concept model logs next to its total (Eq. 14): each gets its own row of panels
LOSS_PARTS = {"lm": "LM loss (nats)", "concept": "Concept loss", "rec": "Reconstruction loss",
              "indep": "Independence loss"}


def read_metrics(run_dir: str | os.PathLike) -> dict[str, np.ndarray]:
    """RUN_DIR/metrics.jsonl as arrays: ``step``, ``loss`` (the logged total), ``tokens``, ``lr``, the
    loss parts ``lm`` (= ``loss`` for a run that logs none), ``concept``, ``rec``, ``indep`` (NaN when
    not logged) and ``segment`` ("" when not logged). Lines without a finite ``loss`` (evaluation-only
    records) are skipped; a line that is not JSON is a ValueError naming the file and line."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise UserError(f"{FIGURE}: {path} does not exist")
    def num(value) -> float:
        return float(value) if isinstance(value, (int, float)) else math.nan

    try:
        records = [r for _, r in iter_jsonl(path) if math.isfinite(num(r.get("loss"))) and "step" in r]
    except ValueError as exc:
        raise UserError(f"{FIGURE}: {exc}") from None
    out = {k: np.array([num(r.get(k)) for r in records], dtype=float)
           for k in ("step", "loss", "tokens", "lr", *LOSS_PARTS)}
    if out["lm"].size and not np.isfinite(out["lm"]).any():  # a plain LM logs its LM loss as ``loss``
        out["lm"] = out["loss"].copy()
    out["segment"] = np.asarray([str(r.get("segment", "")) for r in records], dtype=object)
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


def _size_order(runs) -> list[str]:
    """Model sizes small to large: by parameter count within the family that has the most
    sizes (a concept family's P includes its concept module, so counts are not comparable
    across families), then any size it lacks by its own count."""
    by_family: dict[str, dict[str, tuple]] = {}
    for name, fam, info, _ in runs:
        by_family.setdefault(fam, {}).setdefault(str(info.get("size", name)), _size_key(info, name))
    widest = max(by_family.values(), key=len)
    order = sorted(widest, key=widest.get)
    rest = {sz: key for sizes in by_family.values() for sz, key in sizes.items() if sz not in widest}
    return order + sorted(rest, key=rest.get)


def loss_curves_figure(run_dirs: Iterable[str | os.PathLike], *, x: str = "tokens", smooth: int = 1):
    """Training curves of every run: LM loss per family on top (coloured by model size, light =
    small), each other loss part of concept families in a row of its own, never summed into the LM
    curve; one line per training segment against ``x`` ("tokens" or "step", log axis); ``smooth`` > 1
    a trailing moving average; one legend of model sizes on the right."""
    if x not in ("tokens", "step"):
        raise UserError(f"{FIGURE}: x must be 'tokens' or 'step', got {x!r}")
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
        raise UserError(f"{FIGURE}: no run directory with logged losses")
    families = ordered_families(r[1] for r in runs)
    parts = [k for k in LOSS_PARTS if any(np.isfinite(r[3][k]).any() for r in runs)]
    cmap = plt.get_cmap("viridis")
    sizes = _size_order(runs)
    shade = {sz: cmap(0.6 - 0.6 * i / max(len(sizes) - 1, 1)) for i, sz in enumerate(sizes)}
    handles: dict[str, object] = {}
    with paper_style():
        fig, axes = new_figure(len(parts), len(families), sharey=False, panel_height=1.6,
                               width=min(7.0, 1.75 * len(families) + 1.0))
        for i, part in enumerate(parts):
            for j, fam in enumerate(families):
                ax = axes[i, j]
                fam_runs = sorted((r for r in runs if r[1] == fam), key=lambda r: _size_key(r[2], r[0]))
                seen: list[np.ndarray] = []
                for name, _, info, m in fam_runs:
                    size = str(info.get("size", name))
                    for k, seg in enumerate(dict.fromkeys(m["segment"])):
                        sel = (m["segment"] == seg) & np.isfinite(m[part])
                        if not sel.any():
                            continue
                        xs = m[x][sel] if np.isfinite(m[x][sel]).all() else m["step"][sel]
                        ys = m[part][sel]
                        if smooth > 1 and ys.size >= smooth:
                            ys = np.convolve(ys, np.ones(smooth) / smooth, mode="valid")
                            xs = xs[smooth - 1:]
                        seen.append(ys)
                        (line,) = ax.plot(xs, ys, color=shade[size], lw=0.9 if k == 0 else 0.6,
                                          label=size if k == 0 else "_nolegend_")
                        handles.setdefault(size, line)
                if not seen:
                    ax.set_visible(False)
                    continue
                allv = np.concatenate(seen)
                lo, hi = float(allv.min()), float(allv.max())
                if hi > lo:  # the first logged steps can sit far above the rest: keep 98-99% of the points in view
                    hi = float(np.quantile(allv, 0.98 if part == "lm" else 0.99))
                pad = 0.05 * (hi - lo) if hi > lo else 0.05 * max(abs(hi), 1e-6)
                ax.set(ylim=(lo - pad, hi + pad), xscale="log", xlabel="Tokens" if x == "tokens" else "Step")
                if i == 0:
                    ax.set_title(family_label(fam))
                if j == 0 or not axes[i, j - 1].get_visible():
                    ax.set_ylabel(LOSS_PARTS[part])
        fig.legend([handles[s] for s in sizes if s in handles], [s for s in sizes if s in handles],
                   loc="outside right upper", title="model size")
    return fig
