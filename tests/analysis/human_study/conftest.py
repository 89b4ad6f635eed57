"""Shared fixtures: the R `ordinal` wine data (in the repository) and a small simulated study."""

from pathlib import Path

import pandas as pd
import pytest

WINE = Path(__file__).resolve().parents[2] / "data" / "wine" / "wine.csv"  # tests/data/wine/README.md


@pytest.fixture(scope="session")
def wine() -> pd.DataFrame:
    return pd.read_csv(WINE)


@pytest.fixture(scope="session")
def small_study():
    from interpscale.analysis.human_study import simulate_study

    # 10 concepts, all rated by the 8 raters: 80 contexts, 400 ratings
    return simulate_study(seed=0, n_rated_concepts=10, n_full_concepts=10, n_records=80)
