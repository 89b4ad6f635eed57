"""Validation-loss estimators (Steerling §8.2.1 and App. H).

AR models get exact next-token cross-entropy (Eq. 1).  Diffusion models get one of four
Monte Carlo estimates of the per-token NELBO: fixed-rate mask loss (Eq. 36), fixed-grid
discretised ELBO (Eq. 37), MDLM ELBO with one t per batch (Eq. 39, the paper's reported
number) and per-block ELBO with an independent t per block (Eq. 40).  Each batch's value
is the mean cross-entropy over the positions masked in that batch; batches are averaged
weighted by their valid-token count (the paper's plain batch average when batches are
equal-sized).  The standard error treats each (batch, pass-group) as one Monte Carlo unit.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from interpscale.metrics import masking
from interpscale.metrics._common import (
    block_size,
    checked_batches,
    eval_mode,
    logits_of,
    mask_token_id,
    model_device,
    require_family,
    seeded_generator,
    valid_mask,
)
from interpscale.models.types import Batch

DIFFUSION_ESTIMATORS: tuple[str, ...] = ("mdlm_elbo", "fixed_rate", "fixed_grid", "per_block")
ESTIMATORS: tuple[str, ...] = ("ar_ce",) + DIFFUSION_ESTIMATORS
FIXED_RATE_TAU = 0.5  # Eq. 36


@dataclass(frozen=True)
class LossEstimate:
    """A validation loss in nats per token with its Monte Carlo standard error.

    ``n_tokens``: valid tokens evaluated (for ``ar_ce``, the positions predicted);
    ``n_forward``: forward passes spent; ``rate``: the mask rate of a per-rate estimate.
    ``se`` is 0 for the exact AR cross-entropy and NaN when only one unit was drawn."""

    value: float
    se: float
    n_tokens: int
    estimator: str
    n_passes: int = 1
    n_forward: int = 0
    rate: Optional[float] = None

    def to_dict(self) -> dict:
        return asdict(self)


def passes_per_batch(estimator: str, *, rates: Sequence[float] = masking.GRID_RATES) -> int:
    """Forward passes one batch costs under ``estimator`` for one MC pass."""
    _check_name(estimator)
    return len(rates) if estimator == "fixed_grid" else 1


def _check_name(estimator: str) -> None:
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; choose one of {', '.join(ESTIMATORS)}")


def _weighted_mean_se(values: list[float], weights: list[float]) -> tuple[float, float]:
    v = torch.tensor(values, dtype=torch.float64)
    w = torch.tensor(weights, dtype=torch.float64)
    w = w / w.sum()
    mean = float((w * v).sum())
    n = len(values)
    if n < 2:
        return mean, float("nan")
    return mean, math.sqrt(n / (n - 1) * float((w.pow(2) * (v - mean).pow(2)).sum()))


def _masked_ce(model: nn.Module, tokens: torch.Tensor, mask: torch.Tensor, mask_id: int) -> float:
    """Mean -log p(x0_i | x_t) over the masked positions of one corrupted batch."""
    logits = logits_of(model(tokens.masked_fill(mask, mask_id)))
    return float(F.cross_entropy(logits[mask].float(), tokens[mask], reduction="mean"))


def _ar_batch(model: nn.Module, batch: Batch) -> tuple[float, int]:
    """Summed next-token NLL (Eq. 1) and the number of predicted positions."""
    valid = valid_mask(batch)
    logits = logits_of(model(batch.tokens))[:, :-1]  # position i predicts token i+1
    keep = valid[:, 1:] & valid[:, :-1]
    nll = F.cross_entropy(logits[keep].float(), batch.tokens[:, 1:][keep], reduction="sum")
    return float(nll), int(keep.sum())


class _Units:
    """Collects (value, weight) Monte Carlo units for one estimate."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.weights: list[float] = []
        self.n_forward = 0

    def add(self, value: float, weight: float) -> None:
        self.values.append(value)
        self.weights.append(weight)


def estimate_losses(
    model: nn.Module,
    batches: Iterable[Batch],
    estimators: Sequence[str] = DIFFUSION_ESTIMATORS,
    *,
    n_passes: int = 1,
    seed: int = 0,
    antithetic: bool = False,
    stratified: bool = False,
    tau: float = FIXED_RATE_TAU,
    rates: Sequence[float] = masking.GRID_RATES,
    per_rate: bool = False,
    block: Optional[int] = None,
    t_range: tuple[float, float] = masking.T_RANGE,
    progress: bool = False,
) -> dict[str, LossEstimate]:
    """Several estimators in one sweep over ``batches`` (each batch moved to the device once).

    ``n_passes``: Monte Carlo passes per batch (even when ``antithetic``).  ``antithetic``
    pairs each pass with its twin ``(lo+hi-t, 1-U)``; ``stratified`` spreads the MDLM
    levels over one stratum per (batch, pass-group) and the per-block levels over one
    stratum per block of each row.  ``per_rate`` adds ``"rate_0.1"`` ... entries (the
    Table 28 per-mask-rate losses at ``rates``), computed from the fixed-grid passes.
    ``block`` defaults to ``model.config.block_size``.
    """
    for e in estimators:
        _check_name(e)
    if not estimators and not per_rate:
        raise ValueError("no estimator requested")
    if n_passes < 1:
        raise ValueError(f"n_passes must be >= 1, got {n_passes}")
    if antithetic and n_passes % 2:
        raise ValueError(f"antithetic sampling pairs passes, so n_passes must be even (got {n_passes})")
    lo, hi = t_range
    if not 0.0 < lo < hi < 1.0:
        raise ValueError(f"t_range must satisfy 0 < lo < hi < 1, got {t_range}")
    if not 0.0 < tau < 1.0 or any(not 0.0 < r < 1.0 for r in rates):
        raise ValueError(f"mask rates must lie in (0, 1); got tau={tau}, rates={tuple(rates)}")
    want = list(dict.fromkeys(estimators))
    if per_rate and "fixed_grid" not in want:
        want.append("fixed_grid")
    for e in want:
        require_family(model, diffusion=e != "ar_ce", what=e)
    mask_id = mask_token_id(model)
    data = checked_batches(batches, mask_id=mask_id)
    b = block or block_size(model)
    short = min(bt.tokens.shape[1] for bt in data)
    if any(e != "ar_ce" for e in want) and short < b:
        raise ValueError(
            f"diffusion estimators need sequences of at least one block: the shortest sequence "
            f"has {short} tokens, the model's block size is {b}"
        )
    device = model_device(model)
    gens = {e: seeded_generator(device, seed, e) for e in want}
    groups = n_passes // 2 if antithetic else n_passes
    mdlm_plan = None
    if "mdlm_elbo" in want:  # one t per (batch, pass-group), Eq. 39
        g_cpu = seeded_generator(torch.device("cpu"), seed, "mdlm_elbo/t")
        n_units = len(data) * groups
        flat = masking.stratified_uniform(n_units, lo, hi, g_cpu) if stratified else masking.uniform_levels((n_units,), lo, hi, g_cpu)
        mdlm_plan = flat.reshape(len(data), groups)
    units = {e: _Units() for e in want}
    rate_units = {r: _Units() for r in rates}
    n_tokens = 0
    ar_nll, ar_n = 0.0, 0
    with eval_mode(model):
        for i, batch in enumerate(tqdm(data, desc="validation loss", disable=not progress)):
            batch = batch.to(device)
            tokens, valid = batch.tokens, valid_mask(batch)
            weight = float(valid.sum())
            n_tokens += int(weight)
            for e in want:
                u, g = units[e], gens[e]
                if e == "ar_ce":
                    nll, n = _ar_batch(model, batch)
                    ar_nll, ar_n = ar_nll + nll, ar_n + n
                    u.n_forward += 1
                    continue
                twins = (False, True) if antithetic else (False,)
                for grp in range(groups):
                    if e == "fixed_grid":  # Eq. 37: mean over the K rates
                        per = [_mean(_twin_passes(model, tokens, valid, r, g, mask_id, twins, lo, hi)) for r in rates]
                        for r, v in zip(rates, per):
                            rate_units[r].add(v, weight)
                        value = _mean(per)
                    elif e == "fixed_rate":  # Eq. 36
                        value = _mean(_twin_passes(model, tokens, valid, tau, g, mask_id, twins, lo, hi))
                    elif e == "mdlm_elbo":  # Eq. 39: one t for the whole batch
                        t = float(mdlm_plan[i, grp])
                        value = _mean(_twin_passes(model, tokens, valid, t, g, mask_id, twins, lo, hi, reflect=True))
                    else:  # per_block, Eq. 40: one t_b per block of each row
                        lv = masking.block_levels(tokens.shape[0], tokens.shape[1], b, lo, hi, g, stratified=stratified)
                        rate = masking.expand_blocks(lv, tokens.shape[1], b)
                        value = _mean(_twin_passes(model, tokens, valid, rate, g, mask_id, twins, lo, hi, reflect=True))
                    u.add(value, weight)
                    u.n_forward += len(twins) * (len(rates) if e == "fixed_grid" else 1)
    out: dict[str, LossEstimate] = {}
    for e in want:
        if e == "ar_ce":
            out[e] = LossEstimate(ar_nll / max(ar_n, 1), 0.0, ar_n, e, 1, units[e].n_forward)
            continue
        value, se = _weighted_mean_se(units[e].values, units[e].weights)
        out[e] = LossEstimate(value, se, n_tokens, e, n_passes, units[e].n_forward, tau if e == "fixed_rate" else None)
    if per_rate:
        for r in rates:
            value, se = _weighted_mean_se(rate_units[r].values, rate_units[r].weights)
            out[f"rate_{r:g}"] = LossEstimate(value, se, n_tokens, "fixed_rate", n_passes, 0, float(r))
    if "fixed_grid" not in estimators:
        out.pop("fixed_grid", None)
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _twin_passes(model, tokens, valid, rate, gen, mask_id, twins, lo, hi, *, reflect=False) -> list[float]:
    """One pass, or an antithetic pair: the twin uses 1 - U (and lo + hi - t when ``reflect``)."""
    vals, uniforms = [], None
    for twin in twins:
        r = rate
        if twin:
            uniforms = 1.0 - uniforms
            if reflect:
                r = lo + hi - rate
        mask, uniforms = masking.draw_mask(r, valid, gen, uniforms=uniforms)
        vals.append(_masked_ce(model, tokens, mask, mask_id))
    return vals


def estimate_loss(
    model: nn.Module,
    batches: Iterable[Batch],
    estimator: str = "mdlm_elbo",
    *,
    n_passes: int = 1,
    seed: int = 0,
    antithetic: bool = False,
    **kwargs,
) -> LossEstimate:
    """Validation loss of ``model`` on ``batches`` (a re-iterable of Batch) in nats/token.

    ``estimator``: ``ar_ce`` (AR models) or ``mdlm_elbo | fixed_rate | fixed_grid |
    per_block`` (diffusion models).  Extra keywords (``stratified``, ``tau``, ``rates``,
    ``block``, ``t_range``, ``progress``) go to :func:`estimate_losses`.
    """
    _check_name(estimator)
    return estimate_losses(
        model, batches, (estimator,), n_passes=n_passes, seed=seed, antithetic=antithetic, **kwargs
    )[estimator]


def per_mask_rate_losses(
    model: nn.Module,
    batches: Iterable[Batch],
    rates: Sequence[float] = masking.GRID_RATES,
    *,
    n_passes: int = 1,
    seed: int = 0,
    antithetic: bool = False,
    progress: bool = False,
) -> dict[float, LossEstimate]:
    """Masked cross-entropy at each fixed rate t (Table 28), keyed by t."""
    res = estimate_losses(
        model, batches, (), per_rate=True, rates=rates, n_passes=n_passes, seed=seed,
        antithetic=antithetic, progress=progress,
    )
    return {float(r): res[f"rate_{r:g}"] for r in rates}
