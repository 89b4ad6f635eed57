import numpy as np
from scipy.optimize import minimize, rosen, rosen_der

from interpscale.scaling.engine import batched_bfgs


def _rosen_rows(X, rows):
    return np.array([rosen(x) for x in X]), np.array([rosen_der(x) for x in X])


def test_batched_bfgs_matches_scipy_on_rosenbrock():
    rng = np.random.default_rng(0)
    x0 = rng.uniform(-2, 2, (12, 2))  # 2-D: a single minimum at (1, 1)
    res = batched_bfgs(_rosen_rows, x0, gtol=1e-9, max_iter=3000)
    assert res.converged.all()
    for i in range(12):
        ref = minimize(rosen, x0[i], jac=rosen_der, method="BFGS", options={"gtol": 1e-9})
        assert res.f[i] <= ref.fun + 1e-12
        np.testing.assert_allclose(res.x[i], [1.0, 1.0], atol=1e-6)


def test_rows_are_independent_and_failures_are_reported():
    # a quadratic per row with different minima; one row starts at a non-finite point
    target = np.arange(10.0).reshape(5, 2)

    def fun(X, rows):
        d = X - target[rows]
        f = (d**2).sum(axis=1)
        f[~np.isfinite(X).all(axis=1)] = np.nan
        return f, 2 * d

    x0 = np.zeros((5, 2))
    x0[3] = np.nan
    res = batched_bfgs(fun, x0)
    ok = np.arange(5) != 3
    np.testing.assert_allclose(res.x[ok], target[ok], atol=1e-8)
    assert res.converged[ok].all() and res.status[3] == 4
    capped = batched_bfgs(_rosen_rows, np.full((2, 2), -1.5), max_iter=2)
    assert (capped.status == 2).all() and not capped.converged.any()
