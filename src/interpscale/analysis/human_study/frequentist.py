"""Frequentist cross-checks: cumulative-link model (OrderedModel) and Gaussian crossed MixedLM."""

from __future__ import annotations

import logging
import warnings as _warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm

from ._common import category_probs, design_rows, text_table
from .bayes import RANDOM, _jsonable
from .design import build_design, coef_name

log = logging.getLogger(__name__)
Z95 = float(norm.ppf(0.975))


@dataclass(frozen=True)
class OrdinalResult:
    """Maximum-likelihood cumulative-link (proportional-odds) model, R ``clm`` conventions:
    Pr(y <= k) = logit^-1(tau_k - x'beta), thresholds reported on the tau scale."""

    coef: dict[str, float]
    se: dict[str, float]
    ci: dict[str, tuple[float, float]]  # Wald 95% for coefficients and thresholds
    odds_ratio: dict[str, float]
    odds_ratio_ci: dict[str, tuple[float, float]]
    p_value: dict[str, float]
    thresholds: tuple[float, ...]
    threshold_se: tuple[float, ...]
    loglik: float
    aic: float
    n_obs: int
    cov_type: str
    converged: bool
    warnings: tuple[str, ...]
    levels: tuple

    def predict(self, data: pd.DataFrame) -> np.ndarray:
        """Pr(y = k) for the rows of ``data``, shape (n, K)."""
        X = design_rows(data, list(self.coef))
        return category_probs(X @ np.array(list(self.coef.values())), np.asarray(self.thresholds))

    def to_dict(self) -> dict:
        return _jsonable({**self.__dict__, "levels": [str(v) for v in self.levels]})

    def summary(self) -> str:
        rows = [(k, self.coef[k], self.se[k], *self.ci[k], self.odds_ratio[k], self.p_value[k]) for k in self.coef]
        rows += [(f"tau_{k + 1}", t, s, *self.ci[f"tau_{k + 1}"], "", "")
                 for k, (t, s) in enumerate(zip(self.thresholds, self.threshold_se))]
        head = ("term", "estimate", "se", "2.5%", "97.5%", "OR", "p")
        tail = f"\nn={self.n_obs}  logLik={self.loglik:.3f}  AIC={self.aic:.2f}  cov={self.cov_type}"
        return text_table(head, rows, "Cumulative-link model (logit, ML)") + tail


def fit_ordinal(
    data: pd.DataFrame,
    *,
    response: str = "rating",
    fixed: Sequence[str] = ("candidate_type",),
    reference: Mapping[str, str] | None = None,
    levels: Sequence = (1, 2, 3, 4, 5),
    cluster: str | None = None,
) -> OrdinalResult:
    """Proportional-odds logit model without random effects (statsmodels ``OrderedModel``).

    statsmodels parameterises the thresholds as (tau_1, log(tau_2 - tau_1), ...); they are
    converted to tau_k with delta-method standard errors, so the numbers match R
    ``clm(response ~ fixed)``. ``cluster`` names a column for cluster-robust (sandwich)
    standard errors, e.g. ``"concept"``.
    """
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    if reference is None:
        reference = {"candidate_type": "human"} if "candidate_type" in fixed else {}
    design = build_design(data, response=response, fixed=fixed, reference=reference, levels=levels)
    K, p = len(levels), len(design.coef_names)
    observed = np.unique(design.y)
    if len(observed) < K:
        raise ValueError(f"{response!r} has no observations at level(s) "
                         f"{[levels[k] for k in range(K) if k not in observed]}; drop them from levels")
    endog = pd.Series(pd.Categorical(design.y, categories=range(K), ordered=True))
    exog = pd.DataFrame(design.X, columns=list(design.coef_names))
    model = OrderedModel(endog, exog, distr="logit")
    fit_kw = {"method": "bfgs", "disp": False, "maxiter": 2000}
    if cluster is not None:
        groups = pd.factorize(data[cluster].astype(str))[0]
        fit_kw.update(cov_type="cluster", cov_kwds={"groups": groups})
    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        res = model.fit(**fit_kw)
    params = np.asarray(res.params, float)
    cov = np.asarray(res.cov_params(), float)
    warn = [str(w.message) for w in caught if "converge" in str(w.message).lower()]
    converged = bool(res.mle_retvals.get("converged", True))
    if not converged:
        warn.append("optimizer did not converge")
    # statsmodels: params = [beta, tau_1, log(tau_2 - tau_1), ...] -> tau_k = tau_1 + sum exp(.)
    raw = params[p:]
    tau = np.concatenate([[raw[0]], raw[0] + np.cumsum(np.exp(raw[1:]))])
    J = np.zeros((K - 1, K - 1))
    J[:, 0] = 1.0
    for k in range(1, K - 1):
        J[k, 1 : k + 1] = np.exp(raw[1 : k + 1])
    tau_se = np.sqrt(np.diag(J @ cov[p:, p:] @ J.T))
    coef, se, ci, orr, or_ci, pv = {}, {}, {}, {}, {}, {}
    for j, name in enumerate(design.coef_names):
        b, s = float(params[j]), float(np.sqrt(cov[j, j]))
        coef[name], se[name], ci[name] = b, s, (b - Z95 * s, b + Z95 * s)
        orr[name], or_ci[name] = float(np.exp(b)), (float(np.exp(b - Z95 * s)), float(np.exp(b + Z95 * s)))
        pv[name] = float(2 * norm.sf(abs(b / s)))
    for k in range(K - 1):
        ci[f"tau_{k + 1}"] = (float(tau[k] - Z95 * tau_se[k]), float(tau[k] + Z95 * tau_se[k]))
    return OrdinalResult(
        coef=coef, se=se, ci=ci, odds_ratio=orr, odds_ratio_ci=or_ci, p_value=pv,
        thresholds=tuple(float(t) for t in tau), threshold_se=tuple(float(s) for s in tau_se),
        loglik=float(res.llf), aic=float(res.aic), n_obs=design.n,
        cov_type="cluster" if cluster else "nonrobust", converged=converged, warnings=tuple(warn),
        levels=tuple(levels),
    )


@dataclass(frozen=True)
class GaussianMixedResult:
    """Linear mixed model on the raw 1–5 scores (App. D.4): contrasts in rating points."""

    coef: dict[str, float]
    se: dict[str, float]
    ci: dict[str, tuple[float, float]]
    intercept: float
    variance_components: dict[str, float]
    residual_variance: float
    n_obs: int
    converged: bool
    warnings: tuple[str, ...]

    def predict(self, data: pd.DataFrame) -> np.ndarray:
        """Expected rating at zero random effects."""
        return self.intercept + design_rows(data, list(self.coef)) @ np.array(list(self.coef.values()))

    def to_dict(self) -> dict:
        return _jsonable(dict(self.__dict__))

    def summary(self) -> str:
        rows = [(k, self.coef[k], self.se[k], *self.ci[k]) for k in self.coef]
        vc = ", ".join(f"{g} {v:.3f}" for g, v in self.variance_components.items())
        return (text_table(("term", "points", "se", "2.5%", "97.5%"), rows,
                           "Gaussian mixed model (REML, crossed variance components)")
                + f"\nvariances: {vc}, residual {self.residual_variance:.3f}; n={self.n_obs}")


def fit_gaussian_mixed(
    data: pd.DataFrame,
    *,
    response: str = "rating",
    factor: str = "candidate_type",
    reference: str = "human",
    random: Sequence[str] = RANDOM,
    engine: str = "reml",
) -> GaussianMixedResult:
    """REML linear mixed model ``response ~ factor`` with crossed random intercepts (App. D.4).

    ``engine="statsmodels"`` fits statsmodels ``MixedLM`` with the crossed effects as
    variance components inside one all-encompassing group (slow: minutes for 1,025 ratings
    on 2 cores); ``engine="reml"`` (default) maximises the same restricted likelihood with a
    dense Cholesky of the marginal covariance (seconds) and agrees with it to optimizer
    tolerance. Contrasts carry Wald 95% intervals.
    """
    if engine not in ("reml", "statsmodels"):
        raise ValueError(f"engine must be 'reml' or 'statsmodels', got {engine!r}")
    design = build_design(data, response=response, fixed=[factor], random=random,
                          reference={factor: reference},
                          levels=sorted(pd.unique(data[response].dropna())))
    if engine == "reml":
        from ._reml import fit_reml

        X = np.column_stack([np.ones(design.n), design.X])
        y = data[response].to_numpy(float)
        fit = fit_reml(y, X, [codes for codes, _ in design.groups.values()])
        se_all = np.sqrt(np.diag(fit.cov_beta))
        coef, se, ci = {}, {}, {}
        for j, name in enumerate(design.coef_names, start=1):
            b, s = float(fit.beta[j]), float(se_all[j])
            coef[name], se[name], ci[name] = b, s, (b - Z95 * s, b + Z95 * s)
        vcomp = {g: float(v) for g, v in zip(design.groups, fit.variances)}
        warn = [] if fit.converged else ["REML optimizer did not converge"]
        warn += [f"variance of {g!r} at the boundary (~0)" for g, v in vcomp.items() if v < 1e-6]
        return GaussianMixedResult(coef=coef, se=se, ci=ci, intercept=float(fit.beta[0]),
                                   variance_components=vcomp, residual_variance=fit.residual,
                                   n_obs=design.n, converged=fit.converged, warnings=tuple(warn))
    return _fit_mixedlm(data, response, factor, reference, list(random))


def _fit_mixedlm(data, response, factor, reference, random) -> GaussianMixedResult:
    import statsmodels.formula.api as smf

    df = pd.DataFrame({"y": data[response].astype(float), "t": data[factor].astype(str), "one": 1})
    for i, g in enumerate(random):
        df[f"g{i}"] = data[g].astype(str).to_numpy()
    vc = {g: f"0 + C(g{i})" for i, g in enumerate(random)}
    model = smf.mixedlm(f"y ~ C(t, Treatment({reference!r}))", df, groups="one", vc_formula=vc, re_formula="0")
    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        res = model.fit(reml=True, method=["lbfgs"])
    warn = [str(w.message).splitlines()[0] for w in caught
            if any(s in str(w.message).lower() for s in ("converge", "boundary", "singular"))]
    coef, se, ci = {}, {}, {}
    for name in res.fe_params.index:
        if name == "Intercept":
            continue
        level = name.rsplit("[T.", 1)[1].rstrip("]")
        key = coef_name(factor, level)
        b, s = float(res.fe_params[name]), float(res.bse_fe[name])
        coef[key], se[key], ci[key] = b, s, (b - Z95 * s, b + Z95 * s)
    names = list(res.model.exog_vc.names)  # statsmodels sorts the components by key
    vcomp = {g: float(res.vcomp[names.index(g)]) for g in random}
    return GaussianMixedResult(
        coef=coef, se=se, ci=ci, intercept=float(res.fe_params["Intercept"]), variance_components=vcomp,
        residual_variance=float(res.scale), n_obs=len(df), converged=bool(res.converged), warnings=tuple(warn),
    )
