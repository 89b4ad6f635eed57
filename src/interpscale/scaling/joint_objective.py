"""The objective of the joint Chinchilla fit (paper Eq. 28) and its batched minimiser.

Huber loss (delta = 1e-3) on log residuals, *summed* over points (an averaged loss makes
L-BFGS-B stop early), in the log-sum-exp parameterisation of Hoffmann et al. / Epoch:
log L = LSE(a - alpha log P, b - beta log D, e) with A_P = e^a, A_D = e^b, L_inf = e^e. All
starts of a grid, or all bootstrap replicates, are minimised together by ``_optim.batched_bfgs``
with analytic gradients, as the law :class:`ChinchillaLaw` of the one engine (``lawfit``).
"""

from __future__ import annotations

import itertools

import numpy as np

from ._optim import chunked


def epoch_grid() -> np.ndarray:
    """Hoffmann/Epoch initialisation grid, 4,500 (a, b, e, alpha, beta) rows: alpha, beta in
    {0, 0.5, ..., 2}; e in {-1, -0.5, ..., 1}; a, b in {0, 5, ..., 25}."""
    ab = np.arange(0.0, 25.0 + 1e-9, 5.0)
    e = np.arange(-1.0, 1.0 + 1e-9, 0.5)
    al = np.arange(0.0, 2.0 + 1e-9, 0.5)
    rows = [(a, b, ee, x, y) for x, y, ee, a, b in itertools.product(al, al, e, ab, ab)]
    return np.array(rows, dtype=float)


def coarse_grid() -> np.ndarray:
    """A 243-start grid (three values per parameter) for quick fits."""
    vals = ([0.0, 10.0, 20.0], [0.0, 10.0, 20.0], [-1.0, 0.0, 1.0], [0.25, 0.75, 1.5], [0.25, 0.75, 1.5])
    return np.array(list(itertools.product(*vals)), dtype=float)


def log_pred(theta: np.ndarray, lP: np.ndarray, lD: np.ndarray) -> np.ndarray:
    """log L-hat for rows of theta = (a, b, e, alpha, beta): shape (S, n)."""
    a, b, e, al, be = (theta[:, i : i + 1] for i in range(5))
    u1 = a - al * lP[None, :]
    u2 = b - be * lD[None, :]
    u3 = np.broadcast_to(e, u1.shape)
    return np.logaddexp(np.logaddexp(u1, u2), u3)


class HuberLSE:
    """Summed Huber objective (Eq. 28) and its analytic gradient, batched over rows. The exponent
    terms are centred internally (a' = a - alpha*mean(log P), likewise b): the minimisers stay,
    the Hessian is far better conditioned for BFGS."""

    def __init__(self, lP, lD, Y, W, delta, *, overestimate=1.0, e_max=None):
        self.cP, self.cD = float(lP.mean()), float(lD.mean())
        self.xP, self.xD = lP - self.cP, lD - self.cD
        self.Y, self.W, self.delta = Y, W, delta
        self.over = float(overestimate)  # factor on terms where the fit over-estimates the loss
        # L_inf <= exp(e_max): e = e_max - softplus(-u) with u free (a smooth one-sided bound)
        self.e_max = None if e_max is None else float(e_max)

    def to_internal(self, theta):
        z = theta.copy()
        z[:, 0] = theta[:, 0] - theta[:, 3] * self.cP
        z[:, 1] = theta[:, 1] - theta[:, 4] * self.cD
        if self.e_max is not None:  # starts above the bound are moved just below it
            gap = np.maximum(self.e_max - theta[:, 2], 1e-3)
            z[:, 2] = -np.log(np.expm1(gap))
        return z

    def to_external(self, z):
        theta = z.copy()
        theta[:, 0] = z[:, 0] + z[:, 3] * self.cP
        theta[:, 1] = z[:, 1] + z[:, 4] * self.cD
        if self.e_max is not None:
            theta[:, 2] = self.e_max - np.logaddexp(0.0, -z[:, 2])
        return theta

    def __call__(self, Z, rows):
        return chunked(self._eval, Z, rows)

    def _eval(self, Z, rows):
        # log L-hat = e + log(1 + exp(v1) + exp(v2)), v1 = a' - alpha xP - e, v2 = b' - beta xD - e;
        # overflow gives inf, which the line search rejects.
        d = self.delta
        e = Z[:, 2:3]
        if self.e_max is not None:
            u = e
            e = self.e_max - np.logaddexp(0.0, -u)
        with np.errstate(over="ignore", invalid="ignore"):
            ev1 = np.multiply.outer(-Z[:, 3], self.xP)
            ev1 += Z[:, 0:1] - e
            np.exp(ev1, out=ev1)
            ev2 = np.multiply.outer(-Z[:, 4], self.xD)
            ev2 += Z[:, 1:2] - e
            np.exp(ev2, out=ev2)
            t = ev1 + ev2
            r = np.log1p(t)
            r += e
            r -= self.Y if self.Y.ndim == 1 else self.Y[rows]
            over = r > 0 if self.over != 1.0 else None  # r = log L-hat - log L > 0: over-estimate
            c = np.clip(r, -d, d)  # Huber'(r)
            r -= 0.5 * c
            r *= c  # Huber(r) = c (r - c/2), c = clip(r, -delta, delta)
            t += 1.0
            c /= t  # Huber'(r) * (1 / s): softmax weights share the 1/s factor
            if over is not None:  # asymmetric penalty: over-estimates cost `over` times more
                k = np.where(over, self.over, 1.0)
                r *= k
                c *= k
            if self.W is not None:
                w = self.W if self.W.ndim == 1 else self.W[rows]
                r *= w
                c *= w
            ev1 *= c
            ev2 *= c
            g = np.empty((Z.shape[0], 5))
            g[:, 0] = ev1.sum(axis=1)
            g[:, 1] = ev2.sum(axis=1)
            g[:, 2] = c.sum(axis=1)
            g[:, 3] = -(ev1 @ self.xP)
            g[:, 4] = -(ev2 @ self.xD)
            if self.e_max is not None:  # chain rule through e = e_max - softplus(-u)
                g[:, 2] *= np.exp(-np.logaddexp(0.0, u[:, 0]))
            return r.sum(axis=1), g


class ChinchillaLaw:
    """The joint law (Eq. 27) as a law of the one engine (``lawfit``): theta = (a, b, e, alpha,
    beta), inputs X = (log P, log D). It brings its own fused objective (:class:`HuberLSE`, Eq. 28)
    and its log-scale fitted values, and the engine's multistart and bootstrap do the rest."""

    names = ("a", "b", "e", "alpha", "beta")
    fit_tol = dict(gtol=1e-11, ftol=1e-13, fscale=1e-300)  # polish: machine precision
    boot_tol = dict(gtol=1e-8, ftol=1e-10, fscale=1e-300)  # replicates: warm-started, moderate

    def __init__(self, *, overestimate: float = 1.0, e_max: float | None = None):
        self.overestimate, self.e_max = overestimate, e_max

    def model(self, theta, X):
        """L-hat (S, n) and its Jacobian (S, n, 5) for rows of theta."""
        lP, lD = X
        a, b, e, al, be = (theta[:, i : i + 1] for i in range(5))
        t1, t2 = np.exp(a - al * lP[None, :]), np.exp(b - be * lD[None, :])
        t3 = np.broadcast_to(np.exp(e), t1.shape)
        J = np.stack([t1, t2, t3, -lP[None, :] * t1, -lD[None, :] * t2], axis=-1)
        return t1 + t2 + t3, J

    def fitted(self, theta, X):
        """log L-hat at one theta (the objective's scale), by log-sum-exp."""
        return log_pred(np.asarray(theta, float)[None, :], *X)[0]

    def objective(self, X, T, W, loss, delta):
        if loss != "huber_log":
            raise ValueError(f"the joint law is fitted with the huber_log objective (Eq. 28), got {loss!r}")
        return HuberLSE(X[0], X[1], T, W, delta, overestimate=self.overestimate, e_max=self.e_max)
