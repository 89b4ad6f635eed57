"""Validation-loss estimators (Steerling §8.2.1 and App. H), chosen by name from a registry.

AR models get exact next-token cross-entropy (Eq. 1).  Diffusion models get a Monte Carlo
estimate of the per-token NELBO: fixed-rate mask loss (Eq. 36), fixed-grid discretised ELBO
(Eq. 37), MDLM ELBO with one t per batch (Eq. 39, the paper's reported number) or per-block
ELBO with a t per block (Eq. 40).  A batch's value is the mean cross-entropy over its masked
positions; batches are averaged weighted by their valid-token count (the paper's plain
average for equal-sized batches).  The standard error treats each (batch, pass-group) as one
Monte Carlo unit.  ``register_estimator(name, unit, ...)`` adds an estimator.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from interpscale._registry import Registry
from interpscale.metrics._common import (block_size, checked_batches, eval_mode, logits_of, model_device,
                                         require_family, seeded_generator, special_id, valid_mask)
from interpscale.models.types import Batch
from interpscale.errors import UserError

FIXED_RATE_TAU = 0.5  # Eq. 36
GRID_RATES: tuple[float, ...] = tuple(k / 10 for k in range(1, 10))  # Eq. 37, t_k = k/10
T_RANGE: tuple[float, float] = (1e-3, 1.0 - 1e-3)  # Eq. 39, t ~ U(1e-3, 1 - 1e-3)


# A valid position is [MASK] when its uniform draw U_i falls below its noise level (Eq. 35).
# Antithetic pairs reuse the draws as (t, U) -> (lo + hi - t, 1 - U), which masks exactly the
# complement of the first pass when the two levels sum to one (each token scored once per pair).
def stratified_uniform(n: int, lo: float, hi: float, gen: torch.Generator) -> torch.Tensor:
    """``n`` draws on (lo, hi), one in each of ``n`` equal strata, in random order."""
    perm = torch.randperm(n, generator=gen, device=gen.device).to(torch.float64)
    jitter = torch.rand(n, generator=gen, device=gen.device, dtype=torch.float64)
    return lo + (hi - lo) * (perm + jitter) / n


def noise_levels(n_rows: int, n: int, lo: float, hi: float, gen: torch.Generator, *,
                 stratified: bool) -> torch.Tensor:
    """[n_rows, n] levels on (lo, hi); ``stratified`` spreads each row's over one stratum per level."""
    if stratified:
        return torch.stack([stratified_uniform(n, lo, hi, gen) for _ in range(n_rows)])
    return lo + (hi - lo) * torch.rand((n_rows, n), generator=gen, device=gen.device, dtype=torch.float64)


def draw_mask(rate: torch.Tensor | float, valid: torch.Tensor, gen: torch.Generator, *,
              uniforms: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask valid positions with probability ``rate`` (scalar, [B, 1] or [B, T]); returns
    ``(mask, uniforms)`` (pass ``1 - uniforms`` back in for the antithetic twin).  At least one
    valid position is always masked, a uniform random one, so ``1/|M|`` is defined and the
    masked mean stays unbiased for a context-free model."""
    if uniforms is None:
        uniforms = torch.rand(valid.shape, generator=gen, device=valid.device)
    if isinstance(rate, torch.Tensor):
        rate = rate.to(device=valid.device, dtype=uniforms.dtype)
    mask = (uniforms < rate) & valid
    if not bool(mask.any()):
        flat = valid.reshape(-1).nonzero().squeeze(1)
        pick = flat[torch.randint(len(flat), (1,), generator=gen, device=gen.device).to(flat.device)]
        mask = mask.reshape(-1).index_fill(0, pick, True).reshape(valid.shape)
    return mask, uniforms


@dataclass(frozen=True)
class LossEstimate:
    """A validation loss in nats per token and its Monte Carlo standard error (0 for the
    exact AR cross-entropy, NaN from one unit).  ``n_tokens``: tokens scored (for ``ar_ce``
    the predicted positions); ``n_forward``: forward passes; ``rate``: a per-rate estimate's rate."""

    value: float
    se: float
    n_tokens: int
    estimator: str
    n_passes: int = 1
    n_forward: int = 0
    rate: Optional[float] = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Units:
    """(value, weight) Monte Carlo units of one estimate (an exact one: (summed NLL, count))."""

    values: list[float] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    n_forward: int = 0

    def add(self, value: float, weight: float) -> None:
        self.values.append(value)
        self.weights.append(weight)

    def mean_se(self) -> tuple[float, float]:
        v, w = (torch.tensor(x, dtype=torch.float64) for x in (self.values, self.weights))
        w = w / w.sum()
        mean, n = float((w * v).sum()), len(self.values)
        if n < 2:
            return mean, float("nan")
        return mean, math.sqrt(n / (n - 1) * float((w.pow(2) * (v - mean).pow(2)).sum()))


# ---- the registry --------------------------------------------------------------------
@dataclass
class EstimationContext:
    """What an estimator's ``unit`` sees: the model, this call's options and the
    per-estimator random streams; ``rate_units`` collects Table 28's per-rate values."""

    model: nn.Module
    mask_id: int
    n_batches: int
    groups: int  # Monte Carlo pass-groups per batch (n_passes, halved when antithetic)
    twins: tuple[bool, ...]  # (False,) or (False, True) for an antithetic pair
    seed: int
    stratified: bool
    tau: float
    rates: tuple[float, ...]
    block: int
    lo: float
    hi: float
    gens: dict[str, torch.Generator] = field(default_factory=dict)
    plans: dict[str, torch.Tensor] = field(default_factory=dict)
    rate_units: dict[float, _Units] = field(default_factory=dict)


# unit(ctx, batch, i, group, weight) -> one Monte Carlo value (nats/token) of batch i, pass-group ``group``;
# an exact estimator's unit returns (summed NLL, positions scored) once per batch instead.
UnitFn = Callable[[EstimationContext, Batch, int, int, float], "float | tuple[float, int]"]


@dataclass(frozen=True)
class EstimatorSpec:
    """A registered loss estimator. ``diffusion``: needs a diffusion model (else an AR one);
    ``exact``: deterministic, one unit per batch, no standard error; ``forward_passes(rates)``:
    forward passes of one pass over a batch; ``prepare(ctx)``: draws shared before the sweep
    (Eq. 39's one t per batch); ``scored(batch)``: the positions averaged (for bits per byte);
    ``rate``: the mask rate reported with the estimate, if fixed."""

    name: str
    unit: UnitFn
    diffusion: bool = True
    exact: bool = False
    forward_passes: Callable[[Sequence[float]], int] = lambda rates: 1
    prepare: Optional[Callable[[EstimationContext], None]] = None
    scored: Optional[Callable[[Batch], torch.Tensor]] = None
    rate: Optional[Callable[[EstimationContext], Optional[float]]] = None
    equation: str = ""


ESTIMATOR_REGISTRY: Registry[EstimatorSpec] = Registry("estimator", hint=lambda name: (
    "Register one with interpscale.metrics.register_estimator(name, unit, ...)"))


def register_estimator(name: str, unit: UnitFn, *, overwrite: bool = False, **options) -> EstimatorSpec:
    """Register ``name`` -> ``EstimatorSpec(name, unit, **options)``; re-registering needs ``overwrite``."""
    return ESTIMATOR_REGISTRY.register(name, EstimatorSpec(name, unit, **options), overwrite=overwrite)


def get_estimator(name: str) -> EstimatorSpec:
    return ESTIMATOR_REGISTRY.lookup(name)


def passes_per_batch(estimator: str, *, rates: Sequence[float] = GRID_RATES) -> int:
    """Forward passes one batch costs under ``estimator`` for one MC pass."""
    return int(get_estimator(estimator).forward_passes(rates))


def scored_positions(batch: Batch, estimator: str) -> torch.Tensor:
    """[B, T] bool: the positions whose loss ``estimator`` averages (``n_tokens`` of its estimate)."""
    spec = get_estimator(estimator)
    return spec.scored(batch) if spec.scored is not None else valid_mask(batch)


# ---- the estimators (App. H) -----------------------------------------------------------
def masked_loss(ctx: EstimationContext, batch: Batch, rate, gen: torch.Generator, *, reflect: bool = False) -> float:
    """Mean -log p(x0_i | x_t) over the masked positions of ``batch`` at noise level ``rate``
    (scalar or [B, T]), averaged over the antithetic pair when the call asked for one: the twin
    uses 1 - U (and lo + hi - t when ``reflect``, as for a drawn t).  The building block of a
    diffusion estimator's ``unit``."""
    vals, uniforms, valid = [], None, valid_mask(batch)
    for twin in ctx.twins:
        if twin:
            uniforms = 1.0 - uniforms
        r = ctx.lo + ctx.hi - rate if twin and reflect else rate
        mask, uniforms = draw_mask(r, valid, gen, uniforms=uniforms)
        logits = logits_of(ctx.model(batch.tokens.masked_fill(mask, ctx.mask_id)))
        vals.append(float(F.cross_entropy(logits[mask].float(), batch.tokens[mask], reduction="mean")))
    return sum(vals) / len(vals)


def _ar_scored(batch: Batch) -> torch.Tensor:
    """Positions predicted by the previous one (Eq. 1): i >= 1 with i and i-1 valid."""
    valid = valid_mask(batch)
    return F.pad(valid[:, 1:] & valid[:, :-1], (1, 0), value=False)


def _ar_ce(ctx: EstimationContext, batch: Batch, i: int, group: int, weight: float) -> tuple[float, int]:
    """Eq. 1, exact: summed next-token NLL and the number of predicted positions."""
    logits = logits_of(ctx.model(batch.tokens))[:, :-1]  # position i predicts token i+1
    keep = _ar_scored(batch)[:, 1:]
    nll = F.cross_entropy(logits[keep].float(), batch.tokens[:, 1:][keep], reduction="sum")
    return float(nll), int(keep.sum())


def _fixed_rate(ctx: EstimationContext, batch: Batch, i: int, group: int, weight: float) -> float:
    return masked_loss(ctx, batch, ctx.tau, ctx.gens["fixed_rate"])  # Eq. 36


def _fixed_grid(ctx: EstimationContext, batch: Batch, i: int, group: int, weight: float) -> float:
    per = [masked_loss(ctx, batch, r, ctx.gens["fixed_grid"]) for r in ctx.rates]
    for r, v in zip(ctx.rates, per):
        ctx.rate_units[r].add(v, weight)  # Table 28's per-rate losses come from the same passes
    return sum(per) / len(per)  # Eq. 37: mean over the K rates


def _mdlm_plan(ctx: EstimationContext) -> None:
    """Eq. 39: one t per (batch, pass-group), drawn up front (stratified over all units if asked)."""
    g_cpu = seeded_generator(torch.device("cpu"), ctx.seed, "mdlm_elbo/t")
    flat = noise_levels(1, ctx.n_batches * ctx.groups, ctx.lo, ctx.hi, g_cpu, stratified=ctx.stratified)
    ctx.plans["mdlm_elbo"] = flat.reshape(ctx.n_batches, ctx.groups)


def _mdlm_elbo(ctx: EstimationContext, batch: Batch, i: int, group: int, weight: float) -> float:
    t = float(ctx.plans["mdlm_elbo"][i, group])  # Eq. 39: one t for the whole batch
    return masked_loss(ctx, batch, t, ctx.gens["mdlm_elbo"], reflect=True)


def _per_block(ctx: EstimationContext, batch: Batch, i: int, group: int, weight: float) -> float:
    (B, T), g = batch.tokens.shape, ctx.gens["per_block"]
    # Eq. 40: one t_b per block of each row (a trailing partial block gets its own)
    t_b = noise_levels(B, -(-T // ctx.block), ctx.lo, ctx.hi, g, stratified=ctx.stratified)
    return masked_loss(ctx, batch, t_b.repeat_interleave(ctx.block, dim=1)[:, :T], g, reflect=True)


register_estimator("ar_ce", _ar_ce, diffusion=False, exact=True, scored=_ar_scored, equation="Eq. 1")
register_estimator("mdlm_elbo", _mdlm_elbo, prepare=_mdlm_plan, equation="Eq. 39")
register_estimator("fixed_rate", _fixed_rate, rate=lambda ctx: ctx.tau, equation="Eq. 36")
register_estimator("fixed_grid", _fixed_grid, forward_passes=lambda rates: len(rates), equation="Eq. 37")
register_estimator("per_block", _per_block, equation="Eq. 40")

DIFFUSION_ESTIMATORS: tuple[str, ...] = ("mdlm_elbo", "fixed_rate", "fixed_grid", "per_block")
ESTIMATORS: tuple[str, ...] = ("ar_ce",) + DIFFUSION_ESTIMATORS  # the built-in ones


# ---- one sweep, several estimators -----------------------------------------------------
def _check_options(estimators, n_passes, antithetic, t_range, tau, rates, per_rate) -> None:
    if not estimators and not per_rate:
        raise UserError("no estimator requested")
    if n_passes < 1:
        raise UserError(f"n_passes must be >= 1, got {n_passes}")
    if antithetic and n_passes % 2:
        raise UserError(f"antithetic sampling pairs passes, so n_passes must be even (got {n_passes})")
    if not 0.0 < t_range[0] < t_range[1] < 1.0:
        raise UserError(f"t_range must satisfy 0 < lo < hi < 1, got {t_range}")
    if not 0.0 < tau < 1.0 or any(not 0.0 < r < 1.0 for r in rates):
        raise UserError(f"mask rates must lie in (0, 1); got tau={tau}, rates={tuple(rates)}")


def _sweep(ctx: EstimationContext, data: list[Batch], want: list[str], progress: bool) -> tuple[dict, int]:
    """Every requested estimator on every batch (each batch moved to the device once)."""
    device = model_device(ctx.model)
    units = {e: _Units() for e in want}
    n_tokens = 0
    with eval_mode(ctx.model):
        for i, batch in enumerate(tqdm(data, desc="validation loss", disable=not progress)):
            batch = batch.to(device)
            weight = float(valid_mask(batch).sum())
            n_tokens += int(weight)
            for e in want:
                spec, u = get_estimator(e), units[e]
                if spec.exact:
                    u.add(*spec.unit(ctx, batch, i, 0, weight))
                    u.n_forward += 1
                    continue
                for grp in range(ctx.groups):
                    u.add(spec.unit(ctx, batch, i, grp, weight), weight)
                    u.n_forward += len(ctx.twins) * spec.forward_passes(ctx.rates)
    return units, n_tokens


def _estimates(ctx: EstimationContext, units: dict[str, _Units], n_tokens: int, n_passes: int,
               per_rate: bool) -> dict[str, LossEstimate]:
    out: dict[str, LossEstimate] = {}
    for e, u in units.items():
        spec = get_estimator(e)
        if spec.exact:
            nll, n = sum(u.values), sum(u.weights)
            out[e] = LossEstimate(nll / max(n, 1), 0.0, n, e, 1, u.n_forward)
            continue
        out[e] = LossEstimate(*u.mean_se(), n_tokens, e, n_passes, u.n_forward, spec.rate and spec.rate(ctx))
    if per_rate:
        for r in ctx.rates:
            value, se = ctx.rate_units[r].mean_se()
            out[f"rate_{r:g}"] = LossEstimate(value, se, n_tokens, "fixed_rate", n_passes, 0, float(r))
    return out


def estimate_losses(model: nn.Module, batches: Iterable[Batch],
                    estimators: Sequence[str] = DIFFUSION_ESTIMATORS, *, n_passes: int = 1, seed: int = 0,
                    antithetic: bool = False, stratified: bool = False, tau: float = FIXED_RATE_TAU,
                    rates: Sequence[float] = GRID_RATES, per_rate: bool = False,
                    block: Optional[int] = None, t_range: tuple[float, float] = T_RANGE,
                    progress: bool = False) -> dict[str, LossEstimate]:
    """Several registered estimators in one sweep over ``batches``.

    ``n_passes``: Monte Carlo passes per batch (even when ``antithetic``, which pairs each
    pass with its twin ``(lo+hi-t, 1-U)``); ``stratified`` spreads the MDLM levels over one
    stratum per (batch, pass-group) and the per-block levels over one per block of each row.
    ``per_rate`` adds ``"rate_0.1"`` ... entries (Table 28's per-mask-rate losses at
    ``rates``) from the fixed-grid passes.  ``block`` defaults to ``model.config.block_size``.
    """
    _check_options(estimators, n_passes, antithetic, t_range, tau, rates, per_rate)
    want = list(dict.fromkeys(estimators))
    if per_rate and "fixed_grid" not in want:
        want.append("fixed_grid")
    for e in want:
        require_family(model, diffusion=get_estimator(e).diffusion, what=e)
    mask_id = special_id(model, "mask_id")
    data = checked_batches(batches, mask_id=mask_id)
    b = block or block_size(model)
    short = min(bt.tokens.shape[1] for bt in data)
    if any(get_estimator(e).diffusion for e in want) and short < b:
        raise UserError(f"diffusion estimators need sequences of at least one block: the shortest sequence "
                        f"has {short} tokens, the model's block size is {b}")
    device = model_device(model)
    ctx = EstimationContext(
        model=model, mask_id=mask_id, n_batches=len(data), groups=n_passes // 2 if antithetic else n_passes,
        twins=(False, True) if antithetic else (False,), seed=seed, stratified=stratified, tau=tau,
        rates=tuple(rates), block=b, lo=t_range[0], hi=t_range[1],
        gens={e: seeded_generator(device, seed, e) for e in want}, rate_units={r: _Units() for r in rates})
    for e in want:
        if get_estimator(e).prepare is not None:
            get_estimator(e).prepare(ctx)
    units, n_tokens = _sweep(ctx, data, want, progress)
    out = _estimates(ctx, units, n_tokens, n_passes, per_rate)
    if "fixed_grid" not in estimators:
        out.pop("fixed_grid", None)
    return out


def estimate_loss(model: nn.Module, batches: Iterable[Batch], estimator: str = "mdlm_elbo", *,
                  n_passes: int = 1, seed: int = 0, antithetic: bool = False, **kwargs) -> LossEstimate:
    """Validation loss of ``model`` on ``batches`` (a re-iterable of Batch) in nats/token under one
    registered ``estimator``; other keywords go to :func:`estimate_losses`."""
    return estimate_losses(model, batches, (estimator,), n_passes=n_passes, seed=seed, antithetic=antithetic,
                           **kwargs)[estimator]


def per_mask_rate_losses(model: nn.Module, batches: Iterable[Batch],
                         rates: Sequence[float] = GRID_RATES, *, n_passes: int = 1, seed: int = 0,
                         antithetic: bool = False, progress: bool = False) -> dict[float, LossEstimate]:
    """Masked cross-entropy at each fixed rate t (Table 28), keyed by t."""
    res = estimate_losses(model, batches, (), per_rate=True, rates=rates, n_passes=n_passes, seed=seed,
                          antithetic=antithetic, progress=progress)
    return {float(r): res[f"rate_{r:g}"] for r in rates}
