"""Shared fixtures: the R `ordinal` wine data and a small simulated study."""


import pandas as pd
import pytest

@pytest.fixture(scope="session")
def wine(shared_data) -> pd.DataFrame:
    return pd.read_csv(shared_data("wine.csv"))


@pytest.fixture(scope="session")
def small_study():
    from interpscale.analysis.human_study import simulate_study

    # 10 concepts, all rated by the 8 raters: 80 contexts, 400 ratings
    return simulate_study(seed=0, n_rated_concepts=10, n_full_concepts=10, n_records=80)
