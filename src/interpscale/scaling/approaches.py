"""Approach 2 (IsoFLOP minima, Eq. 25-26) and Approach 3 (joint surface, Eq. 27) side by side.

Both imply a compute-optimal model size N*(C), token count D*(C) = C / (k N*(C)) and loss
L*(C). Where they disagree at the target compute, at least one is extrapolating badly; the
log-ratio N*_2 / N*_3 and the loss difference, with intervals from the two fits' bootstrap
draws, are the diagnostic (Hoffmann et al. 2022 report the approaches agreeing on N*; on
Marin's ladder the joint fit forecast far better than IsoFLOP parabolas).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ._base import DEFAULT_LEVEL, jsonable
from .bootstrap import percentile_ci
from .chinchilla import ChinchillaFit, optimal_allocation, optimal_loss
from .isoflop import IsoFlopFit


@dataclass(frozen=True)
class ApproachComparison:
    """``table``: one row per (compute, approach) with N_opt, D_opt, L_opt and their
    confidence intervals; ``disagreement``: one row per compute with log(N2/N3),
    log(D2/D3), L2 - L3, their intervals and ``disagree`` (interval excludes 0)."""

    table: pd.DataFrame = field(compare=False)
    disagreement: pd.DataFrame = field(compare=False)
    level: float = DEFAULT_LEVEL
    flops_per_token_per_param: float = 6.0

    def to_frame(self) -> pd.DataFrame:
        return self.table.merge(self.disagreement, on="compute", how="left")

    def to_dict(self) -> dict:
        return jsonable({"level": self.level, "flops_per_token_per_param": self.flops_per_token_per_param,
                         "table": self.table.to_dict("records"), "disagreement": self.disagreement.to_dict("records")})

    def summary(self) -> str:
        pct = round(100 * self.level)
        lines = [f"Approach 2 (IsoFLOP) vs Approach 3 (joint) compute-optimal predictions ({pct}% CI; "
                 f"C = {self.flops_per_token_per_param:g} N D)"]
        for C, g in self.table.groupby("compute", sort=True):
            lines.append(f"  C = {C:.3g}")
            for r in g.itertuples(index=False):
                lines.append(f"    {r.approach:<10} N* {r.N_opt:.3g} [{r.N_lo:.3g}, {r.N_hi:.3g}]   "
                             f"D* {r.D_opt:.3g} [{r.D_lo:.3g}, {r.D_hi:.3g}]   "
                             f"L* {r.L_opt:.4f} [{r.L_lo:.4f}, {r.L_hi:.4f}]")
            d = self.disagreement[self.disagreement.compute == C].iloc[0]
            flag = "  ** the approaches disagree **" if d["disagree"] else ""
            lines.append(f"    N*_2/N*_3 = {math.exp(d['log_N_ratio']):.3g} "
                         f"[{math.exp(d['log_N_ratio_lo']):.3g}, {math.exp(d['log_N_ratio_hi']):.3g}], "
                         f"L*_2 - L*_3 = {d['L_diff']:+.4f} [{d['L_diff_lo']:+.4f}, {d['L_diff_hi']:+.4f}]{flag}")
        return "\n".join(lines)


def compare_approaches(isoflop: IsoFlopFit, joint: ChinchillaFit, compute, *, level: float | None = None,
                       flops_per_token_per_param: float = 6.0) -> ApproachComparison:
    """N*(C), D*(C), L*(C) from each approach at each ``compute`` and their disagreement.

    ``flops_per_token_per_param`` is k in C = k N D for both approaches' token counts
    (6 in the paper's accounting; read it off the data when FLOPs include attention)."""
    C = np.atleast_1d(np.asarray(compute, float))
    if not (C > 0).all():
        raise ValueError(f"compute must be positive, got {C.tolist()}")
    lv, k = level or joint.level, float(flops_per_token_per_param)
    # Approach 2: power laws of the slice minima (Eq. 26)
    N2, L2 = isoflop.power_P.predict(C), isoflop.power_L.predict(C)
    (N2lo, N2hi), (L2lo, L2hi) = isoflop.band_P(C, lv), isoflop.band_L(C, lv)
    # Approach 3: closed-form allocation of the joint surface (Hoffmann et al. App. D.2)
    N3, D3 = (np.atleast_1d(v) for v in joint.optimal_allocation(C, k))
    L3 = np.atleast_1d(joint.predict_optimal(C, k))
    L3lo, L3hi = (np.atleast_1d(v) for v in joint.band_optimal(C, lv, k))
    rows, dis = [], []
    bP, bL, bJ = isoflop.power_P.boot, isoflop.power_L.boot, joint.boot
    for i, c in enumerate(C):
        n2 = n3 = l2 = l3 = None
        if bP is not None and len(bP):
            n2, l2 = np.exp(bP[:, 0] + bP[:, 1] * math.log(c)), np.exp(bL[:, 0] + bL[:, 1] * math.log(c))
        if bJ is not None and len(bJ):
            n3 = optimal_allocation(bJ, np.array([c]), k)[0][:, 0]
            l3 = optimal_loss(bJ, np.array([c]), k)[:, 0]
        N3lo, N3hi = percentile_ci(n3, lv) if n3 is not None else (N3[i], N3[i])
        rows.append(dict(compute=c, approach="isoflop", N_opt=N2[i], N_lo=N2lo[i], N_hi=N2hi[i],
                         D_opt=c / (k * N2[i]), D_lo=c / (k * N2hi[i]), D_hi=c / (k * N2lo[i]),
                         L_opt=L2[i], L_lo=L2lo[i], L_hi=L2hi[i]))
        rows.append(dict(compute=c, approach="joint", N_opt=N3[i], N_lo=N3lo, N_hi=N3hi,
                         D_opt=D3[i], D_lo=c / (k * N3hi), D_hi=c / (k * N3lo),
                         L_opt=L3[i], L_lo=L3lo[i], L_hi=L3hi[i]))
        lr, ld = math.log(N2[i] / N3[i]), float(L2[i] - L3[i])
        lr_ci = ld_ci = (math.nan, math.nan)
        if n2 is not None and n3 is not None:  # independent fits: pair the draws as they come
            m = min(len(n2), len(n3))
            with np.errstate(invalid="ignore", divide="ignore"):
                lr_ci = percentile_ci(np.log(n2[:m] / n3[:m]), lv)
            ld_ci = percentile_ci(l2[:m] - l3[:m], lv)
        disagree = bool(not (lr_ci[0] <= 0 <= lr_ci[1]) or not (ld_ci[0] <= 0 <= ld_ci[1])) \
            if all(np.isfinite(lr_ci + ld_ci)) else False
        dis.append(dict(compute=c, log_N_ratio=lr, log_N_ratio_lo=lr_ci[0], log_N_ratio_hi=lr_ci[1],
                        log_D_ratio=-lr, L_diff=ld, L_diff_lo=ld_ci[0], L_diff_hi=ld_ci[1], disagree=disagree))
    return ApproachComparison(table=pd.DataFrame(rows), disagreement=pd.DataFrame(dis), level=lv,
                              flops_per_token_per_param=k)
