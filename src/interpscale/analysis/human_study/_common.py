"""Parts shared by the frequentist and Bayesian ordinal fits: checks, Wald / odds-ratio
tables, plain-text tables, X rebuilds for new data and category probabilities."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.special import expit, ndtr
from scipy.stats import norm

LINKS = ("logit", "probit")
KINDS = ("zero", "conditional", "marginal")  # what a prediction conditions the random effects on


def check_link(link: str) -> str:
    if link not in LINKS:
        raise ValueError(f"link must be 'logit' or 'probit', got {link!r}")
    return link


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be 'zero', 'conditional' or 'marginal', got {kind!r}")


def z_value(level: float) -> float:
    """Two-sided normal quantile for a ``level`` interval (0.95 -> 1.96)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    return float(norm.ppf(0.5 + level / 2))


def tail_names(level: float) -> tuple[str, str]:
    """Column heads of a ``level`` interval's ends: 0.95 -> ("2.5%", "97.5%")."""
    return f"{(1 - level) / 2:.1%}", f"{(1 + level) / 2:.1%}"


def wald(names: Sequence[str], est, se, zq: float) -> tuple[dict, dict, dict]:
    """Estimates, SEs and Wald intervals est -/+ zq se, keyed by ``names``."""
    coef = {n: float(b) for n, b in zip(names, est)}
    ses = {n: float(s) for n, s in zip(names, se)}
    return coef, ses, {n: (coef[n] - zq * ses[n], coef[n] + zq * ses[n]) for n in names}


def odds_ratios(coef: dict, ci: dict) -> tuple[dict, dict]:
    """exp of log-odds estimates and of their interval ends."""
    with np.errstate(over="ignore"):  # a separated level has |beta| and SE huge: OR inf
        return ({k: float(np.exp(b)) for k, b in coef.items()},
                {k: (float(np.exp(ci[k][0])), float(np.exp(ci[k][1]))) for k in coef})


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
    return expit(x) if check_link(link) == "logit" else ndtr(x)


def _probs(cum: np.ndarray) -> np.ndarray:
    """Pr(y = k) from Pr(y <= k), k < K: pad with 0 and 1 and difference."""
    ones = np.ones_like(cum[..., :1])
    return np.diff(np.concatenate([np.zeros_like(ones), cum, ones], axis=-1), axis=-1)


def category_probs(eta: np.ndarray, thresholds: np.ndarray, link: str = "logit") -> np.ndarray:
    """Pr(y = k) from Pr(y <= k) = F(tau_k - eta) (App. D.3); shapes (..., n) -> (..., n, K)."""
    return _probs(_cdf(thresholds[..., None, :] - eta[..., :, None], link))


def marginal_category_probs(eta: np.ndarray, thresholds: np.ndarray, sd, link: str = "logit",
                            n_nodes: int = 32) -> np.ndarray:
    """Population-averaged Pr(y = k): Pr(y <= k) = E_u F(tau_k - eta - u) over u ~ N(0, sd^2)
    by Gauss-Hermite quadrature; ``sd`` broadcasts against ``eta`` (per row or per draw)."""
    x, w = np.polynomial.hermite.hermgauss(n_nodes)
    sd = np.broadcast_to(np.asarray(sd, float), np.shape(eta))
    cum = 0.0
    for xi, wi in zip(x, w):
        u = np.sqrt(2.0) * sd * xi
        cum = cum + wi / np.sqrt(np.pi) * _cdf(thresholds[..., None, :] - (eta + u)[..., :, None], link)
    return _probs(cum)
