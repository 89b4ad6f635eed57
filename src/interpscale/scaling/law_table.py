"""Fit a published law to an external run table (``interpscale fit law LAW FILE ...``): the table(s)
read by :func:`read_runs` (column mapping, per-step logs reduced by ``last``), then ``chinchilla``
(Eq. 27) or ``data-constrained`` (Muennighoff et al. Eq. 5, needs ``unique_tokens``) on the runs;
``overtraining`` (Gadre et al.) with the error law Err(L) when a metric is mapped; ``ladder``
(Bhagia et al.) step 1, and step 2 on every logged checkpoint when a metric is mapped on per-step
logs (first 10% skipped, moving average over ``last``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from interpscale._registry import Registry
from interpscale.errors import UserError

from .external import RunTable, read_runs



@dataclass(frozen=True)
class LawTableFit:
    """``fit``: the law's result; ``extra``: the chained law (over-training error law) or None;
    ``runs``: the reduced table the fit used."""

    law: str
    fit: Any
    runs: pd.DataFrame
    source: tuple[str, ...]
    last: int | None
    extra: Any = None

    @property
    def converged(self) -> bool:
        return bool(self.fit.converged and (self.extra is None or self.extra.converged))

    def to_dict(self) -> dict:
        out = {"law": self.law, "source": list(self.source), "last": self.last, "n_runs": len(self.runs),
               "fit": self.fit.to_dict()}
        if self.extra is not None:
            out["error_law"] = self.extra.to_dict()
        return out

    def summary(self) -> str:
        head = f"{self.law} fit of {len(self.runs)} runs from {', '.join(self.source)}" + (
            f" (mean of the last {self.last} logged rows per run)" if self.last and self.last > 1 else "")
        return "\n".join([head] + [f.summary() for f in (self.fit, self.extra) if f is not None])


def _boot(n_boot, level, seed) -> dict:
    return {k: v for k, v in (("n_boot", n_boot), ("level", level), ("seed", seed)) if v is not None}


def fit_law_table(law: str, paths, *, params: str, tokens: str | None = None, unique_tokens: str | None = None,
                  loss: str | None = None, metric: str | None = None, run: str | None = None, step: str | None = None,
                  tokens_per_step=None, last: int = 1, recipe: Literal["authors", "robust"] = "authors",
                  task_min: float = 0.25,
                  n_boot: int | None = None, level: float | None = None, seed: int | None = None) -> LawTableFit:
    """Read ``paths`` by column mapping and fit ``law`` (one of ``LAWS``); see the module doc."""
    if law not in LAWS:
        raise UserError(f"unknown law {law!r}; choose from {', '.join(LAWS)}")
    if loss is None:
        raise UserError(f"fit law {law}: map --loss (the column to fit)")
    if law == "data-constrained" and unique_tokens is None:
        raise UserError("fit law data-constrained: map --unique-tokens (unique tokens of each run)")
    mapping = dict(params=params, tokens=tokens, unique_tokens=unique_tokens, loss=loss, metric=metric, run=run,
                   step=step, tokens_per_step=tokens_per_step)
    table: RunTable = read_runs(paths, last=last, **mapping)
    fit, extra = LAWS.lookup(law)(table, paths, mapping, boot=_boot(n_boot, level, seed), recipe=recipe,
                                  task_min=task_min, last=last, metric=metric)
    return LawTableFit(law=law, fit=fit, runs=table.frame, source=table.source, last=last, extra=extra)


def _pdl(table: RunTable):
    return table.column("params"), table.column("tokens"), table.column("loss")


def chinchilla_table(table, paths, mapping, *, boot, **_):
    """Eq. 27 on the runs."""
    from .chinchilla import fit_chinchilla

    return fit_chinchilla(*_pdl(table), **boot), None


def data_constrained_table(table, paths, mapping, *, boot, recipe, **_):
    """Muennighoff et al. Eq. 5 on the runs (needs unique tokens)."""
    from .data_constrained import fit_data_constrained

    P, D, L = _pdl(table)
    return fit_data_constrained(P, D, table.column("unique_tokens"), L, recipe=recipe, **boot), None


def overtraining_table(table, paths, mapping, *, boot, recipe, metric, **_):
    """Gadre et al. on the runs, with the error law Err(L) when a metric is mapped."""
    from .overtraining import fit_downstream_error, fit_overtraining

    P, D, L = _pdl(table)
    extra = fit_downstream_error(L, table.column("metric"), **boot) if metric is not None else None
    return fit_overtraining(P, D, L, recipe=recipe, **boot), extra


def ladder_table(table, paths, mapping, *, boot, recipe, task_min, last, metric, **_):
    """Bhagia et al. step 1 on the runs; step 2 on every logged checkpoint when a metric is mapped."""
    from .ladder import checkpoint_points, fit_ladder

    ck = {}
    if metric is not None:
        if mapping["step"] is None and mapping["run"] is None:
            raise UserError("fit law ladder: step 2 (--metric) needs per-step logs: map --run and/or --step")
        steps = read_runs(paths, last=None, **mapping).frame
        x, y, g = checkpoint_points(steps["run"], steps["loss"], steps["metric"], window=max(int(last), 1))
        ck = dict(checkpoint_loss=x, checkpoint_accuracy=y, checkpoint_groups=g)
    return fit_ladder(*_pdl(table), recipe=recipe, task_min=task_min, **ck, **boot), None


# the laws of ``fit law`` by CLI name: each entry fits its law on a run table -> (fit, chained fit or None)
LAWS: Registry = Registry("law")
for _name, _fn in (("chinchilla", "chinchilla_table"), ("data-constrained", "data_constrained_table"),
                   ("overtraining", "overtraining_table"), ("ladder", "ladder_table")):
    LAWS.register(_name, f"{__name__}:{_fn}", lazy=True)
