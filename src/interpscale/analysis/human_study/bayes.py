"""Bayesian cumulative-link mixed model with crossed random intercepts and slopes (App. D.3), in PyMC.

The draws are read (summary, diagnostics, log-likelihood, predictions) in ``posterior.py``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ._common import z_value
from .design import RANDOM, Design, ordinal_codes, ordinal_design
from .posterior import OrdinalMixedResult, Priors, add_log_likelihood, slope_matrix, summarise, term_names


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
            transform=pm.distributions.transforms.ordered, initval=np.linspace(-2.0, 2.0, K - 1),
        )
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
        raise ValueError(f"sampler must be 'auto', 'nutpie' or 'pymc', got {sampler!r}")
    if sampler == "auto":
        try:
            import nutpie  # noqa: F401
        except ImportError:
            return "pymc"
        return "nutpie"
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
            raise ValueError(f"mass_matrix must be one of {MASS_MATRICES}, got {mass_matrix!r}")
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
