"""Bad input: errors that name the offending rows, or documented handling."""

import numpy as np
import pandas as pd
import pytest

from interpscale.analysis.human_study import (
    analyse_study, fit_ordinal, simulate_study, validate_phase1, validate_ratings,
)


@pytest.fixture()
def ratings():
    return simulate_study(seed=1, n_rated_concepts=6, n_full_concepts=6, n_records=48).ratings.copy()


def test_clean_table_passes_and_is_typed(ratings):
    out = validate_ratings(ratings)
    assert len(out) == len(ratings) and out["rating"].between(1, 5).all()
    assert out["rater"].map(type).eq(str).all()


def test_rating_out_of_range_names_row(ratings):
    ratings.loc[7, "rating"] = 6
    with pytest.raises(ValueError, match=r"'rating'.*row\(s\) 7 \(6"):
        validate_ratings(ratings)


def test_fractional_rating_rejected(ratings):
    ratings["rating"] = ratings["rating"].astype(float)
    ratings.loc[3, "rating"] = 2.5
    with pytest.raises(ValueError, match=r"row\(s\) 3 \(2.5\)"):
        validate_ratings(ratings)


def test_nan_is_an_error_not_a_drop(ratings):
    ratings["rating"] = ratings["rating"].astype(float)
    ratings.loc[[2, 11], "rating"] = np.nan
    with pytest.raises(ValueError, match=r"'rating' has 2 missing value\(s\) at row\(s\) 2, 11"):
        validate_ratings(ratings)
    ratings = ratings.dropna().astype({"rating": int})
    ratings.loc[ratings.index[0], "concept"] = None
    with pytest.raises(ValueError, match="'concept' has 1 missing"):
        validate_ratings(ratings)


def test_missing_reference_level(ratings):
    with pytest.raises(ValueError, match=r"reference level 'human' not found.*levels"):
        validate_ratings(ratings[ratings["candidate_type"] != "human"])
    with pytest.raises(ValueError, match="reference level 'people' not found"):
        fit_ordinal(ratings, reference={"candidate_type": "people"})


def test_rater_with_a_single_rating(ratings):
    lone = pd.DataFrame([{**ratings.iloc[0].to_dict(), "rater": "solo"}], index=[999])
    bad = pd.concat([ratings, lone])
    with pytest.raises(ValueError, match=r"rater\(s\) \['solo'\].*row\(s\) 999.*--min-rater-ratings 1"):
        validate_ratings(bad)
    assert len(validate_ratings(bad, min_rater_ratings=1)) == len(bad)  # documented opt-in


def test_missing_column_named(ratings):
    with pytest.raises(ValueError, match=r"missing column\(s\) \['context'\]"):
        validate_ratings(ratings.drop(columns="context"))


def test_phase1_validation():
    p1 = simulate_study(seed=0).phase1.copy()
    assert len(validate_phase1(p1)) == 303
    p1.loc[5, "coherence"] = 0
    with pytest.raises(ValueError, match=r"'coherence'.*row\(s\) 5 \(0"):
        validate_phase1(p1)
    p1.loc[5, "coherence"] = 3
    dup = pd.concat([p1, p1.iloc[[0]]], ignore_index=True)
    with pytest.raises(ValueError, match="rated the same concept twice"):
        validate_phase1(dup)


def test_analyse_study_rejects_unknown_contrast(ratings):
    with pytest.raises(ValueError, match="contrast type 'gpt'"):
        analyse_study(ratings, contrast="gpt", bayes=False, n_boot=10)
