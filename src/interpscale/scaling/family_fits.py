"""Fit every family of a results table (check -> each family's loss, metric and forecast fits ->
``FamilyFits``, whose Table 6 / Table 7 layouts are in ``family_results``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal, Mapping

import pandas as pd
from tqdm.auto import tqdm

from ._base import DEFAULT_LEVEL, DEFAULT_N_BOOT, about, emit
from .bounded import METRICS, fit_bounded
from .chinchilla import fit_chinchilla
from .extrapolate import extrapolate
from .family_results import FamilyFit, FamilyFits
from .forecasting import FitOptions, forecast_family
from .isoflop import fit_isoflop
from .tables import SLICE_TOLERANCE, fit_rows, flops_per_token_per_param, row_groups, slice_rows


@dataclass(frozen=True)
class _Options(FitOptions):
    """What ``fit_families`` passes to every family's fits: the one ``FitOptions`` (one bootstrap
    spec for all) plus the joint-fit options and the forecast target."""

    joint_options: Mapping = field(default_factory=dict)
    target_compute: float | None = None
    method: str | None = None

    def boot(self, groups) -> dict:
        """Bootstrap keywords of one fit: a cluster bootstrap over ``groups`` when given."""
        kw = dict(n_boot=self.n_boot, level=self.level, seed=self.seed)
        return kw if groups is None else dict(kw, bootstrap="cluster", groups=groups)


def _check(results, families, groups, loss, annealed, estimator, warnings,
           predicted: bool = False) -> tuple[pd.DataFrame, list]:
    """The rows to fit (``tables.fit_rows``) and the families to fit."""
    if not isinstance(results, pd.DataFrame):
        raise ValueError("fit_families: results must be a pandas DataFrame")
    need = ["family", "slice_flops", "params", "tokens", loss]
    missing = [c for c in need if c not in results.columns]
    if missing:
        raise ValueError(f"fit_families: results table lacks column(s) {missing}; have {list(results.columns)}")
    df = fit_rows(results, family=families, estimator=estimator, annealed=annealed, groups=groups,
                  caller="fit_families", warnings=warnings, predicted=predicted)
    fams = families or sorted(df["family"].dropna().unique().tolist(), key=str)
    return df, fams


def _fits(fam: str, lossy: pd.DataFrame, sub: pd.DataFrame, o: _Options, fw: list[str]):
    """(IsoFlopFit, ChinchillaFit, metric -> BoundedFit of Eq. 29 against ``flops``, skipped) of one
    family: a fit that fails is None (left out of the metrics) and its reason is in ``skipped``."""
    skipped: dict = {}

    def attempt(key: str, what: str, fit):
        try:
            return fit()
        except ValueError as exc:
            emit(fw, f"{fam}: {what} skipped: {exc}")
            skipped[key] = str(exc)
            return None

    iso_rows = slice_rows(lossy.dropna(subset=["slice_flops"]), o.tolerance)
    iso = attempt("isoflop", "IsoFLOP fit", lambda: fit_isoflop(
        iso_rows, loss=o.loss, window=o.window, minimum=o.minimum, **o.boot(row_groups(iso_rows))))
    ch = attempt("joint", "joint fit", lambda: fit_chinchilla(lossy["params"], lossy["tokens"], lossy[o.loss],
                                                              grid=o.grid, **o.boot(row_groups(lossy)),
                                                              **o.joint_options))
    bounded, ccol = {}, "flops" if "flops" in sub.columns else "slice_flops"
    for metric in METRICS:
        if metric in sub.columns and sub[metric].notna().sum() > 0:
            ms = sub.dropna(subset=[metric, ccol])
            bounded[metric] = attempt(metric, f"{metric} fit", lambda: fit_bounded(
                ms[ccol], ms[metric], name=metric, n_boot=o.n_boot, level=o.level, seed=o.seed))
    return iso, ch, {m: b for m, b in bounded.items() if b is not None}, skipped


def _fit_family(fam: str, df: pd.DataFrame, estimator, o: _Options, actual: Mapping, warnings: list[str]):
    """Every fit of one family: IsoFLOP, joint, metrics, the extrapolation to the target."""
    fw: list[str] = []
    sub = df[df["family"] == fam]  # the estimator is chosen per family by ``fit_rows``
    est = str(sub["estimator"].iloc[0]) if "estimator" in sub.columns and len(sub) else estimator
    lossy = sub.dropna(subset=["params", "tokens", o.loss])
    if len(lossy) < len(sub):
        emit(fw, f"{fam}: {len(sub) - len(lossy)} row(s) with missing params/tokens/{o.loss} left out of the loss fits")
    with about(fam):  # the fits' own warnings name the family
        iso, ch, bounded, skipped = _fits(fam, lossy, sub, o, fw)
    obs = dict(actual.get(fam, {}))
    ext = fc = None
    k = flops_per_token_per_param(lossy, "flops")
    if o.target_compute is not None and iso is not None and ch is not None:
        ext = extrapolate(ch, iso, o.target_compute, observed=obs.get("loss"), level=o.level)
    if o.target_compute is not None and (iso is not None or ch is not None):
        fc = _forecast(fam, lossy, o, k, {"joint": ch, "isoflop-powerlaw": iso}, fw)
    warnings += fw
    return FamilyFit(family=fam, estimator=est, n_rows=len(sub), isoflop=iso, chinchilla=ch, bounded=bounded,
                     extrapolation=ext, actual={k: float(v) for k, v in obs.items()}, warnings=tuple(fw),
                     skipped=skipped, flops_per_token_per_param=k, forecast=fc)


def _forecast(fam: str, lossy: pd.DataFrame, o: _Options, k: float, fits: dict, fw: list[str]):
    """The family's forecast at the target (``forecasting.forecast_family``), reusing its fits."""
    opts = FitOptions(**{f.name: getattr(o, f.name) for f in fields(FitOptions)} | {"k": k})
    try:
        return forecast_family(lossy, o.target_compute, method=o.method, options=opts,
                               fits={m: f for m, f in fits.items() if f is not None})
    except ValueError as exc:
        emit(fw, f"{fam}: forecast skipped: {exc}")
        return None


def fit_families(
    results: pd.DataFrame,
    *,
    estimator: str | None = None,
    annealed: bool | None = None,
    families: list[str] | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    window: int | None = 5,
    tolerance: float | None = SLICE_TOLERANCE,
    grid: Literal["epoch", "coarse"] = "epoch",
    target_compute: float | None = None,
    actual: Mapping[str, Mapping[str, float]] | None = None,
    loss: str = "loss",
    groups=None,
    joint_options: Mapping | None = None,
    minimum: Literal["parabola", "akima"] = "parabola",
    method: str | None = None,
    predicted: bool = False,
) -> FamilyFits:
    """Fit every family of a results table (the columns of docs/architecture.md; one row per checkpoint).

    Loss fits use ``slice_flops, params, tokens`` and the ``loss`` column (e.g. bits per byte, one
    scale across tokenizers): IsoFLOP parabolas on rows whose achieved ``flops`` lies within
    ``tolerance`` of their slice target (App. G: +/-15%), the joint fit on all rows. Each metric
    column present (``METRICS``) gets a bounded fit against ``flops``. With ``target_compute``,
    losses and metrics are extrapolated there, compared to ``actual[family][metric or "loss"]``,
    and each family gets a ``forecast`` (``forecasting.forecast_family``: methods by name, the
    default chosen by backtest unless ``method`` names one; ``method`` alone is a ValueError).
    A mixed ``annealed``/``estimator`` column with no choice falls back to annealed rows / the
    paper's estimator, with a warning. Failed fits are listed in ``FamilyFits.dropped``.
    ``groups`` (one label per row, e.g. its run id) resamples whole runs in the IsoFLOP and joint
    bootstraps; ``joint_options`` go to ``fit_chinchilla``; ``minimum`` to ``fit_isoflop``.
    Rows whose ``predicted`` column is true (annealed losses predicted, not measured:
    ``scaling.anneal_rows``, docs/anneal.md) are fitted only with ``predicted=True``.
    """
    if method is not None and target_compute is None:
        raise ValueError(f"fit_families: method={method!r} chooses the forecast method at target_compute; "
                         "give target_compute (CLI: --method needs --target-compute)")
    warnings: list[str] = []
    df, fams = _check(results, families, groups, loss, annealed, estimator, warnings, predicted)
    o = _Options(n_boot=n_boot, seed=seed, level=level, window=window, tolerance=tolerance, grid=grid, loss=loss,
                 minimum=minimum, joint_options=dict(joint_options or {}), target_compute=target_compute,
                 method=method)
    out = {fam: _fit_family(fam, df, estimator, o, actual or {}, warnings)
           for fam in tqdm(fams, desc="fit families", unit="family", disable=None, leave=False)}
    if all(f.isoflop is None and f.chinchilla is None and not f.bounded for f in out.values()):
        raise ValueError("fit_families: no family could be fitted: " + "; ".join(warnings))
    return FamilyFits(families=out, estimator=estimator, annealed=annealed, level=level,
                      target_compute=target_compute, warnings=tuple(warnings))
