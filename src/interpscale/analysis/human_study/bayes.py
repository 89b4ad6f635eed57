"""Bayesian cumulative-link mixed model with crossed random intercepts (App. D.3), in PyMC."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ._common import category_probs, design_rows, text_table
from ._validate import ordinal_codes
from .design import Design, build_design

log = logging.getLogger(__name__)

RANDOM = ("rater", "concept", "context", "label")


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

    ``Priors.wide()`` gives near-flat priors used to compare with maximum likelihood.
    """

    beta_sd: float = 2.5
    threshold_sd: float = 5.0
    sd_scale: float = 1.0

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
    sampling_seconds: float
    sampler: str

    @property
    def ess_per_second(self) -> float:
        return self.min_ess_bulk / max(self.sampling_seconds, 1e-9)


@dataclass(frozen=True)
class OrdinalMixedResult:
    """Posterior summary of a cumulative-link mixed model (medians, 95% equal-tailed CrIs)."""

    coef: dict[str, float]  # posterior medians of beta (log-odds)
    coef_sd: dict[str, float]
    ci: dict[str, tuple[float, float]]  # 95% CrI of beta, and of thresholds / SDs
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

    def draws(self, name: str) -> np.ndarray:
        """Flattened posterior draws of a coefficient, ``tau``, or ``sd_<group>``."""
        post = self.idata.posterior
        if name in self.coef:
            return post["beta"].sel(coef=name).values.ravel()
        return post[name].values.reshape(-1, *post[name].shape[2:])

    def predict(self, data: pd.DataFrame) -> np.ndarray:
        """Posterior-mean Pr(y = k) for rows of ``data`` at zero random effects, shape (n, K)."""
        X = design_rows(data, list(self.coef))
        post = self.idata.posterior
        beta = post["beta"].values.reshape(-1, len(self.coef))
        tau = post["tau"].values.reshape(-1, len(self.thresholds))
        return category_probs(beta @ X.T, tau).mean(axis=0)

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k not in ("idata", "priors", "diagnostics")}
        out["priors"] = asdict(self.priors)
        out["diagnostics"] = {**asdict(self.diagnostics), "ess_per_second": self.diagnostics.ess_per_second}
        out["levels"] = [int(v) if isinstance(v, (int, np.integer)) else v for v in self.levels]
        out["warnings"] = list(self.warnings)
        return _jsonable(out)

    def summary(self) -> str:
        rows = [
            (k, self.coef[k], self.coef_sd[k], *self.ci[k], self.odds_ratio[k], *self.odds_ratio_ci[k],
             self.prob_positive[k])
            for k in self.coef
        ]
        head = ("coef", "median", "sd", "2.5%", "97.5%", "OR", "OR 2.5%", "OR 97.5%", "P(>0)")
        fixed = text_table(head, rows, "Bayesian cumulative-link mixed model (logit)")
        sds = text_table(("random intercept", "sd (median)", "posterior sd"),
                         [(g, self.random_sd[g], self.random_sd_sd[g]) for g in self.random_sd])
        d = self.diagnostics
        diag = (f"n={self.n_obs}  thresholds={np.round(self.thresholds, 3).tolist()}\n"
                f"{d.sampler}: {d.chains} chains x {d.n_draws} draws in {d.sampling_seconds:.1f} s; "
                f"max R-hat {d.max_rhat:.3f}, min bulk ESS {d.min_ess_bulk:.0f} "
                f"({d.ess_per_second:.1f}/s), divergences {d.divergences}")
        warn = "".join(f"\nWARNING: {w}" for w in self.warnings)
        return f"{fixed}\n{sds}\n{diag}{warn}"


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def build_model(design: Design, priors: Priors):
    """The PyMC model of App. D.3: Pr(y <= k) = logit^-1(tau_k - eta), eta = X beta + sum_g u_g.

    The observed codes sit in ``pm.Data("y_obs")`` so a compiled model can be refitted to new
    ratings on the same design (simulation studies) without recompiling.
    """
    import pymc as pm

    K = len(design.levels)
    coords = {"coef": list(design.coef_names), "threshold": [f"{k}|{k + 1}" for k in range(1, K)]}
    coords.update({g: list(names) for g, (_, names) in design.groups.items()})
    with pm.Model(coords=coords) as model:
        y_obs = pm.Data("y_obs", design.y)
        beta = pm.Normal("beta", 0.0, priors.beta_sd, dims="coef")
        tau = pm.Normal(
            "tau", 0.0, priors.threshold_sd, dims="threshold",
            transform=pm.distributions.transforms.ordered, initval=np.linspace(-2.0, 2.0, K - 1),
        )
        eta = pm.math.dot(design.X, beta) if design.X.shape[1] else 0.0
        for g, (codes, _) in design.groups.items():
            sd = pm.HalfNormal(f"sd_{g}", priors.sd_scale)
            z = pm.Normal(f"z_{g}", 0.0, 1.0, dims=g)  # non-centred: u_g = sd_g * z_g
            eta = eta + sd * z[codes]
        pm.OrderedLogistic("y", eta=eta, cutpoints=tau, observed=y_obs, compute_p=False)
    return model


def _resolve_sampler(sampler: str) -> str:
    if sampler not in ("auto", "nutpie", "pymc"):
        raise ValueError(f"sampler must be 'auto', 'nutpie' or 'pymc', got {sampler!r}")
    if sampler == "auto":
        try:
            import nutpie  # noqa: F401
        except ImportError:
            return "pymc"
        return "nutpie"
    return sampler


class OrdinalMixedModel:
    """A cumulative-link mixed model bound to one design, compiled once, fitted many times.

    ``OrdinalMixedModel(data, ...).fit()`` is ``fit_ordinal_mixed(data, ...)``; ``fit(y=...)``
    refits new ratings for the same rows (same levels, same order) without recompiling —
    what simulation-based coverage and power studies need.
    """

    def __init__(self, data: pd.DataFrame, *, response: str = "rating",
                 fixed: Sequence[str] = ("candidate_type",), random: Sequence[str] = RANDOM,
                 reference: Mapping[str, str] | None = None, levels: Sequence = (1, 2, 3, 4, 5),
                 priors: Priors | None = None, sampler: str = "auto"):
        if reference is None:
            reference = {"candidate_type": "human"} if "candidate_type" in fixed else {}
        self.response, self.levels = response, tuple(levels)
        self.priors = priors or Priors()
        self.design = build_design(data, response=response, fixed=fixed, random=random,
                                   reference=reference, levels=levels)
        self.model = build_model(self.design, self.priors)
        self.sampler = _resolve_sampler(sampler)
        self._compiled = None

    def fit(self, y: Sequence | None = None, *, draws: int = 1000, tune: int = 1000, chains: int = 4,
            cores: int | None = None, target_accept: float = 0.95, seed: int = 0, progressbar: bool = False,
            rhat_max: float = 1.01, ess_min: float = 400.0, sampler_kwargs: Mapping[str, Any] | None = None,
            ) -> "OrdinalMixedResult":
        """Sample the posterior (of the original ratings, or of ``y`` on the same rows)."""
        import time

        import pymc as pm

        ycodes = self.design.y
        if y is not None:
            ycodes = ordinal_codes(pd.Series(np.asarray(y), index=self.design.index), self.levels,
                                   self.response, "y")
        cores = cores or min(chains, 2)
        t0 = time.perf_counter()
        if self.sampler == "nutpie":
            import nutpie

            if self._compiled is None:
                self._compiled = nutpie.compile_pymc_model(self.model)
            kw = dict(sampler_kwargs or {})
            idata = nutpie.sample(self._compiled.with_data(y_obs=ycodes), draws=draws, tune=tune, chains=chains,
                                  cores=cores, seed=seed, progress_bar=progressbar, target_accept=target_accept,
                                  **kw)
        else:
            with self.model:
                pm.set_data({"y_obs": ycodes})
                idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=cores, target_accept=target_accept,
                                  random_seed=seed, progressbar=progressbar, compute_convergence_checks=False)
        seconds = time.perf_counter() - t0
        return _summarise(idata, self.design, self.priors, ycodes, seconds, self.sampler,
                          draws=draws, chains=chains, rhat_max=rhat_max, ess_min=ess_min)


def fit_ordinal_mixed(
    data: pd.DataFrame,
    *,
    response: str = "rating",
    fixed: Sequence[str] = ("candidate_type",),
    random: Sequence[str] = RANDOM,
    reference: Mapping[str, str] | None = None,
    levels: Sequence = (1, 2, 3, 4, 5),
    priors: Priors | None = None,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    cores: int | None = None,
    target_accept: float = 0.95,
    seed: int = 0,
    sampler: str = "auto",
    progressbar: bool = False,
    rhat_max: float = 1.01,
    ess_min: float = 400.0,
    sampler_kwargs: Mapping[str, Any] | None = None,
) -> OrdinalMixedResult:
    """Fit the Bayesian cumulative-link mixed model of App. D.3 by NUTS.

    Fixed effects are treatment-coded against ``reference`` (default
    ``{"candidate_type": "human"}``); ``random`` factors get crossed non-centred intercepts.
    ``sampler="auto"`` uses nutpie when installed, else PyMC's NUTS; both seeded. On the
    paper-sized study nutpie's default diagonal mass matrix beat its low-rank adaptation on
    ESS per second (benchmarks/README.md); pass ``sampler_kwargs`` to change it.
    The fit is ``converged`` when max R-hat <= ``rhat_max``, min bulk ESS >= ``ess_min``
    and there are no divergences; each failure is logged and listed in ``warnings``.
    ``sampler_kwargs`` go to ``nutpie.sample`` (e.g. ``low_rank_modified_mass_matrix=True``).
    """
    model = OrdinalMixedModel(data, response=response, fixed=fixed, random=random, reference=reference,
                              levels=levels, priors=priors, sampler=sampler)
    return model.fit(draws=draws, tune=tune, chains=chains, cores=cores, target_accept=target_accept, seed=seed,
                     progressbar=progressbar, rhat_max=rhat_max, ess_min=ess_min, sampler_kwargs=sampler_kwargs)


def _summarise(idata, design: Design, priors: Priors, y: np.ndarray, seconds: float, sampler: str, *,
               draws: int, chains: int, rhat_max: float, ess_min: float) -> OrdinalMixedResult:
    import arviz as az

    levels = design.levels
    warnings_: list[str] = []
    empty = [str(levels[k]) for k in range(len(levels)) if not np.any(y == k)]
    if empty:
        warnings_.append(f"no observations at level(s) {empty}; their thresholds rest on the prior")
    post = idata.posterior
    names = ["beta", "tau", *[f"sd_{g}" for g in design.groups], *[f"z_{g}" for g in design.groups]]
    rhat = az.rhat(idata, var_names=names)
    ess_b = az.ess(idata, var_names=names, method="bulk")
    ess_t = az.ess(idata, var_names=names, method="tail")
    as_min = lambda ds: float(min(np.nanmin(ds[v].values) for v in ds.data_vars))  # noqa: E731
    max_rhat = float(max(np.nanmax(rhat[v].values) for v in rhat.data_vars))
    div = int(idata.sample_stats["diverging"].values.sum()) if "diverging" in idata.sample_stats else 0
    diag = Diagnostics(max_rhat=max_rhat, min_ess_bulk=as_min(ess_b), min_ess_tail=as_min(ess_t),
                       divergences=div, n_draws=draws, chains=chains, sampling_seconds=seconds, sampler=sampler)
    bad = False
    if max_rhat > rhat_max:
        bad = True
        warnings_.append(f"max R-hat {max_rhat:.3f} > {rhat_max}: chains disagree; run longer")
    if diag.min_ess_bulk < ess_min:
        bad = True
        warnings_.append(f"min bulk ESS {diag.min_ess_bulk:.0f} < {ess_min:.0f}: draw more samples")
    if div:
        bad = True
        warnings_.append(f"{div} divergent transitions: raise target_accept or tighten priors")
    for w in warnings_:
        log.warning("fit_ordinal_mixed: %s", w)

    beta = post["beta"].values.reshape(-1, len(design.coef_names))
    coef, coef_sd, ci, orr, or_ci, pp = {}, {}, {}, {}, {}, {}
    for j, name in enumerate(design.coef_names):
        b = beta[:, j]
        lo, med, hi = np.quantile(b, [0.025, 0.5, 0.975])
        coef[name], coef_sd[name], ci[name] = float(med), float(b.std(ddof=1)), (float(lo), float(hi))
        orr[name], or_ci[name] = float(np.exp(med)), (float(np.exp(lo)), float(np.exp(hi)))
        pp[name] = float(np.mean(b > 0))
    tau = post["tau"].values.reshape(-1, len(levels) - 1)
    for k in range(tau.shape[1]):
        ci[f"tau_{k + 1}"] = tuple(float(q) for q in np.quantile(tau[:, k], [0.025, 0.975]))
    rsd, rsd_sd = {}, {}
    for g in design.groups:
        s = post[f"sd_{g}"].values.ravel()
        rsd[g], rsd_sd[g] = float(np.median(s)), float(s.std(ddof=1))
        ci[f"sd_{g}"] = tuple(float(q) for q in np.quantile(s, [0.025, 0.975]))
    return OrdinalMixedResult(
        coef=coef, coef_sd=coef_sd, ci=ci, odds_ratio=orr, odds_ratio_ci=or_ci, prob_positive=pp,
        thresholds=tuple(float(t) for t in np.median(tau, axis=0)), random_sd=rsd, random_sd_sd=rsd_sd,
        diagnostics=diag, converged=not bad, warnings=tuple(warnings_), priors=priors, n_obs=design.n,
        levels=tuple(levels), idata=idata,
    )
