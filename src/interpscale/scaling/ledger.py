"""A forecast ledger: write the prediction down before the big run, check it after.

The paper's Figure 24 workflow (``paper.STEERLING_8B_FORECAST["joint"]`` at
``paper.STEERLING_8B_COMPUTE`` FLOPs, observed ``paper.STEERLING_8B["loss"]``) made auditable:
``record`` stores the prediction with its calibrated and raw bootstrap intervals, the method, how
it was chosen, the calibration rule, a hash of the fit's inputs and the UTC date; ``check`` adds
the observation and scores both intervals. One JSON object per line, every write atomic.

    ledger = ForecastLedger("forecasts.jsonl")
    fc = ledger.record(**forecast_from_results(df, target_compute=paper.STEERLING_8B_COMPUTE))
    ledger.check(fc.id, observed=paper.STEERLING_8B["loss"]).summary()
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from interpscale._atomic import atomic_write_text
from interpscale._jsonl import iter_jsonl
from interpscale.errors import UserError

from ._base import DEFAULT_GRID, DEFAULT_LEVEL, check_level, fit_status, from_options, jsonable
from .bootstrap import N_BOOT
from .forecast import ForecastOptions, forecast_family, positive_compute
from .tables import SLICE_TOLERANCE, fit_rows, flops_per_token_per_param


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def inputs_hash(table: pd.DataFrame, options: Mapping[str, Any] | None = None,
                columns: Sequence[str] | None = None) -> str:
    """SHA-256 of the rows a fit used (``columns``, default all; row order does not matter)
    and its options: the same inputs give the same hash on any machine."""
    cols = sorted(columns or table.columns, key=str)
    if missing := [c for c in cols if c not in table.columns]:
        raise UserError(f"inputs_hash: table lacks column(s) {missing}")
    csv = table[cols].astype(str).sort_values(cols, kind="mergesort").to_csv(index=False, lineterminator="\n")
    h = hashlib.sha256(csv.encode())
    h.update(json.dumps(jsonable(dict(options or {})), sort_keys=True).encode())
    return h.hexdigest()


@dataclass(frozen=True)
class Forecast:
    """One registered forecast (and, once checked, its outcome)."""

    id: str
    created: str
    target_compute: float
    predicted: float
    lo: float
    hi: float
    level: float
    method: str
    inputs_hash: str
    quantity: str = "loss"
    family: str | None = None
    params: float | None = None
    tokens: float | None = None
    note: str = ""
    observed: float | None = None
    checked: str | None = None
    raw_lo: float | None = None  # the bootstrap interval before calibration (lo, hi are calibrated)
    raw_hi: float | None = None
    chosen_by: str = ""  # "backtest" (with the errors in ``backtest``) or "user"
    backtest: dict | None = None  # method -> rolling-origin error (%) at the largest tested ratio
    ratio: float | None = None  # extrapolation ratio of the target over the largest fitted compute
    calibration: str = ""  # the rule that widened (raw_lo, raw_hi) into (lo, hi) (docs/forecasting.md)

    @property
    def error(self) -> float | None:
        """observed - predicted (None until checked); the paper's Fig. 24: +0.11 (``paper.STEERLING_8B``)."""
        return None if self.observed is None else self.observed - self.predicted

    @property
    def rel_error(self) -> float | None:
        return None if self.observed is None else (self.observed - self.predicted) / abs(self.predicted)

    @property
    def covered(self) -> bool | None:
        """Whether the observation fell inside the prediction interval (None until checked)."""
        return None if self.observed is None else bool(self.lo <= self.observed <= self.hi)

    @property
    def covered_raw(self) -> bool | None:
        """Whether the raw bootstrap interval covered the observation (None when unknown)."""
        return None if None in (self.observed, self.raw_lo, self.raw_hi) else \
            bool(self.raw_lo <= self.observed <= self.raw_hi)

    def to_dict(self) -> dict:
        return jsonable(dataclasses.asdict(self))

    def summary(self) -> str:
        pct = f"{round(100 * self.level)}% PI" + (f", {self.calibration} calibration" if self.calibration else "")
        who = f"{self.family} " if self.family else ""
        raw = "" if self.raw_lo is None else f", bootstrap [{self.raw_lo:.4f}, {self.raw_hi:.4f}]"
        how = f" (chosen by {self.chosen_by})" if self.chosen_by else ""
        head = (f"forecast {self.id} ({self.created}): {who}{self.quantity} at C = {self.target_compute:.3g} by "
                f"{self.method}{how}: {self.predicted:.4f} [{self.lo:.4f}, {self.hi:.4f}] ({pct}{raw}); "
                f"inputs {self.inputs_hash[:12]}")
        if self.backtest:
            head += "\n  backtest error at the largest tested ratio: " + ", ".join(
                f"{m} {v:.2f}%" for m, v in self.backtest.items() if v is not None)
        if self.observed is None:
            return head + "; not checked yet"
        inside = "inside" if self.covered else "OUTSIDE"
        raw_in = "" if self.covered_raw is None else \
            f" (bootstrap interval: {'inside' if self.covered_raw else 'OUTSIDE'})"
        return (head + f"\n  observed {self.observed:.4f} ({self.checked}): error {self.error:+.4f} "
                       f"({100 * self.rel_error:+.2f}%), {inside} the interval{raw_in}")


_FIELDS = {f.name for f in dataclasses.fields(Forecast)}


class ForecastLedger:
    """Forecasts in a JSONL file (one object per line)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def load(self) -> list[Forecast]:
        """All forecasts; a UserError naming the file and line of any malformed entry."""
        if not self.path.exists():
            return []
        out = []
        for i, d in iter_jsonl(self.path):
            try:
                if extra := set(d) - _FIELDS:
                    raise UserError(f"unknown field(s) {sorted(extra)}")
                out.append(Forecast(**d))
            except (ValueError, TypeError) as exc:
                raise UserError(f"{self.path}: line {i}: not a forecast record ({exc})") from exc
        return out

    def _save(self, forecasts: Sequence[Forecast]) -> None:
        atomic_write_text(self.path, "".join(json.dumps(f.to_dict(), sort_keys=True, allow_nan=False) + "\n"
                                             for f in forecasts))

    def get(self, forecast_id: str) -> Forecast:
        """The forecast whose id starts with ``forecast_id`` (a unique prefix is enough)."""
        hits = [f for f in self.load() if f.id.startswith(forecast_id)]
        if len(hits) != 1:
            have = ", ".join(f.id for f in self.load()) or "none"
            what = "no forecast" if not hits else f"{len(hits)} forecasts"
            raise UserError(f"{self.path}: {what} with id {forecast_id!r}; ids: {have}")
        return hits[0]

    def record(self, *, target_compute: float, predicted: float, lo: float, hi: float, method: str,
               inputs_hash: str, level: float = DEFAULT_LEVEL, quantity: str = "loss", family: str | None = None,
               params: float | None = None, tokens: float | None = None, note: str = "",
               created: str | None = None, raw_lo: float | None = None, raw_hi: float | None = None,
               chosen_by: str = "", backtest: Mapping[str, float] | None = None,
               ratio: float | None = None, calibration: str = "") -> Forecast:
        """Append a forecast (atomically) and return it; its id is a hash of its content."""
        level = check_level(level)
        for name, v in (("target_compute", target_compute), ("predicted", predicted), ("lo", lo), ("hi", hi)):
            if not (isinstance(v, (int, float, np.floating)) and math.isfinite(v)):
                raise UserError(f"record: {name} must be a finite number, got {v!r}")
        if not target_compute > 0:
            raise UserError(f"record: target_compute must be positive, got {target_compute}")
        if not lo <= predicted <= hi:
            raise UserError(f"record: the interval [{lo}, {hi}] does not contain the prediction {predicted}")
        num = dict(target_compute=target_compute, predicted=predicted, lo=lo, hi=hi, params=params, tokens=tokens,
                   raw_lo=raw_lo, raw_hi=raw_hi, ratio=ratio)
        body = dict({k: None if v is None else float(v) for k, v in num.items()}, created=created or _now(),
                    level=level, method=str(method), inputs_hash=str(inputs_hash), quantity=str(quantity),
                    family=family, note=str(note), chosen_by=str(chosen_by), calibration=str(calibration),
                    backtest=None if backtest is None else jsonable(dict(backtest)))
        fid = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]
        existing = self.load()
        if any(f.id == fid for f in existing):
            raise UserError(f"{self.path}: forecast {fid} is already recorded")
        fc = Forecast(id=fid, **body)
        self._save(existing + [fc])
        return fc

    def check(self, forecast_id: str, observed: float, *, checked: str | None = None) -> Forecast:
        """Store the observed value (and date) with its forecast, atomically; return it scored."""
        if not (isinstance(observed, (int, float, np.floating)) and math.isfinite(observed)):
            raise UserError(f"check: observed must be a finite number, got {observed!r}")
        target = self.get(forecast_id)
        done = dataclasses.replace(target, observed=float(observed), checked=checked or _now())
        self._save([done if f.id == target.id else f for f in self.load()])
        return done


def forecast_from_results(results: pd.DataFrame, *, target_compute: float | None = None, family: str | None = None,
                          method: str | None = None, loss: str = "loss", params: float | None = None,
                          tokens: float | None = None, estimator: str | None = None, annealed: bool | None = None,
                          n_boot: int = N_BOOT["forecast"], level: float = DEFAULT_LEVEL, seed: int = 0,
                          grid: str = DEFAULT_GRID, window: int | None = 5, tolerance: float | None = SLICE_TOLERANCE,
                          force: bool = False, calibration: str = ForecastOptions.calibration,
                          options: ForecastOptions | None = None) -> dict:
    """Forecast ``loss`` of one family at ``target_compute`` (``forecast_family``) and return the
    keyword arguments of ``ForecastLedger.record`` (inputs_hash covers the rows used and these
    options). A run given by ``params`` and ``tokens`` needs no ``target_compute``: it is
    C = k·P·D (:func:`run_target_compute`), and a contradicting one is refused. A fit flagged by
    :func:`fit_flags` is refused with a ValueError saying why, unless ``force``; then the flags go
    into ``note``. ``options`` (a ``FitOptions``) gives ``loss, n_boot, level, seed, grid, window,
    tolerance, calibration`` at once (the loose keywords are kept for one release)."""
    loss, n_boot, level, seed, grid, window, tolerance, calibration = from_options(options, dict(
        loss=loss, n_boot=n_boot, level=level, seed=seed, grid=grid, window=window, tolerance=tolerance,
        calibration=calibration), forecast_from_results).values()
    if target_compute is None and (params is None or tokens is None):
        raise UserError("give the target compute, or the run's params and tokens (its compute is then k·P·D)")
    if target_compute is not None:
        positive_compute(target_compute)
    warnings: list[str] = []
    if missing := [c for c in ("params", "tokens", loss) if c not in results.columns]:
        raise UserError(f"results table lacks column {missing[0]!r}; have {list(results.columns)}")
    df = fit_rows(results, family=family, estimator=estimator, annealed=annealed, loss=loss, caller="forecast",
                  warnings=warnings, one_family=True)
    o = ForecastOptions(loss=loss, n_boot=n_boot, level=check_level(level), seed=seed, grid=grid, window=window,
                        tolerance=tolerance, k=flops_per_token_per_param(df, "flops"), calibration=calibration)
    target_compute = run_target_compute(df, target_compute, params, tokens, o.k)
    fc = forecast_family(df, target_compute, method=method, options=o, params=params, tokens=tokens)
    b, flags = fc.best, fit_flags(fc.best.fit)
    if flags and not force:
        raise UserError(f"the {fc.chosen} fit of {family or 'the family'} is flagged: {'; '.join(flags)}; its "
                        "forecast and interval are not to be trusted (--force records it anyway, the flag stored in "
                        "its note)")
    if not b.raw_hi > b.raw_lo:  # e.g. a power law through exactly two slice minima: nothing left to resample
        raise UserError(f"the {fc.chosen} fit gives no prediction interval at C = {target_compute:.3g} "
                        f"([{b.raw_lo:.4g}, {b.raw_hi:.4g}] from {len(df)} rows); a forecast needs an interval: "
                        "add budgets (3 or more IsoFLOP slices) or use another method")
    options = dict(method=method or "auto", loss=loss, target_compute=target_compute, params=params, tokens=tokens,
                   n_boot=n_boot, level=level, seed=seed, grid=grid, window=window, tolerance=tolerance,
                   flops_per_token_per_param=o.k)
    cols = [c for c in ("family", "slice_flops", "flops", "params", "tokens", loss) if c in df.columns]
    return dict(target_compute=float(target_compute), predicted=b.predicted, lo=b.lo, hi=b.hi, raw_lo=b.raw_lo,
                raw_hi=b.raw_hi, level=o.level, method=fc.chosen, chosen_by=fc.chosen_by, ratio=fc.ratio,
                backtest={k: v.backtest_error for k, v in fc.methods.items()}, quantity=loss, family=family,
                params=params, tokens=tokens, inputs_hash=inputs_hash(df, options, columns=cols),
                calibration=calibration, **({"note": "FLAGGED: " + "; ".join(flags)} if flags else {}))


def fit_flags(fit: Any) -> list[str]:
    """Why a forecast from ``fit`` is not to be trusted: its status (``scaling.FitStatus``,
    decided where the fit was made) when not identified."""
    st = fit_status(fit)
    return [] if st.identified else [st.reason if st.state == "flagged" else f"failed: {st.reason}"]


K_SLACK = 0.01  # a given compute may differ by 1% from k·P·D at the table's extreme k


def run_target_compute(rows: pd.DataFrame, target_compute: float | None, params: float | None,
                       tokens: float | None, k: float) -> float:
    """The compute of the forecast run. For a run given by ``params`` and ``tokens`` it is C = k·P·D,
    with k the table's FLOPs per token per parameter (``tables.flops_per_token_per_param``: the
    median of C / (P·D) over its runs, i.e. the planner's flops_per_token / params; 6 without a
    ``flops`` column); a ``target_compute`` outside k·P·D at the runs' smallest and largest k
    (1% either side) contradicts the run and is refused. Without params/tokens: ``target_compute``."""
    if (params is None) != (tokens is None):
        raise UserError("give both the run's params and tokens, or neither (compute-optimal allocation)")
    if params is None:
        return float(target_compute)
    for name, v in (("params", params), ("tokens", tokens)):
        if not (math.isfinite(float(v)) and float(v) > 0):
            raise UserError(f"the run's {name} must be a positive number, got {v}")
    pd_ = float(params) * float(tokens)
    derived = k * pd_
    if target_compute is None:
        return derived
    ks = (rows.get("flops", np.nan) / (rows["params"] * rows["tokens"])).to_numpy(float)  # nan without flops
    ks = ks[np.isfinite(ks) & (ks > 0)]
    lo, hi = (float(ks.min()), float(ks.max())) if ks.size else (k, k)
    given_k = float(target_compute) / pd_
    if not lo * (1 - K_SLACK) <= given_k <= hi * (1 + K_SLACK):
        span = f"{lo:.4g}" if hi <= lo * (1 + 1e-9) else f"{lo:.4g} to {hi:.4g}"
        raise UserError(f"the target compute {float(target_compute):.4g} contradicts the run's params "
                        f"{float(params):.4g} x tokens {float(tokens):.4g}: the table prices a run at C = k·P·D "
                        f"with k = {span} FLOPs per token per parameter, i.e. {derived:.4g}"
                        f"{'' if span == f'{k:.4g}' else f' (median k = {k:.4g})'}; "
                        f"{float(target_compute):.4g} implies k = {given_k:.4g}. Leave the compute out (it is "
                        "derived) or fix it")
    return float(target_compute)
