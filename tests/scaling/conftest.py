"""Synthetic scaling data from known laws (shared by the scaling tests)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

# reference data inside the repository (provenance and licence: tests/data/epoch/README.md)
EPOCH_CSV = Path(__file__).resolve().parents[1] / "data" / "epoch" / "epoch_chinchilla_svg_extracted_data.csv"
SLICES = (6e18, 1e19, 3e19, 1e20)  # paper Table 24 (AR / CDLM)


PAIR_LAWS = {"a": dict(E=1.8, A=400.0, B=2000.0, alpha=0.34, beta=0.37),
             "b": dict(E=1.85, A=420.0, B=2100.0, alpha=0.33, beta=0.36)}


def eq27_pair(seed=0, slices=(1e18, 1e19, 1e20), sizes=5, noise=0.003) -> pd.DataFrame:
    """A results table of two families ``a``, ``b`` of Eq. 27 (``PAIR_LAWS``) on IsoFLOP slices
    priced C = 6·P·D, ``sizes`` sizes from 1/6 to 6 times each family's optimum, one row per run."""
    rng = np.random.default_rng(seed)
    rows = []
    for fam, L in PAIR_LAWS.items():
        G = (L["alpha"] * L["A"] / (L["beta"] * L["B"])) ** (1 / (L["alpha"] + L["beta"]))
        for C in slices:
            for j, f in enumerate(np.geomspace(1 / 6, 6, sizes)):
                P = G * (C / 6) ** (L["beta"] / (L["alpha"] + L["beta"])) * f
                D = C / (6 * P)
                loss = (L["E"] + L["A"] / P ** L["alpha"] + L["B"] / D ** L["beta"]) * np.exp(rng.normal(0, noise))
                rows.append(dict(run_id=f"{fam}-{C:.0e}-{j}", family=fam, slice_flops=C, flops=C, params=P,
                                 tokens=D, step=1000, annealed=True, loss=loss))
    return pd.DataFrame(rows)


def isoflop_grid(alpha_P, alpha_L, *, seed=0, noise=0.004, curvature=0.06, sizes=7, span=8.0, slices=SLICES):
    """Rows whose slice losses follow Eq. 25 exactly around P*(C) = a_P C^alpha_P,
    L*(C) = a_L C^alpha_L (a_P, a_L chosen so P* ~ 1e8 and L* ~ 3 at C = 1e19), plus noise."""
    rng = np.random.default_rng(seed)
    a_P = 1e8 / 1e19**alpha_P
    a_L = 3.0 / 1e19**alpha_L
    rows = []
    for C in slices:
        Ps = a_P * C**alpha_P
        Ls = a_L * C**alpha_L
        # sizes spread asymmetrically around the optimum so the observed minimum moves
        for f in np.geomspace(1 / span, span, sizes) * np.exp(rng.uniform(-0.2, 0.2)):
            P = Ps * f
            L = curvature * np.log(f) ** 2 + Ls + rng.normal(0, noise)
            rows.append(dict(slice_flops=C, flops=C, params=P, tokens=C / (6 * P), loss=L))
    return pd.DataFrame(rows), dict(a_P=a_P, a_L=a_L, alpha_P=alpha_P, alpha_L=alpha_L)


def chinchilla_grid(*, E=1.8, A=400.0, B=2000.0, alpha=0.34, beta=0.37, seed=0, noise=0.01,
                    slices=(1e18, 6e18, 3e19, 1e20, 6e20), sizes=8):
    """IsoFLOP-style (P, D) grid with losses from Eq. 27 times log-normal noise."""
    rng = np.random.default_rng(seed)
    G = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
    rows = []
    for C in slices:
        Popt = G * (C / 6) ** (beta / (alpha + beta))
        for f in np.geomspace(1 / 10, 10, sizes):
            P = Popt * f
            D = C / (6 * P)
            L = (E + A / P**alpha + B / D**beta) * np.exp(rng.normal(0, noise))
            rows.append(dict(slice_flops=C, flops=C, params=P, tokens=D, loss=L))
    return pd.DataFrame(rows), dict(L_inf=E, A_P=A, A_D=B, alpha=alpha, beta=beta)


def epoch_data(path):
    """Epoch's recipe: N = Model Size, D = FLOP / (6N), drop the 5 highest-loss rows."""
    d = pd.read_csv(path)
    thr = np.sort(d["loss"].to_numpy())[-5]
    d = d[d["loss"] < thr]
    N = d["Model Size"].to_numpy()
    return N, d["Training FLOP"].to_numpy() / (6 * N), d["loss"].to_numpy()


@pytest.fixture(scope="session")
def epoch_csv():
    assert EPOCH_CSV.is_file(), f"reference data missing from the repository: {EPOCH_CSV}"
    return EPOCH_CSV


@pytest.fixture(scope="session")
def epoch_arrays(epoch_csv):
    return epoch_data(epoch_csv)


@pytest.fixture(scope="session")
def epoch_fit(epoch_arrays):
    from interpscale.scaling import fit_chinchilla

    return fit_chinchilla(*epoch_arrays, n_boot=0)


class _Synth:
    isoflop_grid = staticmethod(isoflop_grid)
    chinchilla_grid = staticmethod(chinchilla_grid)
    SLICES = SLICES


@pytest.fixture(scope="session")
def synth():
    """Namespace of the generators above (conftest is not importable under importlib mode)."""
    return _Synth
