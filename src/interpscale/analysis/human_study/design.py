"""Input tables -> what a fitter needs: checks that name the offending rows and values, the
treatment-coded design matrices, and the parts the frequentist and Bayesian ordinal fits share
(Wald / odds-ratio tables, plain-text tables, X rebuilds for new data, category probabilities)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import expit, ndtr
from scipy.stats import norm

from interpscale.errors import UserError

LINKS = ("logit", "probit")
KINDS = ("zero", "conditional", "marginal")  # what a prediction conditions the random effects on


def check_link(link: str) -> str:
    if link not in LINKS:
        raise UserError(f"link must be 'logit' or 'probit', got {link!r}")
    return link


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise UserError(f"kind must be 'zero', 'conditional' or 'marginal', got {kind!r}")


def z_value(level: float) -> float:
    """Two-sided normal quantile for a ``level`` interval (0.95 -> 1.96)."""
    if not 0 < level < 1:
        raise UserError(f"level must be in (0, 1), got {level!r}")
    return float(norm.ppf(0.5 + level / 2))


def tail_names(level: float) -> tuple[str, str]:
    """Column heads of a ``level`` interval's ends: 0.95 -> ("2.5%", "97.5%")."""
    return f"{(1 - level) / 2:.1%}", f"{(1 + level) / 2:.1%}"


def wald(names: Sequence[str], est, se, zq: float) -> tuple[dict, dict, dict]:
    """Estimates, SEs and Wald intervals est -/+ zq se, keyed by ``names``."""
    coef = {n: float(b) for n, b in zip(names, est)}
    ses = {n: float(s) for n, s in zip(names, se)}
    return coef, ses, {n: (coef[n] - zq * ses[n], coef[n] + zq * ses[n]) for n in names}


def odds_ratios(coef: dict, ci: dict) -> tuple[dict, dict]:
    """exp of log-odds estimates and of their interval ends."""
    with np.errstate(over="ignore"):  # a separated level has |beta| and SE huge: OR inf
        return ({k: float(np.exp(b)) for k, b in coef.items()},
                {k: (float(np.exp(ci[k][0])), float(np.exp(ci[k][1]))) for k in coef})


def text_table(header: Sequence[str], rows: Sequence[Sequence], title: str = "") -> str:
    """A fixed-width table like statsmodels' summaries; floats get 4 significant decimals."""
    cells = [[f"{v:.4f}" if isinstance(v, (float, np.floating)) else str(v) for v in r] for r in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
    line = "  ".join(str(h).rjust(w) for h, w in zip(header, widths))
    rule = "-" * len(line)
    body = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join([*( [title] if title else []), rule, line, rule, *body, rule])


def design_rows(data: pd.DataFrame, coef_names: Sequence[str]) -> np.ndarray:
    """Rebuild fixed-effect columns named ``factor[level]`` (or a numeric covariate) for new data."""
    cols = []
    for name in coef_names:
        if name.endswith("]") and "[" in name:
            factor, level = name[:-1].split("[", 1)
            cols.append((data[factor].astype(str) == level).to_numpy(float))
        else:
            cols.append(data[name].to_numpy(float))
    return np.column_stack(cols) if cols else np.zeros((len(data), 0))


def _cdf(x: np.ndarray, link: str) -> np.ndarray:
    return expit(x) if check_link(link) == "logit" else ndtr(x)


def _probs(cum: np.ndarray) -> np.ndarray:
    """Pr(y = k) from Pr(y <= k), k < K: pad with 0 and 1 and difference."""
    ones = np.ones_like(cum[..., :1])
    return np.diff(np.concatenate([np.zeros_like(ones), cum, ones], axis=-1), axis=-1)


def category_probs(eta: np.ndarray, thresholds: np.ndarray, link: str = "logit") -> np.ndarray:
    """Pr(y = k) from Pr(y <= k) = F(tau_k - eta) (App. D.3); shapes (..., n) -> (..., n, K)."""
    return _probs(_cdf(thresholds[..., None, :] - eta[..., :, None], link))


def marginal_category_probs(eta: np.ndarray, thresholds: np.ndarray, sd, link: str = "logit",
                            n_nodes: int = 32) -> np.ndarray:
    """Population-averaged Pr(y = k): Pr(y <= k) = E_u F(tau_k - eta - u) over u ~ N(0, sd^2)
    by Gauss-Hermite quadrature; ``sd`` broadcasts against ``eta`` (per row or per draw)."""
    x, w = np.polynomial.hermite.hermgauss(n_nodes)
    sd = np.broadcast_to(np.asarray(sd, float), np.shape(eta))
    cum = 0.0
    for xi, wi in zip(x, w):
        u = np.sqrt(2.0) * sd * xi
        cum = cum + wi / np.sqrt(np.pi) * _cdf(thresholds[..., None, :] - (eta + u)[..., :, None], link)
    return _probs(cum)


RATING_COLUMNS = ("rater", "concept", "candidate_type", "label", "context", "rating")
PHASE1_COLUMNS = ("concept", "annotator", "name", "coherence")
SCALE = (1, 2, 3, 4, 5)
_SHOW = 8  # offending rows quoted in an error message


def _rows(index: Sequence, values: Sequence | None = None) -> str:
    items = list(index) if values is None else [f"{i} ({v!r})" for i, v in zip(index, values)]
    more = f" and {len(items) - _SHOW} more" if len(items) > _SHOW else ""
    return f"row(s) {', '.join(map(str, items[:_SHOW]))}{more}"


def require_columns(df: pd.DataFrame, columns: Sequence[str], what: str = "table") -> None:
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{what} must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise UserError(f"{what} is missing column(s) {missing}; it has {list(df.columns)}")


def require_no_missing(df: pd.DataFrame, columns: Sequence[str], what: str = "table") -> None:
    """NaN / None anywhere in ``columns`` is an error: nothing is silently dropped."""
    for col in columns:
        bad = df.index[df[col].isna()]
        if len(bad):
            raise UserError(f"{what}: column {col!r} has {len(bad)} missing value(s) at {_rows(bad)}; "
                            "drop or impute them explicitly before fitting")


def ordinal_codes(values: pd.Series, levels: Sequence, column: str, what: str = "table") -> np.ndarray:
    """Map an ordinal column onto 0..K-1; values outside ``levels`` raise, naming rows."""
    levels = list(levels)
    numeric = pd.api.types.is_numeric_dtype(values)
    keys = [float(v) for v in levels] if numeric else [str(v) for v in levels]
    as_key = values.astype(float) if numeric else values.astype(str)
    codes = as_key.map({k: i for i, k in enumerate(keys)})
    bad = values.index[codes.isna()]
    if len(bad):
        raise UserError(f"{what}: column {column!r} must take values in {levels}; "
                        f"found {_rows(bad, values.loc[bad].tolist())}")
    return codes.to_numpy(dtype=np.int64)


def validate_ratings(ratings: pd.DataFrame, *, reference: str = "human", min_rater_ratings: int = 2,
                     scale: Sequence[int] = SCALE) -> pd.DataFrame:
    """Check a long-format Phase 2 table and return a clean copy (string ids, int ratings).

    ``ValueError`` for a missing column or value (NaN), a rating outside ``scale`` or not whole,
    a ``reference`` absent from ``candidate_type``, a rater with fewer than ``min_rater_ratings``
    ratings (their random intercept rests on the prior alone; 1 keeps them deliberately)."""
    what = "ratings"
    require_columns(ratings, RATING_COLUMNS, what)
    require_no_missing(ratings, RATING_COLUMNS, what)
    df = ratings.copy()
    df["rating"] = np.asarray(scale)[ordinal_codes(df["rating"], scale, "rating", what)]
    for col in ("rater", "concept", "candidate_type", "label", "context"):
        df[col] = df[col].astype(str)
    types = sorted(df["candidate_type"].unique())
    if reference not in types:
        raise UserError(f"{what}: reference level {reference!r} not found in column 'candidate_type' "
                        f"(levels: {types})")
    if len(types) < 2:
        raise UserError(f"{what}: need at least two candidate types, found {types}")
    counts = df.groupby("rater").size()
    thin = counts[counts < min_rater_ratings]
    if len(thin):
        rows = df.index[df["rater"].isin(thin.index)]
        raise UserError(f"{what}: rater(s) {sorted(thin.index)} have fewer than {min_rater_ratings} "
                        f"ratings ({_rows(rows)}); their random intercept would rest on the prior alone. "
                        "Remove them, or keep them with --min-rater-ratings 1.")
    return df


def validate_phase1(phase1: pd.DataFrame, *, scale: Sequence[int] = SCALE) -> pd.DataFrame:
    """Check a Phase 1 table (concept, annotator, name, coherence); ``name`` may be empty."""
    what = "phase1"
    require_columns(phase1, PHASE1_COLUMNS, what)
    require_no_missing(phase1, ("concept", "annotator", "coherence"), what)
    df = phase1.copy()
    df["coherence"] = np.asarray(scale)[ordinal_codes(df["coherence"], scale, "coherence", what)]
    df[["concept", "annotator"]] = df[["concept", "annotator"]].astype(str)
    dup = df.index[df.duplicated(["concept", "annotator"], keep=False)]
    if len(dup):
        raise UserError(f"{what}: an annotator rated the same concept twice at {_rows(dup)}")
    return df


RANDOM = ("rater", "concept", "context", "label")  # App. D.3's crossed random intercepts


@dataclass(frozen=True)
class Design:
    """Everything a fitter needs, decoupled from column names: ``X`` has one column per
    coefficient (treatment contrasts, numeric covariates as given; no intercept: the ordinal
    thresholds absorb it), ``groups`` maps each random factor to ``(codes, level_names)``."""

    y: np.ndarray  # (n,) ordinal codes 0..K-1
    levels: tuple
    X: np.ndarray  # (n, p)
    coef_names: tuple[str, ...]
    groups: dict[str, tuple[np.ndarray, tuple[str, ...]]]
    index: pd.Index

    @property
    def n(self) -> int:
        return len(self.y)


def coef_name(factor: str, level: str) -> str:
    return f"{factor}[{level}]"


def parse_random(spec: str | Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Random-effect terms -> ``{group: slope factors}``: ``"rater"`` (or R's ``"(1|rater)"``) a
    random intercept, ``"candidate_type|rater"`` intercept plus random slopes of a fixed factor
    (R ``(candidate_type | rater)``). A string is split on commas (``--random rater,concept``)."""
    terms = [t for t in spec.split(",")] if isinstance(spec, str) else list(spec)
    out: dict[str, tuple[str, ...]] = {}
    for raw in terms:
        term = str(raw).strip().strip("()").replace(" ", "")
        if not term:
            continue
        lhs, _, group = term.rpartition("|")
        slopes = tuple(s for s in lhs.split("+") if s and s not in ("1", "0"))
        if not group or "|" in lhs:
            raise UserError(f"random-effect term {raw!r} not understood; use 'group', '1|group' or 'factor|group'")
        if group in out:
            raise UserError(f"grouping factor {group!r} appears twice in the random effects {list(terms)}")
        out[group] = slopes
    return out


def random_formula(response: str, fixed: Sequence[str], random: Mapping[str, Sequence[str]]) -> str:
    """The R formula of a model, e.g. ``rating ~ temp + contact + (1|judge)``."""
    terms = [*fixed] or ["1"]
    terms += [f"({' + '.join(s) if s else '1'}|{g})" for g, s in random.items()]
    return f"{response} ~ " + " + ".join(terms)


def build_design(data: pd.DataFrame, *, response: str, fixed: Sequence[str], random: Sequence[str] = (),
                 reference: Mapping[str, str] | None = None, levels: Sequence = (1, 2, 3, 4, 5)) -> Design:
    """Treatment-code ``fixed`` factors (baseline: the ``reference`` level, which must occur, else
    the first sorted; numeric columns enter as covariates) and index ``random`` factors."""
    reference = dict(reference or {})
    fixed, random = list(fixed), list(random)
    require_columns(data, [response, *fixed, *random], "data")
    require_no_missing(data, [response, *fixed, *random], "data")
    unknown = set(reference) - set(fixed)
    if unknown:
        raise UserError(f"reference given for {sorted(unknown)}, which are not fixed effects {fixed}")
    y = ordinal_codes(data[response], levels, response, "data")
    cols, names = [], []
    for factor in fixed:
        col = data[factor]
        if pd.api.types.is_numeric_dtype(col) and factor not in reference:
            cols.append(col.to_numpy(float))
            names.append(factor)
            continue
        col = col.astype(str)
        present = sorted(col.unique())
        ref = str(reference.get(factor, present[0]))
        if ref not in present:
            raise UserError(f"reference level {ref!r} not found in column {factor!r} (levels: {present})")
        for level in present:
            if level != ref:
                cols.append((col == level).to_numpy(float))
                names.append(coef_name(factor, level))
    X = np.column_stack(cols) if cols else np.zeros((len(data), 0))
    factorized = {g: pd.factorize(data[g].astype(str), sort=True) for g in random}
    groups = {g: (codes.astype(np.int64), tuple(uniques)) for g, (codes, uniques) in factorized.items()}
    return Design(y=y, levels=tuple(levels), X=X, coef_names=tuple(names), groups=groups, index=data.index)


def ordinal_design(data: pd.DataFrame, *, response: str, fixed: Sequence[str], random: str | Sequence[str],
                   reference: Mapping[str, str] | None, levels: Sequence, link: str
                   ) -> tuple[Design, dict[str, tuple[str, ...]]]:
    """What both ordinal fits check and build: the link, the random terms (``parse_random``)
    and the design, ``candidate_type`` against ``human`` unless ``reference`` says otherwise."""
    check_link(link)
    terms = parse_random(random)
    if reference is None:
        reference = {"candidate_type": "human"} if "candidate_type" in fixed else {}
    return build_design(data, response=response, fixed=fixed, random=list(terms), reference=reference,
                        levels=levels), terms
