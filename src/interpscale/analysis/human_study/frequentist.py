"""Maximum-likelihood mixed models: cumulative-link R ``clm`` (statsmodels) and ``clmm`` (``clmm.py``),
and the linear mixed model on the raw 1–5 scores with crossed random intercepts (App. D.4), by REML."""

from __future__ import annotations

import logging
import warnings as _warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import linalg, optimize
from scipy.stats import chi2, norm

from interpscale._jsonl import jsonable
from .design import (RANDOM, build_design, category_probs, check_kind, coef_name, design_rows,
                     marginal_category_probs, odds_ratios, ordinal_design, parse_random, random_formula,
                     tail_names, text_table, wald, z_value)
from interpscale.errors import UserError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OrdinalResult:
    """Maximum-likelihood cumulative-link model, R ``clm`` / ``clmm`` conventions:
    Pr(y <= k | u) = F(tau_k - x'beta - sum_g u_g), thresholds on the tau scale. ``clmm`` fills
    ``random_sd`` (per grouping factor), ``random_effects`` (conditional modes, R ``ranef``) and
    their SDs (``condVar``); ``ci["sd_<group>"]`` is a Wald interval on the log-SD scale."""

    coef: dict[str, float]
    se: dict[str, float]
    ci: dict[str, tuple[float, float]]  # Wald ``level`` intervals for coefficients, thresholds, SDs
    odds_ratio: dict[str, float]  # exp(beta); logit link only (empty for probit)
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
    link: str = "logit"
    level: float = 0.95
    method: str = "ML"  # "ML" (clm), "Laplace" or "AGQ(n)" (clmm)
    n_params: int = 0
    formula: str = ""
    random_sd: dict[str, float] = field(default_factory=dict)
    random_effects: dict[str, dict[str, float]] = field(default_factory=dict, repr=False)
    random_effects_sd: dict[str, dict[str, float]] = field(default_factory=dict, repr=False)

    @property
    def random_variance(self) -> dict[str, float]:
        return {g: s * s for g, s in self.random_sd.items()}

    def predict(self, data: pd.DataFrame, kind: str = "zero") -> np.ndarray:
        """Pr(y = k) for the rows of ``data``, shape (n, K): at zero random effects (``kind="zero"``,
        R ``predict``), at the conditional modes of the levels in ``data`` (``"conditional"``; 0
        for levels not in the fit), or integrated over the random effects (``"marginal"``)."""
        check_kind(kind)
        X = design_rows(data, list(self.coef))
        eta = X @ np.array(list(self.coef.values()), float) if len(self.coef) else np.zeros(len(data))
        tau = np.asarray(self.thresholds)
        if kind == "marginal" and self.random_sd:
            total = float(np.sqrt(sum(self.random_variance.values())))
            return marginal_category_probs(eta, tau, total, self.link)
        for g, modes in self.random_effects.items() if kind == "conditional" else ():
            if g not in data.columns:
                raise UserError(f"data needs column {g!r} for conditional predictions")
            eta = eta + data[g].astype(str).map(modes).fillna(0.0).to_numpy(float)
        return category_probs(eta, tau, self.link)

    def lr_test(self, other: "OrdinalResult") -> dict:
        """Likelihood-ratio test against a nested model (either order), like R ``anova``.

        A zero variance lies on the boundary of the parameter space: for one random effect the
        exact null is a 50:50 mixture of chi2(0) and chi2(1), so ``p_value_boundary`` halves p."""
        small, big = sorted((self, other), key=lambda r: r.n_params)
        if small.n_obs != big.n_obs:
            raise ValueError(f"models fitted to different data (n={small.n_obs} vs n={big.n_obs})")
        df = big.n_params - small.n_params
        if df <= 0:
            raise ValueError("the models have the same number of parameters; they are not nested")
        stat = max(2.0 * (big.loglik - small.loglik), 0.0)
        p = float(chi2.sf(stat, df))
        extra_sd = len(big.random_sd) - len(small.random_sd)
        pb = 0.5 * p if (df == 1 and extra_sd == 1) else p
        return {"statistic": stat, "df": df, "p_value": p, "p_value_boundary": pb}

    def to_dict(self) -> dict:
        return jsonable({**self.__dict__, "levels": [str(v) for v in self.levels]})

    def summary(self) -> str:
        lo_h, hi_h = tail_names(self.level)
        is_logit = self.link == "logit"
        rows = [(k, self.coef[k], self.se[k], *self.ci[k], *((self.odds_ratio[k],) if is_logit else ()),
                 self.p_value[k]) for k in self.coef]
        rows += [(f"tau_{k + 1}", t, s, *self.ci[f"tau_{k + 1}"], *(("",) if is_logit else ()), "")
                 for k, (t, s) in enumerate(zip(self.thresholds, self.threshold_se))]
        head = ("term", "estimate", "se", lo_h, hi_h, *(("OR",) if is_logit else ()), "p")
        kind = "mixed model" if self.random_sd else "model"
        title = f"Cumulative-link {kind} ({self.link}, {self.method}; {self.level:.0%} Wald intervals)"
        if self.formula:
            title += f"\n{self.formula}"
        out = text_table(head, rows, title)
        if self.random_sd:
            out += "\n" + text_table(("random intercept", "variance", "sd", f"sd {lo_h}", f"sd {hi_h}"),
                                     [(g, s * s, s, *self.ci[f"sd_{g}"]) for g, s in self.random_sd.items()])
        tail = f"\nn={self.n_obs}  logLik={self.loglik:.3f}  AIC={self.aic:.2f}  cov={self.cov_type}"
        warn = "".join(f"\nWARNING: {w}" for w in self.warnings)
        return out + tail + warn


def compare(*fits: OrdinalResult) -> pd.DataFrame:
    """R ``anova(m1, m2, ...)`` for nested ordinal fits: one row per model in order of size,
    with AIC, logLik and the likelihood-ratio test against the row above."""
    if len(fits) < 2:
        raise ValueError("compare() needs at least two fitted models")
    ordered = sorted(fits, key=lambda r: r.n_params)
    rows = []
    for i, f in enumerate(ordered):
        row = {"model": f.formula or f"model {i + 1}", "method": f.method, "n_params": f.n_params,
               "AIC": f.aic, "logLik": f.loglik, "LR_stat": np.nan, "df": np.nan, "p_value": np.nan}
        if i:
            t = f.lr_test(ordered[i - 1])
            row.update(LR_stat=t["statistic"], df=t["df"], p_value=t["p_value"])
        rows.append(row)
    return pd.DataFrame(rows)


def fit_ordinal(data: pd.DataFrame, *, response: str = "rating", fixed: Sequence[str] = ("candidate_type",),
                random: str | Sequence[str] = (), reference: Mapping[str, str] | None = None,
                levels: Sequence = (1, 2, 3, 4, 5), cluster: str | None = None, link: str = "logit",
                nagq: int = 1, level: float = 0.95) -> OrdinalResult:
    """Maximum-likelihood cumulative-link model with Wald ``level`` intervals: R ``clm``
    (statsmodels ``OrderedModel``, thresholds converted to tau_k with delta-method SEs as R has them;
    ``cluster``: a column for sandwich SEs) or, with ``random`` (``"rater,concept"``), ``clmm``:
    crossed intercepts by Laplace, or one factor by adaptive Gauss-Hermite with ``nagq`` nodes."""
    zq = z_value(level)
    design, rand = ordinal_design(data, response=response, fixed=fixed, random=random, reference=reference,
                                  levels=levels, link=link)
    slopes = {g: s for g, s in rand.items() if s}
    if slopes:
        raise UserError(f"random slopes {slopes} are only in the Bayesian model (fit_ordinal_mixed); "
                        "the maximum-likelihood fit takes random intercepts")
    if rand and cluster is not None:
        raise UserError("cluster-robust SEs and random effects are alternatives; pass one of cluster= or random=")
    K, p = len(levels), len(design.coef_names)
    observed = np.unique(design.y)
    if len(observed) < K:
        raise UserError(f"{response!r} has no observations at level(s) "
                        f"{[levels[k] for k in range(K) if k not in observed]}; drop them from levels")
    if rand:
        params, ses, loglik, converged, warn, fit, se_all = _fit_mixed(design, K, p, link, nagq)
        method = "Laplace" if nagq == 1 else f"AGQ({nagq})"
    else:
        params, ses, loglik, converged, warn = _fit_clm(design, data, cluster, link)
        method = "ML"
    coef, se, ci = wald(design.coef_names, params, ses, zq)
    orr, or_ci = odds_ratios(coef, ci) if link == "logit" else ({}, {})
    ci.update(wald([f"tau_{k + 1}" for k in range(K - 1)], params[p:], ses[p:], zq)[2])
    rsd, modes, mode_sd = _random_tables(design, fit, se_all, K - 1 + p, zq, ci) if rand else ({}, {}, {})
    for w in warn:
        log.warning("fit_ordinal: %s", w)
    n_params = K - 1 + p + len(rand)
    return OrdinalResult(
        coef=coef, se=se, ci=ci, odds_ratio=orr, odds_ratio_ci=or_ci,
        p_value={k: float(2 * norm.sf(abs(coef[k] / se[k]))) for k in coef},
        thresholds=tuple(float(t) for t in params[p:]), threshold_se=tuple(float(s) for s in ses[p:]),
        loglik=float(loglik), aic=float(-2 * loglik + 2 * n_params), n_obs=design.n,
        cov_type="cluster" if cluster else "nonrobust", converged=converged, warnings=tuple(warn),
        levels=tuple(levels), link=link, level=level, method=method, n_params=n_params,
        formula=random_formula(response, fixed, rand),
        random_sd=rsd, random_effects=modes, random_effects_sd=mode_sd)


def _fit_mixed(design, K, p, link, nagq):
    """R ``clmm``: (beta, tau), their SEs, logLik, converged, warnings, the fit and all SEs."""
    from .clmm import fit_clmm

    fit = fit_clmm(design.y, design.X, [c for c, _ in design.groups.values()], K, link=link, nagq=nagq)
    se_all = np.sqrt(np.diag(fit.cov))
    params = np.concatenate([fit.beta, fit.tau])
    ses = np.concatenate([se_all[K - 1 : K - 1 + p], se_all[: K - 1]])
    warn = [] if fit.converged else [f"optimizer did not converge: {fit.message}"]
    warn += [f"SD of {g!r} at the boundary (~0): the model is singular; drop the term"
             for g, sd in zip(design.groups, fit.sigma) if sd < 1e-4]
    return params, ses, fit.loglik, fit.converged, warn, fit, se_all


def _random_tables(design, fit, se_all, offset, zq, ci):
    """Random-effect SDs (Wald CI on log sd, added to ``ci``), conditional modes and their SDs."""
    rsd, modes, mode_sd, start = {}, {}, {}, 0
    for gi, (g, (_, names)) in enumerate(design.groups.items()):
        sd = rsd[g] = float(fit.sigma[gi])
        s_sd = float(se_all[offset + gi])
        if sd > 1e-4 and np.isfinite(s_sd):  # Wald on log(sd): se(log sd) = se(sd) / sd
            half = zq * s_sd / sd
            ci[f"sd_{g}"] = (sd * float(np.exp(-half)), sd * float(np.exp(half)))
        else:
            ci[f"sd_{g}"] = (0.0, float("nan"))
        sl = slice(start, start + len(names))
        modes[g] = dict(zip(names, map(float, fit.modes[sl])))
        mode_sd[g] = dict(zip(names, map(float, fit.mode_sd[sl])))
        start += len(names)
    return rsd, modes, mode_sd


def _fit_clm(design, data, cluster, link):
    """statsmodels ``OrderedModel``: (beta, tau), their SEs, logLik, converged, warnings."""
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    K, p = len(design.levels), len(design.coef_names)
    endog = pd.Series(pd.Categorical(design.y, categories=range(K), ordered=True))
    model = OrderedModel(endog, pd.DataFrame(design.X, columns=list(design.coef_names)), distr=link)
    fit_kw = {"method": "bfgs", "disp": False, "maxiter": 2000}
    if cluster is not None:
        fit_kw.update(cov_type="cluster", cov_kwds={"groups": pd.factorize(data[cluster].astype(str))[0]})
    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        res = model.fit(**fit_kw)
    params, cov = np.asarray(res.params, float), np.asarray(res.cov_params(), float)
    warn = [str(w.message) for w in caught if "converge" in str(w.message).lower()]
    converged = bool(res.mle_retvals.get("converged", True))
    if not converged:
        warn.append("optimizer did not converge")
    # statsmodels: params = [beta, tau_1, log(tau_2 - tau_1), ...] -> tau_k = tau_1 + sum exp(.)
    raw = params[p:]
    tau = np.concatenate([[raw[0]], raw[0] + np.cumsum(np.exp(raw[1:]))])
    J = np.tril(np.tile(np.concatenate([[1.0], np.exp(raw[1:])]), (K - 1, 1)))  # d tau_k / d raw_j, j <= k
    tau_se = np.sqrt(np.diag(J @ cov[p:, p:] @ J.T))
    beta_se = np.sqrt(np.diag(cov)[:p])
    return (np.concatenate([params[:p], tau]), np.concatenate([beta_se, tau_se]), float(res.llf), converged, warn)


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
        return jsonable(dict(self.__dict__))

    def summary(self) -> str:
        rows = [(k, self.coef[k], self.se[k], *self.ci[k]) for k in self.coef]
        vc = ", ".join(f"{g} {v:.3f}" for g, v in self.variance_components.items())
        return (text_table(("term", "points", "se", "2.5%", "97.5%"), rows,
                           "Gaussian mixed model (REML, crossed variance components)")
                + f"\nvariances: {vc}, residual {self.residual_variance:.3f}; n={self.n_obs}")


def fit_gaussian_mixed(data: pd.DataFrame, *, response: str = "rating", factor: str = "candidate_type",
                       reference: str = "human", random: Sequence[str] = RANDOM, engine: str = "reml",
                       level: float = 0.95) -> GaussianMixedResult:
    """REML linear mixed model ``response ~ factor`` with crossed random intercepts (App. D.4),
    contrasts with Wald ``level`` intervals. ``engine="reml"`` (seconds) agrees to optimizer
    tolerance with ``"statsmodels"``: ``MixedLM``, the crossed effects as variance components
    in one all-encompassing group (minutes for 1,025 ratings on 2 cores)."""
    if engine not in ("reml", "statsmodels"):
        raise UserError(f"engine must be 'reml' or 'statsmodels', got {engine!r}")
    zq = z_value(level)
    random = list(parse_random(random))
    design = build_design(data, response=response, fixed=[factor], random=random,
                          reference={factor: reference}, levels=sorted(pd.unique(data[response].dropna())))
    if engine == "statsmodels":
        return _fit_mixedlm(data, response, factor, reference, random, zq)
    X = np.column_stack([np.ones(design.n), design.X])
    beta, cov, variances, residual, converged = fit_reml(data[response].to_numpy(float), X,
                                                         [codes for codes, _ in design.groups.values()])
    coef, se, ci = wald(design.coef_names, beta[1:], np.sqrt(np.diag(cov))[1:], zq)
    vcomp = {g: float(v) for g, v in zip(design.groups, variances)}
    warn = [] if converged else ["REML optimizer did not converge"]
    warn += [f"variance of {g!r} at the boundary (~0)" for g, v in vcomp.items() if v < 1e-6]
    return GaussianMixedResult(coef=coef, se=se, ci=ci, intercept=float(beta[0]), variance_components=vcomp,
                               residual_variance=residual, n_obs=design.n, converged=converged,
                               warnings=tuple(warn))


def _fit_mixedlm(data, response, factor, reference, random, zq) -> GaussianMixedResult:
    import statsmodels.formula.api as smf

    df = pd.DataFrame({"y": data[response].astype(float), "t": data[factor].astype(str), "one": 1})
    for i, g in enumerate(random):
        df[f"g{i}"] = data[g].astype(str).to_numpy()
    vc = {g: f"0 + C(g{i})" for i, g in enumerate(random)}
    model = smf.mixedlm(f"y ~ C(t, Treatment({reference!r}))", df, groups="one", vc_formula=vc,
                        re_formula="0")
    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        res = model.fit(reml=True, method=["lbfgs"])
    warn = [str(w.message).splitlines()[0] for w in caught
            if any(s in str(w.message).lower() for s in ("converge", "boundary", "singular"))]
    terms = [n for n in res.fe_params.index if n != "Intercept"]
    names = [coef_name(factor, n.rsplit("[T.", 1)[1].rstrip("]")) for n in terms]
    coef, se, ci = wald(names, res.fe_params[terms], res.bse_fe[terms], zq)
    order = list(res.model.exog_vc.names)  # statsmodels sorts the components by key
    vcomp = {g: float(res.vcomp[order.index(g)]) for g in random}
    return GaussianMixedResult(
        coef=coef, se=se, ci=ci, intercept=float(res.fe_params["Intercept"]), variance_components=vcomp,
        residual_variance=float(res.scale), n_obs=len(df), converged=bool(res.converged),
        warnings=tuple(warn))


def fit_reml(y: np.ndarray, X: np.ndarray, group_codes: list[np.ndarray]):
    """(beta, cov(beta), variance per random factor, residual variance, converged) by REML.

    lme4's profiled criterion: with relative variances gamma_g = s2_g / s2_e and
    L = diag(sqrt(gamma)) over all levels, the scaled mixed-model matrix
    C = [[X'X, X'Z L], [L Z'X, L Z'Z L + I]] gives
    -2 l_R = log|C| + (n - p) (1 + log(2 pi pRSS / (n - p))), pRSS = y'y - b'C^{-1}b,
    with b = [X'y, L Z'y]. Each evaluation is one Cholesky of a (p + levels) square matrix."""
    from threadpoolctl import threadpool_limits

    # hundreds of small Cholesky factorisations: threaded BLAS only adds contention (10x here)
    with threadpool_limits(1):
        n, p = X.shape
        sizes = [int(c.max()) + 1 for c in group_codes]
        Z = np.zeros((n, sum(sizes)))
        for c, offset in zip(group_codes, np.cumsum([0, *sizes[:-1]])):
            Z[np.arange(n), offset + c] = 1.0
        which = np.repeat(np.arange(len(sizes)), sizes)  # factor of each level
        XtX, XtZ, ZtZ = X.T @ X, X.T @ Z, Z.T @ Z
        Xty, Zty, yty = X.T @ y, Z.T @ y, float(y @ y)

        def solve(log_gamma):
            lam = np.sqrt(np.exp(log_gamma))[which]
            C = np.block([[XtX, XtZ * lam], [(XtZ * lam).T, ZtZ * np.outer(lam, lam) + np.eye(len(lam))]])
            b = np.concatenate([Xty, lam * Zty])
            cf = linalg.cho_factor(C, lower=True, check_finite=False)
            sol = linalg.cho_solve(cf, b, check_finite=False)
            prss = max(yty - b @ sol, 1e-300)
            val = 2 * np.log(np.diag(cf[0])).sum() + (n - p) * (1 + np.log(2 * np.pi * prss / (n - p)))
            return val, sol, cf, prss

        def objective(log_gamma):
            try:
                return solve(log_gamma)[0]
            except (linalg.LinAlgError, ValueError):
                return np.inf

        bounds = [(np.log(1e-8), np.log(1e3))] * len(sizes)
        best = None
        for start in (-2.0, 0.0, -5.0):  # a few starts: crossed factors can have several optima
            res = optimize.minimize(objective, np.full(len(sizes), start), method="L-BFGS-B", bounds=bounds)
            if best is None or res.fun < best.fun - 1e-9:
                best = res
        _, sol, cf, prss = solve(best.x)
        s2 = prss / (n - p)
        cov = s2 * linalg.cho_solve(cf, np.eye(len(sol)), check_finite=False)[:p, :p]
        return sol[:p], cov, np.exp(best.x) * s2, float(s2), bool(best.success)
