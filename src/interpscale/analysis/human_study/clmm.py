"""Maximum-likelihood cumulative-link mixed model (R ``ordinal::clmm``): the engine.

Model (App. D.3, frequentist): Pr(y_i <= k | u) = F(tau_k - x_i'beta - sum_g u_{g[i]}),
u_g = sigma_g z_g, z ~ N(0, I), with crossed random intercepts for any number of grouping
factors and F the logistic or standard-normal CDF.

Marginal likelihood by the Laplace approximation (any number of crossed factors) or by
adaptive Gauss-Hermite quadrature (one grouping factor, ``nagq`` > 1), as in ``clmm``:

    h(z)   = -sum_i log p_i(eta_i(z)) + z'z / 2                      (penalised deviance / 2)
    H(z)   = diag(s) Z' W(z) Z diag(s) + I,  W = -d^2 log p / d eta^2 (exact Hessian of h)
    -log L ~ h(z^) + log|H(z^)| / 2                                  (Laplace)

with z^ the conditional mode (Newton with step halving). The gradient in the outer
parameters (tau, beta, sigma) is exact: torch differentiates the objective evaluated at
z(theta) = z^ - H^{-1} grad_z h(z^, theta), one Newton step from the mode, whose derivative
is the implicit-function derivative dz^/dtheta. The outer optimiser is L-BFGS-B (sigma >= 0,
thresholds kept ordered through log increments); standard errors come from a central
finite-difference Hessian of that exact gradient in the (tau, beta, sigma) parameterisation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch  # this module is imported only when a mixed model is fitted
from scipy import optimize, stats

from .design import check_link
from interpscale.errors import UserError

_BIG = 1e4  # stands in for tau_0 = -inf and tau_K = +inf (F(1e4) == 1 exactly in float64)


@dataclass(frozen=True)
class ClmmFit:
    """Raw estimates of one fit; ``frequentist.fit_ordinal`` wraps them in an ``OrdinalResult``."""

    tau: np.ndarray
    beta: np.ndarray
    sigma: np.ndarray  # one SD per grouping factor
    cov: np.ndarray  # inverse Hessian of -log L over (tau, beta, sigma)
    loglik: float
    modes: np.ndarray  # conditional modes u = sigma * z^, one per level (factors concatenated)
    mode_sd: np.ndarray  # conditional SDs sigma * sqrt(diag H^-1)
    converged: bool
    message: str


def _torch_link(link: str):
    """F, f = F', f' as torch functions; symmetric links, so 1 - F(x) = F(-x)."""
    if link == "logit":
        def f(x):
            return torch.sigmoid(x) * torch.sigmoid(-x)
        return torch.sigmoid, f, lambda x: f(x) * (torch.sigmoid(-x) - torch.sigmoid(x))

    def f(x):
        return torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return torch.special.ndtr, f, lambda x: -x * f(x)


class _Problem:
    """Tensors of one data set and the Laplace / AGQ objective on them."""

    def __init__(self, y, X, group_codes, K: int, link: str, nagq: int):
        dt = torch.float64
        self.n, self.p = X.shape
        self.K, self.G = K, len(group_codes)
        self.sizes = [int(c.max()) + 1 for c in group_codes]
        self.q = sum(self.sizes)
        offsets = np.cumsum([0, *self.sizes[:-1]])
        idx = np.column_stack([c + o for c, o in zip(group_codes, offsets)]).astype(np.int64)
        self.idx = torch.as_tensor(idx)
        self.factor_of_level = torch.as_tensor(np.repeat(np.arange(self.G), self.sizes))
        self.X = torch.as_tensor(np.asarray(X, float), dtype=dt)
        self.y = torch.as_tensor(np.array(y, np.int64))
        # (i, g, h) -> flat position of H[idx_ig, idx_ih]: Z'WZ built by one index_add
        self.pairs = torch.as_tensor((idx[:, :, None] * self.q + idx[:, None, :]).reshape(-1))
        self.F, self.f, self.fp = _torch_link(link)
        self.nagq = nagq
        if nagq > 1:
            x, w = np.polynomial.hermite.hermgauss(nagq)
            self.gh_x = torch.as_tensor(x, dtype=dt)
            self.gh_logw = torch.as_tensor(np.log(w) + x**2, dtype=dt)
        self.z = torch.zeros(self.q, dtype=dt)  # warm start for the next mode search

    # --- per-observation terms -------------------------------------------------------------
    def terms(self, eta, tau):
        """log p_i, d log p_i / d eta_i and w_i = -d^2 log p_i / d eta_i^2 (eta broadcasts)."""
        big = torch.full((1,), _BIG, dtype=tau.dtype)
        pad = torch.cat([-big, tau, big])
        e = eta.T if eta.dim() == 2 else eta
        a, b = pad[self.y + 1] - e, pad[self.y] - e
        F, f, fp = self.F, self.f, self.fp
        # Pr(tau_{k-1} < y* <= tau_k): take the tail that does not cancel
        p = torch.where(a + b > 0, F(-b) - F(-a), F(a) - F(b)).clamp_min(1e-300)
        d1 = -(f(a) - f(b)) / p
        w = d1 * d1 - (fp(a) - fp(b)) / p
        out = torch.log(p), d1, w
        return tuple(t.T for t in out) if eta.dim() == 2 else out

    def eta(self, beta, s, z):
        return self.X @ beta + (s[self.idx] * z[self.idx]).sum(1)

    def grad_h(self, s, z, d1):
        """dh/dz = z - s * Z' d1."""
        acc = torch.zeros(self.q, dtype=z.dtype).index_add(0, self.idx.reshape(-1),
                                                          d1[:, None].expand(-1, self.G).reshape(-1))
        return z - s * acc

    def hessian(self, s, w):
        """H = diag(s) Z' W Z diag(s) + I (dense; q = total number of levels)."""
        M = torch.zeros(self.q * self.q, dtype=w.dtype).index_add(
            0, self.pairs, w[:, None].expand(-1, self.G * self.G).reshape(-1)).view(self.q, self.q)
        return M * (s[:, None] * s[None, :]) + torch.eye(self.q, dtype=w.dtype)

    # --- conditional modes -----------------------------------------------------------------
    def mode(self, tau, beta, sigma, z0=None, tol=1e-10, max_iter=100):
        """z^ = argmin h(z) by Newton with step halving; returns (z^, Cholesky of H(z^))."""
        s = sigma[self.factor_of_level]
        z = (self.z if z0 is None else z0).clone()

        def h_of(z):
            lp, d1, w = self.terms(self.eta(beta, s, z), tau)
            return -lp.sum() + 0.5 * (z @ z), d1, w

        h, d1, w = h_of(z)
        for _ in range(max_iter):
            g = self.grad_h(s, z, d1)
            L = torch.linalg.cholesky(self.hessian(s, w))
            if float(g.abs().max()) < tol:
                break
            step = torch.cholesky_solve(g[:, None], L)[:, 0]
            for _ in range(30):
                z_new = z - step
                h_new, d1_new, w_new = h_of(z_new)
                if float(h_new) <= float(h) + 1e-12:
                    break
                step = step / 2
            else:
                break
            converged_step = float(step.abs().max()) < 1e-12
            z, h, d1, w = z_new, h_new, d1_new, w_new
            if converged_step:
                L = torch.linalg.cholesky(self.hessian(s, w))
                break
        return z, L

    # --- objective -------------------------------------------------------------------------
    def nll(self, tau, beta, sigma, *, grad: bool):
        """-log L (Laplace or AGQ) and, with ``grad``, its gradient in (tau, beta, sigma)."""
        with torch.no_grad():
            zhat, L0 = self.mode(tau, beta, sigma)
        self.z = zhat
        with torch.enable_grad():
            tau, beta, sigma = (t.detach().clone().requires_grad_(grad) for t in (tau, beta, sigma))
            s = sigma[self.factor_of_level]
            # one Newton step from the mode: same value, implicit-function derivative dz^/dtheta
            _, d1, _ = self.terms(self.eta(beta, s, zhat), tau)
            z = zhat - torch.cholesky_solve(self.grad_h(s, zhat, d1)[:, None], L0)[:, 0]
            lp, d1, w = self.terms(self.eta(beta, s, z), tau)
            if self.nagq <= 1:
                val = -lp.sum() + 0.5 * (z @ z) + self._half_logdet(s, w)  # Laplace
            else:
                val = self._agq(tau, beta, s, z, w)
            if not grad:
                return float(val.detach()), None
            gt, gb, gs = torch.autograd.grad(val, (tau, beta, sigma))
        return float(val.detach()), (gt.numpy(), gb.numpy(), gs.numpy())

    def _half_logdet(self, s, w):
        """log|H| / 2 with the gradient d = tr(H^-1 dH) / 2 through a surrogate: with P = H^-1
        held fixed, tr(P diag(s) Z'WZ diag(s)) / 2 = sum_i w_i sum_gh s_a s_b P_ab / 2 has that
        gradient (a, b the levels of row i), and avoids differentiating a dense Cholesky."""
        with torch.no_grad():
            L = torch.linalg.cholesky(self.hessian(s.detach(), w.detach()))
            value = torch.log(torch.diagonal(L)).sum()
            P = torch.cholesky_inverse(L).reshape(-1)[self.pairs].view(self.n, self.G * self.G)
        ia = self.idx[:, :, None].expand(-1, -1, self.G).reshape(self.n, -1)
        ib = self.idx[:, None, :].expand(-1, self.G, -1).reshape(self.n, -1)
        surrogate = 0.5 * (w[:, None] * s[ia] * s[ib] * P).sum()
        return value + surrogate - surrogate.detach()

    def _agq(self, tau, beta, s, z, w):
        """Adaptive Gauss-Hermite quadrature for one grouping factor (levels independent)."""
        lev = self.idx[:, 0]
        Hj = 1.0 + s * s * torch.zeros(self.q, dtype=w.dtype).index_add(0, lev, w)  # curvature per level
        scale = torch.sqrt(2.0 / Hj)
        nodes = z[:, None] + scale[:, None] * self.gh_x[None, :]  # (q, Q)
        eta = (self.X @ beta)[:, None] + s[lev][:, None] * nodes[lev]  # (n, Q)
        lp, _, _ = self.terms(eta, tau)
        ll = torch.zeros(self.q, nodes.shape[1], dtype=w.dtype).index_add(0, lev, lp)  # sum_i in j
        log_int = torch.logsumexp(self.gh_logw[None, :] + ll - 0.5 * nodes**2, dim=1)
        log_int = log_int + torch.log(scale) - 0.5 * math.log(2 * math.pi)
        return -log_int.sum()


def fit_clmm(y: np.ndarray, X: np.ndarray, group_codes: list[np.ndarray], K: int, *, link: str = "logit",
             nagq: int = 1, start_sigma: float = 0.5, gtol: float = 1e-6, max_iter: int = 500) -> ClmmFit:
    """Maximise the Laplace (``nagq`` = 1) or AGQ (``nagq`` > 1, one factor) likelihood."""
    check_link(link)
    if nagq < 1:
        raise UserError(f"nagq must be >= 1, got {nagq}")
    if nagq > 1 and len(group_codes) != 1:
        raise UserError(f"adaptive quadrature (nagq={nagq}) needs exactly one grouping factor, "
                        f"got {len(group_codes)}; use nagq=1 (Laplace) for crossed factors")
    prob = _Problem(y, X, group_codes, K, link, nagq)
    p, G = X.shape[1], len(group_codes)
    as_t = lambda *arrays: [torch.as_tensor(a, dtype=torch.float64) for a in arrays]  # noqa: E731

    def unpack(v):
        t = v[: K - 1]
        tau = np.concatenate([[t[0]], t[0] + np.cumsum(np.exp(t[1:]))])
        return tau, v[K - 1 : K - 1 + p], v[K - 1 + p :]

    def fun(v):
        tau, beta, sigma = unpack(v)
        val, (gt, gb, gs) = prob.nll(*as_t(tau, beta, sigma), grad=True)
        # chain rule through tau_k = t_1 + sum_{j<=k} exp(t_j)
        g_t = np.empty(K - 1)
        g_t[0] = gt.sum()
        g_t[1:] = np.exp(v[1 : K - 1]) * np.cumsum(gt[::-1])[::-1][1:]
        return val, np.concatenate([g_t, gb, gs])

    # thresholds start at the observed cumulative shares
    cum = np.clip(np.cumsum(np.bincount(y, minlength=K))[:-1] / len(y), 0.02, 0.98)
    tau0 = stats.logistic.ppf(cum) if link == "logit" else stats.norm.ppf(cum)
    v0 = np.concatenate([[tau0[0]], np.log(np.maximum(np.diff(tau0), 0.1)), np.zeros(p), np.full(G, start_sigma)])
    bounds = [(None, None)] * (K - 1 + p) + [(0.0, None)] * G
    res = optimize.minimize(fun, v0, jac=True, method="L-BFGS-B", bounds=bounds,
                            options={"maxiter": max_iter, "gtol": gtol, "ftol": 1e-14, "maxcor": 20})
    tau, beta, sigma = unpack(res.x)
    theta = np.concatenate([tau, beta, sigma])

    def grad_direct(th):
        return np.concatenate(prob.nll(*as_t(th[: K - 1], th[K - 1 : K - 1 + p], th[K - 1 + p :]), grad=True)[1])

    g_opt = grad_direct(theta)
    free = np.ones(len(theta), bool)
    free[K - 1 + p :] = sigma > 1e-4  # a variance at the boundary is not a free parameter
    hess = _fd_hessian(grad_direct, theta, free)
    cov = np.full((len(theta), len(theta)), np.nan)
    converged = bool(res.success)
    message = str(res.message)
    try:
        sub = np.linalg.inv(hess[np.ix_(free, free)])
        if np.any(np.diag(sub) <= 0):
            raise np.linalg.LinAlgError("Hessian not positive definite")
        cov[np.ix_(free, free)] = sub
    except np.linalg.LinAlgError as exc:
        converged, message = False, f"{message}; {exc}"
    max_grad = float(np.max(np.abs(g_opt[free]))) if free.any() else 0.0
    if max_grad > 1e-3:
        converged = False
        message += f"; max |gradient| {max_grad:.2g} at the optimum"
    with torch.no_grad():
        t_ = as_t(tau, beta, sigma)
        val, _ = prob.nll(*t_, grad=False)
        zhat, L = prob.mode(*t_)
        s = t_[2][prob.factor_of_level]
        Hinv_diag = torch.cholesky_inverse(L).diagonal()
        modes, mode_sd = (s * zhat).numpy(), (s * Hinv_diag.sqrt()).numpy()
    return ClmmFit(tau=tau, beta=beta, sigma=sigma, cov=cov, loglik=-val, modes=modes, mode_sd=mode_sd,
                   converged=converged, message=message)


def _fd_hessian(grad, theta: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Central differences of the exact gradient, symmetrised."""
    k = len(theta)
    H = np.zeros((k, k))
    for j in np.flatnonzero(free):
        h = 1e-4 * max(1.0, abs(theta[j]))
        e = np.zeros(k)
        e[j] = h
        H[:, j] = (grad(theta + e) - grad(theta - e)) / (2 * h)
    return 0.5 * (H + H.T)
