"""One status, every reader (issue 34): on a results table whose joint fit (Eq. 27) collapses
(no irreducible loss in the data, three IsoFLOP slices), the fit's own ``status`` is flagged where
the fit is made, and tables.md, the report, Figure 24, ``forecast record`` and ``forecast_runs``
all say so: flagged, not drawn as fitted, refused without ``force``, no ``0.000 [-0.000, +0.000]``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from interpscale.scaling import FitStatus, fit_families, fit_status, forecast_from_results
from interpscale.scaling.forecast import ForecastOptions, forecast_runs

TARGET = 1e21


def _table(seed: int = 0) -> pd.DataFrame:
    """``ar`` with an irreducible loss of 1.7 (identified) and ``flat`` with none (L∞ collapses)."""
    rng = np.random.default_rng(seed)
    rows = []
    for fam, E in (("ar", 1.7), ("flat", 0.0)):
        for C in (1e17, 1e18, 1e19):
            for P in np.sqrt(C / 6) * np.geomspace(0.1, 10, 7):
                D = C / (6 * P)
                loss = (E + 400 / P**0.34 + 410 / D**0.28) * (1 + 0.002 * rng.standard_normal())
                rows.append({"family": fam, "slice_flops": C, "flops": C, "params": P, "tokens": D, "loss": loss,
                             "annealed": True})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def fitted():
    df = _table()
    return df, fit_families(df, n_boot=20, seed=0, grid="coarse", target_compute=TARGET)


def test_status_is_decided_where_the_joint_fit_is_made(fitted):
    _, fits = fitted
    ok, flat = fits["ar"].chinchilla.status, fits["flat"].chinchilla.status
    assert ok == FitStatus() and ok.identified and fits["ar"].chinchilla.identified
    assert flat.state == "flagged" and "L∞" in flat.reason and not fits["flat"].chinchilla.identified
    assert fits["flat"].chinchilla.to_dict()["status"] == {"state": "flagged", "reason": flat.reason}
    assert fit_status(None).state == "failed"
    with pytest.raises(ValueError, match="state"):
        FitStatus("maybe")


def test_tables_md_marks_the_flagged_fit_and_prints_no_zero_interval(fitted):
    _, fits = fitted
    md = fits.to_markdown()
    row = next(line for line in md.splitlines() if line.startswith("| flat |"))
    assert "not identified ‡" in row
    assert "‡ flat joint fit (Eq. 27) flagged: not identified: L∞" in md
    assert "_[-0.000,+0.000]" not in md and "[-0.000, +0.000]" not in md and "0.000_[" not in md
    assert "not identified" not in next(line for line in md.splitlines() if line.startswith("| ar |"))


def test_report_and_fit_status_words_agree(fitted, tmp_path):
    from interpscale.analysis.fit_status import joint_fit_state
    from interpscale.analysis.report import write_report

    df, fits = fitted
    assert joint_fit_state(fits["flat"].chinchilla) == ("not identified", fits["flat"].chinchilla.status.reason)
    assert joint_fit_state(fits["ar"].chinchilla)[0] == "identified"
    md = write_report(df, tmp_path, fits=fits, figures=False, n_boot=20, source="t.csv").read_text()
    assert "**flat** joint fit (Eq. 27): not identified" in md
    assert "[-0.000, +0.000]" not in md


def test_figure_24_does_not_draw_the_flagged_curve_and_states_the_ratio(fitted):
    import matplotlib

    matplotlib.use("Agg")
    from interpscale.analysis.figures.extrapolation import extrapolation_figure

    df, fits = fitted
    fig = extrapolation_figure(df, family="flat", fits=fits, target={"flops": TARGET}, n_boot=20)
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert not any(lab.startswith("joint →") for lab in labels)  # no fitted-looking joint curve
    assert any(lab.startswith("joint: not drawn (flagged") for lab in labels)
    assert "100× the largest slice" in ax.get_title()
    assert not any(lab.startswith("L∞") for lab in labels)
    ok = extrapolation_figure(df, family="ar", fits=fits, target={"flops": TARGET}, n_boot=20)
    assert any(lab.startswith("joint →") for lab in (line.get_label() for line in ok.axes[0].get_lines()))


def test_forecast_record_refuses_and_forecast_runs_flags(fitted):
    df, _ = fitted
    with pytest.raises(ValueError, match="flagged: not identified: L∞"):
        forecast_from_results(df, family="flat", method="joint", target_compute=TARGET, n_boot=20)
    rec = forecast_from_results(df, family="flat", method="joint", target_compute=TARGET, n_boot=20, force=True)
    assert rec["note"].startswith("FLAGGED: not identified: L∞")
    ok = forecast_from_results(df, family="ar", method="joint", target_compute=TARGET, n_boot=20)
    assert "note" not in ok
    rows = df[df.family == "flat"]
    runs = forecast_runs(rows, pd.DataFrame({"params": [1e9], "tokens": [2e10]}), method="joint",
                         options=ForecastOptions(n_boot=20, k=6.0))
    assert runs["fit_status"].tolist() == ["flagged"] and "L∞" in runs["fit_reason"].iloc[0]
