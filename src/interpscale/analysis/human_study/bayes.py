"""Bayesian cumulative-link mixed model with crossed random intercepts and slopes (App. D.3), in PyMC,
and the reading of its draws: the priors it records, diagnostics, the posterior summary, the
pointwise log-likelihood and predictions."""

from __future__ import annotations

import importlib.util
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from interpscale._jsonl import jsonable
from .design import (RANDOM, Design, category_probs, check_kind, design_rows, marginal_category_probs,
                     odds_ratios, ordinal_codes, ordinal_design, tail_names, text_table, z_value)
from interpscale.errors import UserError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Priors:
    """Weakly informative priors on the logit scale (defaults) — documented choices.

    - ``beta ~ Normal(0, beta_sd)``: 2.5 puts 95% of prior mass on odds ratios within
      about [1/135, 135], far wider than any plausible label-type effect, yet it keeps the
      sampler away from separation-driven infinities.
    - thresholds ``tau ~ Normal(0, threshold_sd)`` under the ordered transform: 5 covers
      every cumulative probability from 0.7% to 99.3% within one prior SD.
    - each random-intercept SD ``sigma_g ~ HalfNormal(sd_scale)``: 1.0 allows rater or
      concept spreads of several logits while shrinking factors with few levels (8
      raters) toward modest spreads instead of letting them diverge.
    - random slopes (``"candidate_type|rater"``): the (intercept, slopes) covariance of a
      group has HalfNormal(sd_scale) SDs and an ``LKJ(lkj_eta)`` correlation; 2.0 mildly
      favours small correlations, which 8 raters cannot pin down.

    ``Priors.wide()`` gives near-flat priors used to compare with maximum likelihood.
    """

    beta_sd: float = 2.5
    threshold_sd: float = 5.0
    sd_scale: float = 1.0
    lkj_eta: float = 2.0

    def __post_init__(self):
        for name in ("beta_sd", "threshold_sd", "sd_scale", "lkj_eta"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and np.isfinite(v) and v > 0):
                raise UserError(f"prior {name} must be a positive number, got {v!r}")

    @classmethod
    def wide(cls) -> "Priors":
        return cls(beta_sd=10.0, threshold_sd=10.0, sd_scale=5.0)


@dataclass(frozen=True)
class Diagnostics:
    max_rhat: float
    min_ess_bulk: float
    min_ess_tail: float
    divergences: int
    n_draws: int
    chains: int
    sampling_seconds: float  # NUTS tuning + draws, without compilation
    sampler: str
    compile_seconds: float = float("nan")  # model compilation paid by this fit (0 on a refit; nan: pymc)
    mass_matrix: str = "diag"

    @property
    def ess_per_second(self) -> float:
        return self.min_ess_bulk / max(self.sampling_seconds, 1e-9)


@dataclass(frozen=True)
class OrdinalMixedResult:
    """Posterior summary of a cumulative-link mixed model (medians, ``level`` equal-tailed CrIs);
    ``random_sd`` keys: the group (intercept SD), ``"group:coef"`` (a random slope's SD); ``idata``
    holds the posterior and the pointwise ``log_likelihood`` (``loo()``, ``waic()``)."""

    coef: dict[str, float]  # posterior medians of beta (log-odds)
    coef_sd: dict[str, float]
    ci: dict[str, tuple[float, float]]  # ``level`` CrI of beta, and of thresholds / SDs
    odds_ratio: dict[str, float]
    odds_ratio_ci: dict[str, tuple[float, float]]
    prob_positive: dict[str, float]  # P(beta > 0): the type beats the reference
    thresholds: tuple[float, ...]
    random_sd: dict[str, float]
    random_sd_sd: dict[str, float]
    diagnostics: Diagnostics
    converged: bool
    warnings: tuple[str, ...]
    priors: Priors
    n_obs: int
    levels: tuple
    idata: Any = field(repr=False, compare=False, default=None)
    level: float = 0.95
    link: str = "logit"
    random: dict[str, tuple[str, ...]] = field(default_factory=dict)  # group -> slope factors

    def draws(self, name: str) -> np.ndarray:
        """Flattened posterior draws of a coefficient, ``tau``, or ``sd_<group>``."""
        post = self.idata.posterior
        if name in self.coef:
            return post["beta"].sel(coef=name).values.ravel()
        return post[name].values.reshape(-1, *post[name].shape[2:])

    def predict(self, data: pd.DataFrame, kind: str = "zero", max_draws: int = 1000) -> np.ndarray:
        """Posterior-mean Pr(y = k) for the rows of ``data``, shape (n, K), over at most ``max_draws``
        evenly spaced draws; ``kind`` as ``OrdinalResult.predict`` (``"marginal"`` integrates each
        draw's random effects, whose variance depends on the row's covariates with random slopes)."""
        check_kind(kind)
        X = design_rows(data, list(self.coef))
        post = self.idata.posterior
        n_all = post.sizes["chain"] * post.sizes["draw"]
        take = np.unique(np.linspace(0, n_all - 1, min(max_draws, n_all)).astype(int))
        flat = lambda a: a.reshape(n_all, *a.shape[2:])[take]  # noqa: E731  (chain, draw, ...) -> (S, ...)
        tau = flat(post["tau"].values)
        eta = flat(post["beta"].values) @ X.T  # (S, n)
        if kind == "zero":
            return category_probs(eta, tau, self.link).mean(axis=0)
        var = np.zeros_like(eta)
        for g, slopes in self.random.items():
            Xg = slope_matrix(X, list(self.coef), slopes)  # (n, m): [1, slope columns]
            if kind == "marginal":
                var = var + np.einsum("nm,smk,nk->sn", Xg, flat(_group_cov(post, g, slopes)), Xg)
                continue
            if g not in data.columns:
                raise UserError(f"data needs column {g!r} for conditional predictions")
            names = list(post[f"z_{g}"].coords[g].values)
            pos = data[g].astype(str).map({k: i for i, k in enumerate(names)})
            known = pos.notna().to_numpy()
            u = flat(_group_effects(post, g, slopes))  # (S, levels, m)
            rows = np.where(known, pos.fillna(0).to_numpy(int), 0)
            eta = eta + np.where(known, np.einsum("snm,nm->sn", u[:, rows, :], Xg), 0.0)
        if kind == "conditional":
            return category_probs(eta, tau, self.link).mean(axis=0)
        return marginal_category_probs(eta, tau, np.sqrt(var), self.link).mean(axis=0)

    def loo(self, **kwargs):
        """PSIS-LOO of the fit through ArviZ (``az.loo``) on the stored pointwise log-likelihood."""
        import arviz as az

        return az.loo(self.idata, **kwargs)

    def waic(self, **kwargs):
        import arviz as az

        return az.waic(self.idata, **kwargs)

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k not in ("idata", "priors", "diagnostics")}
        out["priors"] = asdict(self.priors)
        out["diagnostics"] = {**asdict(self.diagnostics), "ess_per_second": self.diagnostics.ess_per_second}
        return jsonable(out)

    def summary(self) -> str:
        rows = [(k, self.coef[k], self.coef_sd[k], *self.ci[k], self.odds_ratio[k], *self.odds_ratio_ci[k],
                 self.prob_positive[k]) for k in self.coef]
        lo, hi = tail_names(self.level)
        head = ("coef", "median", "sd", lo, hi, "OR", f"OR {lo}", f"OR {hi}", "P(>0)")
        title = f"Bayesian cumulative-link mixed model ({self.link}; {self.level:.0%} CrI)"
        fixed = text_table(head, rows, title)
        sds = text_table(("random effect", "sd (median)", "posterior sd", lo, hi),
                         [(g, self.random_sd[g], self.random_sd_sd[g], *self.ci[f"sd_{g}"])
                          for g in self.random_sd])
        d = self.diagnostics
        comp = "" if np.isnan(d.compile_seconds) else f" (+ {d.compile_seconds:.1f} s compile)"
        diag = (f"n={self.n_obs}  thresholds={np.round(self.thresholds, 3).tolist()}\n"
                f"{d.sampler} ({d.mass_matrix} mass matrix): {d.chains} chains x {d.n_draws} draws in "
                f"{d.sampling_seconds:.1f} s{comp}; "
                f"max R-hat {d.max_rhat:.3f}, min bulk ESS {d.min_ess_bulk:.0f} "
                f"({d.ess_per_second:.1f}/s), divergences {d.divergences}")
        warn = "".join(f"\nWARNING: {w}" for w in self.warnings)
        return f"{fixed}\n{sds}\n{diag}{warn}"


def slope_columns(coef_names: Sequence[str], factor: str) -> list[int]:
    """Fixed-effect columns of ``factor`` (its treatment contrasts, or the covariate itself)."""
    cols = [j for j, n in enumerate(coef_names) if n == factor or n.startswith(f"{factor}[")]
    if not cols:
        raise UserError(f"random slope of {factor!r} needs {factor!r} among the fixed effects "
                        f"{list(coef_names)}")
    return cols


def slope_matrix(X: np.ndarray, coef_names: Sequence[str], slopes: Sequence[str]) -> np.ndarray:
    """[1, the slope factors' columns of X] for one grouping factor, shape (n, m)."""
    return np.column_stack([np.ones(len(X)), X[:, [j for f in slopes for j in slope_columns(coef_names, f)]]])


def term_names(coef_names: Sequence[str], slopes: Sequence[str]) -> list[str]:
    return ["(Intercept)", *[coef_names[j] for f in slopes for j in slope_columns(coef_names, f)]]


def _group_effects(post, g: str, slopes: Sequence[str]) -> np.ndarray:
    """Random effects of group ``g`` per draw: (chain, draw, levels, m), m = 1 + slopes."""
    if slopes:
        return post[f"u_{g}"].values
    return (post[f"sd_{g}"].values[..., None] * post[f"z_{g}"].values)[..., None]


def _group_cov(post, g: str, slopes: Sequence[str]) -> np.ndarray:
    """Covariance of group ``g``'s (intercept, slopes) per draw: (chain, draw, m, m)."""
    if slopes:
        L = post[f"chol_{g}"].values
        return L @ np.swapaxes(L, -1, -2)
    return (post[f"sd_{g}"].values ** 2)[..., None, None]


def _log_prob(y: np.ndarray, eta: np.ndarray, tau: np.ndarray, link: str) -> np.ndarray:
    """log Pr(y | eta, tau) per draw and row: eta (S, n), tau (S, K-1) -> (S, n)."""
    from scipy.special import log_ndtr

    S = eta.shape[0]
    pad = np.concatenate([np.full((S, 1), -np.inf), tau, np.full((S, 1), np.inf)], axis=1)
    a, b = pad[:, y + 1] - eta, pad[:, y] - eta
    lF = (lambda x: -np.logaddexp(0.0, -x)) if link == "logit" else log_ndtr  # log F(x)
    # log(F(a) - F(b)) on the tail that does not cancel (symmetric links: 1 - F(x) = F(-x))
    upper = a + b > 0
    hi = np.where(upper, lF(-b), lF(a))
    lo = np.where(upper, lF(-a), lF(b))
    with np.errstate(divide="ignore"):
        return hi + np.log1p(-np.exp(np.minimum(lo - hi, 0.0)))


def add_log_likelihood(idata, design: Design, y: np.ndarray, random: Mapping[str, Sequence[str]],
                       link: str) -> None:
    """Store the pointwise log-likelihood (chain, draw, obs) so ``az.loo`` / ``az.waic`` work."""
    import xarray as xr

    post = idata.posterior
    C, D = post.sizes["chain"], post.sizes["draw"]
    beta = post["beta"].values.reshape(C * D, -1)
    tau = post["tau"].values.reshape(C * D, -1)
    eta = beta @ design.X.T if design.X.shape[1] else np.zeros((C * D, design.n))
    for g, (codes, _) in design.groups.items():
        sl = random.get(g, ())
        u = _group_effects(post, g, sl)
        u = u.reshape(C * D, *u.shape[2:])  # (S, levels, m)
        eta = eta + np.einsum("snm,nm->sn", u[:, codes, :], slope_matrix(design.X, design.coef_names, sl))
    ll = _log_prob(y, eta, tau, link).reshape(C, D, design.n)
    da = xr.DataArray(ll, dims=("chain", "draw", "obs"),
                      coords={"chain": post.coords["chain"].values, "draw": post.coords["draw"].values})
    if "log_likelihood" in idata.groups():
        del idata.log_likelihood
    idata.add_groups({"log_likelihood": xr.Dataset({"y": da})})


def _diagnostics(idata, design: Design, *, rhat_max: float, ess_min: float,
                 **kw) -> tuple[Diagnostics, list[str]]:
    """R-hat, ESS and divergences over beta, tau and the random effects; the checks they fail."""
    import arviz as az

    names = ["beta", "tau", *[f"sd_{g}" for g in design.groups], *[f"z_{g}" for g in design.groups]]
    rhat = az.rhat(idata, var_names=names)
    as_min = lambda ds: float(min(np.nanmin(ds[v].values) for v in ds.data_vars))  # noqa: E731
    max_rhat = float(max(np.nanmax(rhat[v].values) for v in rhat.data_vars))
    div = int(idata.sample_stats["diverging"].values.sum()) if "diverging" in idata.sample_stats else 0
    diag = Diagnostics(max_rhat=max_rhat, min_ess_bulk=as_min(az.ess(idata, var_names=names, method="bulk")),
                       min_ess_tail=as_min(az.ess(idata, var_names=names, method="tail")), divergences=div,
                       **kw)
    checks = [(max_rhat > rhat_max, f"max R-hat {max_rhat:.3f} > {rhat_max}: chains disagree; run longer"),
              (diag.min_ess_bulk < ess_min,
               f"min bulk ESS {diag.min_ess_bulk:.0f} < {ess_min:.0f}: draw more samples"),
              (div, f"{div} divergent transitions: raise target_accept or tighten priors")]
    return diag, [msg for failed, msg in checks if failed]


def summarise(idata, design: Design, priors: Priors, y: np.ndarray, *, rhat_max: float, ess_min: float,
              level: float, link: str, random: Mapping[str, Sequence[str]], **diag_kw) -> OrdinalMixedResult:
    """The result of one fit: medians, ``level`` equal-tailed CrIs, diagnostics and their warnings."""
    q = ((1 - level) / 2, 0.5, (1 + level) / 2)
    levels = design.levels
    empty = [str(levels[k]) for k in range(len(levels)) if not np.any(y == k)]
    warnings_ = [f"no observations at level(s) {empty}; their thresholds rest on the prior"] if empty else []
    diag, failed = _diagnostics(idata, design, rhat_max=rhat_max, ess_min=ess_min, **diag_kw)
    warnings_ += failed
    for w in warnings_:
        log.warning("fit_ordinal_mixed: %s", w)
    post = idata.posterior
    beta = post["beta"].values.reshape(-1, len(design.coef_names))
    coef, coef_sd, ci, pp = {}, {}, {}, {}
    for j, name in enumerate(design.coef_names):
        b = beta[:, j]
        lo, med, hi = np.quantile(b, q)
        coef[name], coef_sd[name], ci[name] = float(med), float(b.std(ddof=1)), (float(lo), float(hi))
        pp[name] = float(np.mean(b > 0))
    orr, or_ci = odds_ratios(coef, ci)
    cri = lambda x: (float(np.quantile(x, q[0])), float(np.quantile(x, q[2])))  # noqa: E731
    tau = post["tau"].values.reshape(-1, len(levels) - 1)
    ci.update({f"tau_{k + 1}": cri(t) for k, t in enumerate(tau.T)})
    rsd, rsd_sd = {}, {}
    for g in design.groups:
        sds = post[f"sd_{g}"].values.reshape(post.sizes["chain"] * post.sizes["draw"], -1)
        keys = [g] + [f"{g}:{t}" for t in term_names(design.coef_names, random[g])[1:]]
        for key, s in zip(keys, sds.T):
            rsd[key], rsd_sd[key], ci[f"sd_{key}"] = float(np.median(s)), float(s.std(ddof=1)), cri(s)
    return OrdinalMixedResult(
        coef=coef, coef_sd=coef_sd, ci=ci, odds_ratio=orr, odds_ratio_ci=or_ci, prob_positive=pp,
        thresholds=tuple(float(t) for t in np.median(tau, axis=0)), random_sd=rsd, random_sd_sd=rsd_sd,
        diagnostics=diag, converged=not failed, warnings=tuple(warnings_), priors=priors, n_obs=design.n,
        levels=tuple(levels), idata=idata, level=level, link=link, random=dict(random))


def build_model(design: Design, priors: Priors, *, slopes: Mapping[str, Sequence[str]] | None = None,
                link: str = "logit"):
    """The PyMC model of App. D.3: Pr(y <= k) = F(tau_k - eta), eta = X beta + sum_g u_g.

    Random intercepts are non-centred (u_g = sd_g z_g). A group with ``slopes`` gets a
    correlated (intercept, slopes) vector per level, u = z L' with L the Cholesky factor of
    an LKJ covariance (R ``(candidate_type | rater)``). The observed codes sit in
    ``pm.Data("y_obs")`` so a compiled model can be refitted to new ratings on the same
    design (simulation studies) without recompiling.
    """
    import pymc as pm

    slopes = dict(slopes or {})
    K = len(design.levels)
    coords = {"coef": list(design.coef_names), "threshold": [f"{k}|{k + 1}" for k in range(1, K)]}
    coords.update({g: list(names) for g, (_, names) in design.groups.items()})
    coords.update({f"{g}_term": term_names(design.coef_names, sl) for g, sl in slopes.items() if sl})
    with pm.Model(coords=coords) as model:
        y_obs = pm.Data("y_obs", design.y)
        beta = pm.Normal("beta", 0.0, priors.beta_sd, dims="coef")
        tau = pm.Normal(
            "tau", 0.0, priors.threshold_sd, dims="threshold",
            transform=pm.distributions.transforms.ordered, initval=np.linspace(-2.0, 2.0, K - 1))
        eta = pm.math.dot(design.X, beta) if design.X.shape[1] else 0.0
        for g, (codes, _) in design.groups.items():
            if not slopes.get(g):
                sd = pm.HalfNormal(f"sd_{g}", priors.sd_scale)
                z = pm.Normal(f"z_{g}", 0.0, 1.0, dims=g)  # non-centred: u_g = sd_g * z_g
                eta = eta + sd * z[codes]
                continue
            Xg = slope_matrix(design.X, design.coef_names, slopes[g])
            m = Xg.shape[1]
            chol, _, sds = pm.LKJCholeskyCov(f"chol_{g}_packed", n=m, eta=priors.lkj_eta,
                                             sd_dist=pm.HalfNormal.dist(priors.sd_scale, shape=m),
                                             compute_corr=True, store_in_trace=False)
            pm.Deterministic(f"chol_{g}", chol)
            pm.Deterministic(f"sd_{g}", sds, dims=f"{g}_term")
            z = pm.Normal(f"z_{g}", 0.0, 1.0, dims=(g, f"{g}_term"))
            u = pm.Deterministic(f"u_{g}", pm.math.dot(z, chol.T), dims=(g, f"{g}_term"))
            eta = eta + (u[codes] * Xg).sum(axis=1)
        if link == "logit":
            pm.OrderedLogistic("y", eta=eta, cutpoints=tau, observed=y_obs, compute_p=False)
        else:
            pm.OrderedProbit("y", eta=eta, cutpoints=tau, sigma=1.0, observed=y_obs, compute_p=False)
    return model


MASS_MATRICES = ("low-rank", "diag")
SAMPLERS = ("auto", "nutpie", "pymc")  # auto: nutpie when installed


def _resolve_sampler(sampler: str) -> str:
    if sampler not in SAMPLERS:
        raise UserError(f"sampler must be 'auto', 'nutpie' or 'pymc', got {sampler!r}")
    if sampler == "auto":
        return "nutpie" if importlib.util.find_spec("nutpie") else "pymc"
    return sampler


class OrdinalMixedModel:
    """A cumulative-link mixed model bound to one design, compiled once, fitted many times:
    ``OrdinalMixedModel(data, ...).fit()`` is ``fit_ordinal_mixed(data, ...)``; ``fit(y=...)``
    refits new ratings for the same rows without recompiling (coverage and power studies)."""

    def __init__(self, data: pd.DataFrame, *, response: str = "rating",
                 fixed: Sequence[str] = ("candidate_type",), random: str | Sequence[str] = RANDOM,
                 reference: Mapping[str, str] | None = None, levels: Sequence = (1, 2, 3, 4, 5),
                 priors: Priors | None = None, sampler: str = "auto", link: str = "logit"):
        self.design, self.random = ordinal_design(data, response=response, fixed=fixed, random=random,
                                                  reference=reference, levels=levels, link=link)
        self.response, self.levels, self.link = response, tuple(levels), link
        self.priors = priors or Priors()
        self.model = build_model(self.design, self.priors, slopes=self.random, link=link)
        self.sampler = _resolve_sampler(sampler)
        self._compiled = None

    def fit(self, y: Sequence | None = None, *, draws: int = 1000, tune: int = 1000, chains: int = 4,
            cores: int | None = None, target_accept: float = 0.95, seed: int = 0, progressbar: bool = False,
            rhat_max: float = 1.01, ess_min: float = 400.0, mass_matrix: str = "low-rank", level: float = 0.95,
            sampler_kwargs: Mapping[str, Any] | None = None) -> OrdinalMixedResult:
        """Sample the posterior (of the original ratings, or of ``y`` on the same rows).

        ``mass_matrix``: nutpie's ``"low-rank"`` adaptation (default) or ``"diag"``; the
        default was chosen by measurement (benchmarks/README.md): on small crossed designs
        the thresholds trade off against the mean of a few rater intercepts, which a
        diagonal mass matrix adapts to poorly. PyMC's own sampler always uses a diagonal one.
        """
        if mass_matrix not in MASS_MATRICES:
            raise UserError(f"mass_matrix must be one of {MASS_MATRICES}, got {mass_matrix!r}")
        z_value(level)  # 0 < level < 1
        ycodes = self.design.y
        if y is not None:
            ycodes = ordinal_codes(pd.Series(np.asarray(y), index=self.design.index), self.levels,
                                   self.response, "y")
        kw = dict(draws=draws, tune=tune, chains=chains, cores=cores or min(chains, 2), target_accept=target_accept)
        compile_s, mass_used = float("nan"), "diag"
        if self.sampler == "nutpie":
            import nutpie

            t0 = time.perf_counter()
            if self._compiled is None:
                self._compiled = nutpie.compile_pymc_model(self.model)
            compile_s = time.perf_counter() - t0
            kw.update({"low_rank_modified_mass_matrix": mass_matrix == "low-rank", **(sampler_kwargs or {})})
            mass_used = "low-rank" if kw["low_rank_modified_mass_matrix"] else "diag"
            t0 = time.perf_counter()
            idata = nutpie.sample(self._compiled.with_data(y_obs=ycodes), seed=seed, progress_bar=progressbar, **kw)
        else:
            import pymc as pm

            t0 = time.perf_counter()
            with self.model:
                pm.set_data({"y_obs": ycodes})
                idata = pm.sample(random_seed=seed, progressbar=progressbar, compute_convergence_checks=False,
                                  **kw, **(sampler_kwargs or {}))
        seconds = time.perf_counter() - t0
        add_log_likelihood(idata, self.design, ycodes, self.random, self.link)
        return summarise(idata, self.design, self.priors, ycodes, rhat_max=rhat_max, ess_min=ess_min, level=level,
                         link=self.link, random=self.random, n_draws=draws, chains=chains, sampling_seconds=seconds,
                         sampler=self.sampler, compile_seconds=compile_s, mass_matrix=mass_used)


def fit_ordinal_mixed(data: pd.DataFrame, *, response: str = "rating", fixed: Sequence[str] = ("candidate_type",),
                      random: str | Sequence[str] = RANDOM, reference: Mapping[str, str] | None = None,
                      levels: Sequence = (1, 2, 3, 4, 5), priors: Priors | None = None, sampler: str = "auto",
                      link: str = "logit", **fit_kwargs: Any) -> OrdinalMixedResult:
    """Fit the Bayesian cumulative-link mixed model of App. D.3 by NUTS (nutpie when installed,
    else PyMC's; seeded). ``random``: crossed non-centred intercepts (``"rater,concept"``), terms
    like ``"candidate_type|rater"`` correlated random slopes; ``fit_kwargs`` go to
    ``OrdinalMixedModel.fit``. ``converged`` when max R-hat <= ``rhat_max``, min bulk ESS >=
    ``ess_min`` and nothing diverged, each failure logged and listed in ``warnings``.
    """
    return OrdinalMixedModel(data, response=response, fixed=fixed, random=random, reference=reference, levels=levels,
                             priors=priors, sampler=sampler, link=link).fit(**fit_kwargs)
