"""A forecast registry: write the prediction down before the big run, check it after.

The paper's Figure 24 workflow (joint law forecast 2.61 for Steerling-8B at 7.6e22 FLOPs,
observed 2.72) made auditable: ``record`` stores the target compute, the predicted value
with its prediction interval, the method, a hash of the fit's inputs (the rows and options
it saw) and the UTC date; ``check`` adds the observed value and its date and scores it.
One JSON object per line (JSONL); every write replaces the file atomically, so a crash
never leaves a half-written registry.

    reg = ForecastRegistry("forecasts.jsonl")
    fc = reg.record(target_compute=7.6e22, predicted=2.61, lo=2.55, hi=2.68, level=0.9,
                    method="joint", inputs_hash=inputs_hash(df, options), family="cdlm+concept")
    reg.check(fc.id, observed=2.72).summary()
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ._base import DEFAULT_LEVEL, check_level, jsonable
from .chinchilla import fit_chinchilla
from .families import ESTIMATOR_PREFERENCE, _flops_per_param_token, _select
from .isoflop import fit_isoflop


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _write_atomic(path: Path, text: str) -> None:
    """Temp file in the same directory, then os.replace (the scaling package imports nothing
    else from interpscale, so it carries this two-line form of ``interpscale._atomic``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def inputs_hash(table: pd.DataFrame, options: Mapping[str, Any] | None = None,
                columns: Sequence[str] | None = None) -> str:
    """SHA-256 of the rows a fit used (``columns``, default all; row order does not matter)
    and its options: the same inputs give the same hash on any machine."""
    cols = sorted(columns or table.columns, key=str)
    missing = [c for c in cols if c not in table.columns]
    if missing:
        raise ValueError(f"inputs_hash: table lacks column(s) {missing}")
    t = table[cols].copy()
    csv = t.astype(str).sort_values(cols, kind="mergesort").to_csv(index=False, lineterminator="\n")
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

    @property
    def error(self) -> float | None:
        """observed - predicted (None until checked); the paper's Fig. 24: 2.72 - 2.61 = +0.11."""
        return None if self.observed is None else self.observed - self.predicted

    @property
    def rel_error(self) -> float | None:
        return None if self.observed is None else (self.observed - self.predicted) / abs(self.predicted)

    @property
    def covered(self) -> bool | None:
        """Whether the observation fell inside the prediction interval (None until checked)."""
        return None if self.observed is None else bool(self.lo <= self.observed <= self.hi)

    def to_dict(self) -> dict:
        return jsonable(dataclasses.asdict(self))

    def summary(self) -> str:
        pct = round(100 * self.level)
        who = f"{self.family} " if self.family else ""
        head = (f"forecast {self.id} ({self.created}): {who}{self.quantity} at C = {self.target_compute:.3g} by "
                f"{self.method}: {self.predicted:.4f} [{self.lo:.4f}, {self.hi:.4f}] ({pct}% PI); "
                f"inputs {self.inputs_hash[:12]}")
        if self.observed is None:
            return head + "; not checked yet"
        inside = "inside" if self.covered else "OUTSIDE"
        return (head + f"\n  observed {self.observed:.4f} ({self.checked}): error {self.error:+.4f} "
                       f"({100 * self.rel_error:+.2f}%), {inside} the interval")


_FIELDS = {f.name for f in dataclasses.fields(Forecast)}


class ForecastRegistry:
    """Forecasts in a JSONL file (one object per line)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def load(self) -> list[Forecast]:
        """All forecasts; ValueError naming the file and line of any malformed entry."""
        if not self.path.exists():
            return []
        out = []
        for i, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                extra = set(d) - _FIELDS
                if extra:
                    raise ValueError(f"unknown field(s) {sorted(extra)}")
                out.append(Forecast(**d))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{self.path}: line {i}: not a forecast record ({exc})") from exc
        return out

    def _save(self, forecasts: Sequence[Forecast]) -> None:
        text = "".join(json.dumps(f.to_dict(), sort_keys=True, allow_nan=False) + "\n" for f in forecasts)
        _write_atomic(self.path, text)

    def get(self, forecast_id: str) -> Forecast:
        """The forecast whose id starts with ``forecast_id`` (a unique prefix is enough)."""
        hits = [f for f in self.load() if f.id.startswith(forecast_id)]
        if len(hits) != 1:
            have = ", ".join(f.id for f in self.load()) or "none"
            what = "no forecast" if not hits else f"{len(hits)} forecasts"
            raise ValueError(f"{self.path}: {what} with id {forecast_id!r}; ids: {have}")
        return hits[0]

    def record(self, *, target_compute: float, predicted: float, lo: float, hi: float, method: str,
               inputs_hash: str, level: float = DEFAULT_LEVEL, quantity: str = "loss", family: str | None = None,
               params: float | None = None, tokens: float | None = None, note: str = "",
               created: str | None = None) -> Forecast:
        """Append a forecast (atomically) and return it; its id is a hash of its content."""
        level = check_level(level)
        for name, v in (("target_compute", target_compute), ("predicted", predicted), ("lo", lo), ("hi", hi)):
            if not (isinstance(v, (int, float, np.floating)) and math.isfinite(v)):
                raise ValueError(f"record: {name} must be a finite number, got {v!r}")
        if not target_compute > 0:
            raise ValueError(f"record: target_compute must be positive, got {target_compute}")
        if not lo <= predicted <= hi:
            raise ValueError(f"record: the interval [{lo}, {hi}] does not contain the prediction {predicted}")
        body = dict(created=created or _now(), target_compute=float(target_compute), predicted=float(predicted),
                    lo=float(lo), hi=float(hi), level=level, method=str(method), inputs_hash=str(inputs_hash),
                    quantity=str(quantity), family=family, params=None if params is None else float(params),
                    tokens=None if tokens is None else float(tokens), note=str(note))
        fid = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]
        existing = self.load()
        if any(f.id == fid for f in existing):
            raise ValueError(f"{self.path}: forecast {fid} is already recorded")
        fc = Forecast(id=fid, **body)
        self._save(existing + [fc])
        return fc

    def check(self, forecast_id: str, observed: float, *, checked: str | None = None) -> Forecast:
        """Store the observed value (and date) with its forecast, atomically; return it scored."""
        if not (isinstance(observed, (int, float, np.floating)) and math.isfinite(observed)):
            raise ValueError(f"check: observed must be a finite number, got {observed!r}")
        target = self.get(forecast_id)
        done = dataclasses.replace(target, observed=float(observed), checked=checked or _now())
        self._save([done if f.id == target.id else f for f in self.load()])
        return done


def forecast_from_results(results: pd.DataFrame, *, target_compute: float, family: str | None = None,
                          method: str = "joint", loss: str = "loss", params: float | None = None,
                          tokens: float | None = None, estimator: str | None = None, annealed: bool | None = None,
                          n_boot: int = 1000, level: float = DEFAULT_LEVEL, seed: int = 0, grid: str = "coarse",
                          window: int | None = 5, tolerance: float | None = 0.15) -> dict:
    """Fit one family with ``method`` (``joint`` or ``isoflop``) and predict ``loss`` at
    ``target_compute`` with a prediction interval. Returns the keyword arguments of
    ``ForecastRegistry.record`` (inputs_hash covers the rows used and these options)."""
    if method not in ("joint", "isoflop"):
        raise ValueError(f"method must be 'joint' or 'isoflop', got {method!r}")
    if not (math.isfinite(float(target_compute)) and float(target_compute) > 0):
        raise ValueError(f"target_compute must be a positive number of FLOPs, got {target_compute}")
    for col in ("params", "tokens", loss, "slice_flops"):
        if col not in results.columns:
            raise ValueError(f"results table lacks column {col!r}; have {list(results.columns)}")
    warnings: list[str] = []
    df = _select(results, "annealed", annealed, (True,), "annealed", warnings)
    if "family" in df.columns:
        fams = sorted(df["family"].dropna().unique(), key=str)
        if family is None and len(fams) > 1:
            raise ValueError(f"the table has several families {fams}; pass family=")
        if family is not None:
            if family not in fams:
                raise ValueError(f"family {family!r} not in the table; have {fams}")
            df = df[df["family"] == family]
    df = _select(df, "estimator", estimator, ESTIMATOR_PREFERENCE, "estimator", warnings)
    df = df.dropna(subset=["params", "tokens", loss])
    options = dict(method=method, loss=loss, target_compute=target_compute, params=params, tokens=tokens,
                   n_boot=n_boot, level=level, seed=seed, grid=grid, window=window, tolerance=tolerance)
    if method == "joint":
        fit = fit_chinchilla(df["params"], df["tokens"], df[loss], grid=grid, n_boot=n_boot, level=level, seed=seed)
        if params is not None and tokens is not None:
            pred = float(fit.predict(params, tokens))
            lo, hi = (float(v) for v in fit.predict_interval(params, tokens, level))
        else:  # compute-optimal allocation under the data's own FLOPs accounting, C = k P D
            k = _flops_per_param_token(df, "flops")
            options["flops_per_token_per_param"] = k
            pred = float(fit.predict_optimal(target_compute, k))
            lo, hi = (float(v) for v in fit.predict_interval_optimal(target_compute, level, k))
    else:
        rows = df.dropna(subset=["slice_flops"])
        if tolerance is not None and "flops" in rows.columns:
            rows = rows[(rows["flops"] / rows["slice_flops"] - 1).abs() <= tolerance]
        fit = fit_isoflop(rows, loss=loss, window=window, n_boot=n_boot, level=level, seed=seed)
        pred = float(fit.power_L.predict(target_compute))
        lo, hi = (float(v) for v in fit.predict_interval(target_compute, level)["L_star"])
    if not hi > lo:  # e.g. a power law through exactly two slice minima: nothing left to resample
        raise ValueError(f"the {method} fit gives no prediction interval at C = {target_compute:.3g} "
                         f"([{lo:.4g}, {hi:.4g}] from {len(df)} rows); a forecast needs an interval: "
                         "add budgets (3 or more IsoFLOP slices) or use the other method")
    return dict(target_compute=float(target_compute), predicted=pred, lo=lo, hi=hi, level=level, method=method,
                quantity=loss, family=family, params=params, tokens=tokens,
                inputs_hash=inputs_hash(df, options, columns=[c for c in ("family", "slice_flops", "flops", "params",
                                                                         "tokens", loss) if c in df.columns]))
