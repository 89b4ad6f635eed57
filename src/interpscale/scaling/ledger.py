"""A forecast ledger: write the prediction down before the big run, check it after.

The paper's Figure 24 workflow (the joint law's forecast ``paper.STEERLING_8B_FORECAST["joint"]``
for Steerling-8B at ``paper.STEERLING_8B_COMPUTE`` FLOPs, observed ``paper.STEERLING_8B["loss"]``)
made auditable: ``record`` stores the target compute, the predicted value with its calibrated
prediction interval and the raw bootstrap interval (``forecasting.calibrate``), the method and
how it was chosen, a hash of the fit's inputs (the rows and options it saw) and the UTC date;
``check`` adds the observed value and its date and scores both intervals. One JSON object per
line (JSONL); every write replaces the file atomically, so a crash never leaves a half-written
ledger.

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
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ._base import DEFAULT_LEVEL, check_level, jsonable


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
        if self.observed is None or self.raw_lo is None or self.raw_hi is None:
            return None
        return bool(self.raw_lo <= self.observed <= self.raw_hi)

    def to_dict(self) -> dict:
        return jsonable(dataclasses.asdict(self))

    def summary(self) -> str:
        pct = round(100 * self.level)
        who = f"{self.family} " if self.family else ""
        raw = "" if self.raw_lo is None else f", bootstrap [{self.raw_lo:.4f}, {self.raw_hi:.4f}]"
        how = f" (chosen by {self.chosen_by})" if self.chosen_by else ""
        head = (f"forecast {self.id} ({self.created}): {who}{self.quantity} at C = {self.target_compute:.3g} by "
                f"{self.method}{how}: {self.predicted:.4f} [{self.lo:.4f}, {self.hi:.4f}] ({pct}% PI{raw}); "
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
               created: str | None = None, raw_lo: float | None = None, raw_hi: float | None = None,
               chosen_by: str = "", backtest: Mapping[str, float] | None = None,
               ratio: float | None = None, calibration: str = "") -> Forecast:
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
                    tokens=None if tokens is None else float(tokens), note=str(note),
                    raw_lo=None if raw_lo is None else float(raw_lo), raw_hi=None if raw_hi is None else float(raw_hi),
                    chosen_by=str(chosen_by), backtest=None if backtest is None else jsonable(dict(backtest)),
                    ratio=None if ratio is None else float(ratio), calibration=str(calibration))
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
