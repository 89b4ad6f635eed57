"""Helpers shared by the human-study result objects (plain-text tables, X rebuilds)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.special import expit, ndtr


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


def _cdf(x: np.ndarray, link: str) -> np.ndarray:
    if link == "logit":
        return expit(x)
    if link == "probit":
        return ndtr(x)
    raise ValueError(f"link must be 'logit' or 'probit', got {link!r}")


def category_probs(eta: np.ndarray, thresholds: np.ndarray, link: str = "logit") -> np.ndarray:
    """Pr(y = k) from Pr(y <= k) = F(tau_k - eta) (App. D.3); shapes (..., n) -> (..., n, K)."""
    cum = _cdf(thresholds[..., None, :] - eta[..., :, None], link)
    ones = np.ones_like(cum[..., :1])
    cum = np.concatenate([np.zeros_like(ones), cum, ones], axis=-1)
    return np.diff(cum, axis=-1)


def marginal_category_probs(eta: np.ndarray, thresholds: np.ndarray, sd, link: str = "logit",
                            n_nodes: int = 32) -> np.ndarray:
    """Population-averaged Pr(y = k): the conditional probabilities integrated over a
    N(0, sd^2) random part of the linear predictor, Pr(y <= k) = E_u F(tau_k - eta - u),
    by Gauss-Hermite quadrature. ``sd`` broadcasts against ``eta`` (a total SD per row
    or per posterior draw). Shapes as ``category_probs``."""
    x, w = np.polynomial.hermite.hermgauss(n_nodes)
    sd = np.broadcast_to(np.asarray(sd, float), np.shape(eta))
    cum = 0.0
    for xi, wi in zip(x, w):
        u = np.sqrt(2.0) * sd * xi
        cum = cum + wi / np.sqrt(np.pi) * _cdf(thresholds[..., None, :] - (eta + u)[..., :, None], link)
    ones = np.ones_like(cum[..., :1])
    cum = np.concatenate([np.zeros_like(ones), cum, ones], axis=-1)
    return np.diff(cum, axis=-1)
