"""Helpers shared by the human-study result objects (plain-text tables, X rebuilds)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.special import expit


def text_table(header: Sequence[str], rows: Sequence[Sequence], title: str = "") -> str:
    """A fixed-width table like statsmodels' summaries; floats get 4 significant decimals."""
    cells = [[f"{v:.4f}" if isinstance(v, (float, np.floating)) else str(v) for v in r] for r in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
    line = "  ".join(str(h).rjust(w) for h, w in zip(header, widths))
    rule = "-" * len(line)
    body = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join([*( [title] if title else []), rule, line, rule, *body, rule])


def design_rows(data: pd.DataFrame, coef_names: Sequence[str]) -> np.ndarray:
    """Rebuild fixed-effect columns named ``factor[level]`` (or a numeric covariate) for new data."""
    cols = []
    for name in coef_names:
        if name.endswith("]") and "[" in name:
            factor, level = name[:-1].split("[", 1)
            cols.append((data[factor].astype(str) == level).to_numpy(float))
        else:
            cols.append(data[name].to_numpy(float))
    return np.column_stack(cols) if cols else np.zeros((len(data), 0))


def category_probs(eta: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Pr(y = k) from Pr(y <= k) = logit^-1(tau_k - eta) (App. D.3); shapes (..., n) -> (..., n, K)."""
    cum = expit(thresholds[..., None, :] - eta[..., :, None])
    ones = np.ones_like(cum[..., :1])
    cum = np.concatenate([np.zeros_like(ones), cum, ones], axis=-1)
    return np.diff(cum, axis=-1)
