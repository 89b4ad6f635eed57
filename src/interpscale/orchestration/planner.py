"""IsoFLOP planner: slice targets x sizes -> RunSpecs with C = M·D within tolerance (§8.1, App. G).

For each (family, slice C, size): M = flops_per_token (Eq. 23 / Eq. 24), D = C / M rounded
to whole batches, achieved C = M·D.  A point is infeasible when D is under one batch, when
the rounding misses the slice by more than ``tolerance``, or (when sizes are chosen
automatically) when D/P lies outside ``tokens_per_param``.
"""

from __future__ import annotations

import logging
import math
import os
import sysconfig
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from interpscale.orchestration.config_schema import validate_config
from interpscale.orchestration.spec import RunSpec

log = logging.getLogger(__name__)

# presets: the checkout's configs/ (source tree, editable install), else the copy a wheel
# installs under <prefix>/share/interpscale/configs (pyproject data-files)
CONFIG_DIR = Path(__file__).resolve().parents[3] / "configs"
INSTALLED_CONFIG_DIR = Path(sysconfig.get_path("data")) / "share" / "interpscale" / "configs"


def _config_dir() -> Path:
    return CONFIG_DIR if CONFIG_DIR.is_dir() else INSTALLED_CONFIG_DIR


_TRAIN_KEYS = {"seed", "lr", "betas", "eps", "weight_decay", "grad_clip", "warmup_max_steps", "warmup_frac",
               "decay_frac", "reservoir", "vocab_size", "val_fraction", "eval_batches", "log_every"}


def list_presets() -> list[str]:
    return sorted(p.stem for p in _config_dir().glob("*.toml"))


def load_preset(name_or_path: str | os.PathLike) -> dict[str, Any]:
    """A preset by name (``configs/<name>.toml``) or a path to any TOML file."""
    p = Path(name_or_path)
    if not p.suffix:
        p = _config_dir() / f"{name_or_path}.toml"
    if not p.is_file():
        raise ValueError(f"unknown preset {str(name_or_path)!r}; available: {list_presets()} (or a .toml path)")
    with open(p, "rb") as f:
        try:
            cfg = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"preset {p} is not valid TOML: {exc}") from exc
    if isinstance(cfg.get("data"), dict):  # data paths are relative to the TOML, not the working directory
        from interpscale.data.loaders import resolve_data_paths

        cfg["data"] = resolve_data_paths(cfg["data"], p.resolve().parent)
    return cfg


@dataclass
class Plan:
    """The planned RunSpecs plus the dry-run table (one row per candidate point)."""

    runs: list[RunSpec]
    table: pd.DataFrame
    launch: dict[str, Any]
    device: dict[str, Any] = field(default_factory=dict)  # name, peak, mfu, rate, how

    def summary(self) -> str:
        cols = ["family", "size", "P", "n_concepts", "M", "M_head", "C_target", "D", "steps", "C_err_pct",
                "tokens_per_param", "est_runtime_s", "status"]
        t = self.table[[c for c in cols if c in self.table.columns]].copy()
        for c in ("P", "M", "M_head", "C_target", "D"):
            t[c] = t[c].map(lambda v: f"{v:.3g}")
        t["C_err_pct"] = t["C_err_pct"].map(lambda v: f"{v:+.2f}")
        if "n_concepts" in t:
            t["n_concepts"] = t["n_concepts"].map(lambda v: f"{int(v)}" if v else "-")
        t["tokens_per_param"] = t["tokens_per_param"].map(lambda v: f"{v:.3g}")
        t["est_runtime_s"] = t["est_runtime_s"].map(_fmt_seconds)
        ok = self.table[self.table.status == "ok"]
        total = ok["est_runtime_s"].sum()
        c_model, c_head = ok["C_achieved"].sum(), (ok["M_head"] * ok["D"]).sum()
        lines = [t.to_string(index=False),
                 "M: Eq. 23/24 FLOPs per token (no LM head); M_head: LM-head matmul FLOPs per token (6·d·V), "
                 "computed in training but outside Eq. 23",
                 f"{len(self.runs)} runs; {c_model:.3g} FLOPs (Eq. 23/24) + {c_head:.3g} LM-head FLOPs"]
        dev = self.device
        if dev.get("name") and dev["name"] != "cpu":
            lines.append(f"estimated {total / 3600:,.0f} {dev['name'].upper()}-hours at {dev['mfu']:.0%} MFU "
                         f"({dev['peak'] / 1e12:.0f} TFLOP/s dense bf16 peak; runtime counts LM-head FLOPs)")
        else:
            lines.append(f"estimated total {_fmt_seconds(total)} at {dev.get('rate', float('nan')):.3g} FLOP/s "
                         f"({dev.get('how', 'given')})")
        return "\n".join(lines)


def _fmt_seconds(s: float) -> str:
    if not math.isfinite(s):
        return "-"
    for unit, div in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= div:
            return f"{s / div:.1f}{unit}"
    return f"{s:.1f}s"


def machine_flops_per_s(efficiency: float = 0.3) -> float:
    """A rough sustained training FLOP/s for this machine: a timed matmul x ``efficiency``."""
    from interpscale.orchestration.devices import cpu_peak_flops

    return cpu_peak_flops() * efficiency


def data_concept_count(source: dict) -> int | None:
    """Concepts a data source states it will give the model (training uses the data's count),
    without building it: a synthetic corpus's explicit ``n_concepts``, the cards of a
    ``concepts`` file; None when the source does not say."""
    kind = source.get("kind", "synthetic")
    if kind == "synthetic":
        return int(source["n_concepts"]) if "n_concepts" in source else None
    if source.get("concepts"):
        from interpscale.data.corpus import read_concepts

        try:
            return len(read_concepts(source["concepts"]))
        except (OSError, ValueError) as exc:
            raise ValueError(f"data concepts file {source['concepts']!r}: {exc}") from exc
    return None


def lm_head_flops(family: str, size: str, **overrides: Any) -> float:
    """Forward + backward FLOPs per token of the d x V LM head (2dV + 4dV), which Eq. 23 leaves out."""
    from interpscale.models.config import make_config

    cfg = make_config(family, size, **overrides)
    return 6.0 * cfg.d_model * cfg.vocab_size


def plan(preset: str | os.PathLike | None = None, *, families: Sequence[str] | None = None,
         slices: dict[str, Sequence[float]] | Sequence[float] | None = None, sizes: Sequence[str] | None = None,
         seq_len: int | None = None, batch_tokens: int | None = None, tolerance: float | None = None,
         tokens_per_param: tuple[float, float] | None = None, max_sizes_per_slice: int | None = None,
         flops_per_s: float | None = None, device: str | None = None, mfu: float | None = None,
         strict: bool = True, size_presets: dict[str, dict] | None = None, **train: Any) -> Plan:
    """Plan an IsoFLOP sweep.  Explicit arguments override the preset's values.

    ``slices`` is a list of targets shared by all families or a ``{family: [C, ...]}``
    dict.  ``sizes`` given explicitly are all planned (infeasible ones flagged); when
    taken from a preset, only those with D/P inside ``tokens_per_param`` are kept, at most
    ``max_sizes_per_slice`` (closest in log D/P to the window's centre).  ``size_presets``
    adds named sizes to the preset's ``[size_presets]`` (e.g. the adaptive sweep's ladder).  With ``strict``
    a slice left with no feasible size raises ``ValueError``.

    Models are priced as trained: the data source's concept count (``data_concept_count``)
    and the training vocabulary.  Runtime is (Eq. 23/24 + LM-head FLOPs) / (``device``'s
    dense bf16 peak x ``mfu``); ``device`` is ``h100 | a100 | cpu`` (cpu: a timed matmul),
    defaulting to h100 for presets launched on GPUs and cpu otherwise; ``flops_per_s``
    overrides the rate.
    """
    from interpscale import paper
    from interpscale.models import FAMILIES, SIZES, flops_per_token, params_nonembedding
    from interpscale.models.config import make_config

    cfg = validate_config(load_preset(preset), preset) if preset is not None else {}
    p = dict(cfg.get("plan", {}))
    explicit_sizes = sizes is not None
    families = list(families or p.get("families") or [])
    slices = slices if slices is not None else p.get("slices")
    sizes = list(sizes or p.get("sizes") or [])
    seq_len = int(seq_len or p.get("seq_len", paper.SEQ_LEN))
    batch_tokens = int(batch_tokens or p.get("batch_tokens", paper.BATCH_TOKENS))
    tolerance = float(tolerance if tolerance is not None else p.get("tolerance", paper.SLICE_TOLERANCE))
    window = tuple(tokens_per_param or p.get("tokens_per_param", (0.0, math.inf)))
    max_sizes = int(max_sizes_per_slice or p.get("max_sizes_per_slice", 0)) or None
    overrides = dict(cfg.get("model", {}))
    train_kw = {**cfg.get("train", {}), **train}
    bad = set(train_kw) - _TRAIN_KEYS
    if bad:
        raise ValueError(f"unknown training option(s) {sorted(bad)}; allowed: {sorted(_TRAIN_KEYS)}")
    data = dict(cfg.get("data", {"kind": "synthetic"}))
    n_data = data_concept_count(data)
    if n_data is not None and "n_concepts" in overrides and int(overrides["n_concepts"]) != n_data:
        raise ValueError(f"[model] n_concepts = {overrides['n_concepts']} but the data source has {n_data} "
                         f"concepts; training uses the data's count, so the plan would price another model")
    if n_data is None and any(FAMILIES[f].is_concept for f in families if f in FAMILIES):
        log.warning("the data source does not state its concept count; concept modules are priced at the "
                    "model's n_concepts, while training uses however many concepts the data has")
    priced = {**({"n_concepts": n_data} if n_data is not None else {}),
              **({"vocab_size": int(train_kw["vocab_size"])} if "vocab_size" in train_kw else {})}

    if not families:
        raise ValueError("no families to plan (pass families=... or a preset)")
    for f in families:
        if f not in FAMILIES:
            raise ValueError(f"unknown family {f!r}; registered: {sorted(FAMILIES)}")
    custom = {k: dict(v) for k, v in {**cfg.get("size_presets", {}), **(size_presets or {})}.items()}
    for name, c in custom.items():
        if c.get("base") not in SIZES:
            raise ValueError(f"size preset {name!r}: base {c.get('base')!r} is not one of {sorted(SIZES)}")
    for s in sizes:
        if s not in SIZES and s not in custom:
            raise ValueError(f"unknown size {s!r}; presets: {sorted(SIZES) + sorted(custom)}")

    def size_args(size: str) -> tuple[str, dict]:
        if size in custom:
            c = custom[size]
            return c["base"], {**overrides, **{k: v for k, v in c.items() if k != "base"}}
        return size, overrides
    if not sizes:
        raise ValueError("no sizes to plan (pass sizes=... or a preset)")
    if slices is None:
        raise ValueError("no slice targets (pass slices=... or a preset)")
    if batch_tokens % seq_len:
        raise ValueError(f"batch_tokens={batch_tokens} is not a multiple of seq_len={seq_len}")
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance}")
    per_family = {f: list(slices[f] if isinstance(slices, dict) else slices) for f in families
                  if not isinstance(slices, dict) or f in slices}
    missing = [f for f in families if f not in per_family]
    if missing:
        raise ValueError(f"no slice targets for famil{'ies' if len(missing) > 1 else 'y'} {missing}")
    from interpscale.orchestration.devices import PLAN_DEVICES, sustained_flops

    launch_cfg = dict(cfg.get("launch", {}))
    device = device or ("h100" if launch_cfg.get("gpus_per_node") else "cpu")
    if flops_per_s:
        rate, dev_info = float(flops_per_s), {"name": None, "rate": float(flops_per_s), "how": "given"}
    else:
        rate, u = sustained_flops(device, mfu)
        dev_info = {"name": device, "peak": PLAN_DEVICES[device]["peak"] if device != "cpu" else rate / u,
                    "mfu": u, "rate": rate, "how": f"{device}, {u:.0%} of a timed matmul" if device == "cpu"
                    else f"{device}"}

    rows, runs = [], []
    for family in families:
        for c_target in per_family[family]:
            c_target = float(c_target)
            if not c_target > 0:
                raise ValueError(f"{family}: slice target must be positive, got {c_target}")
            cands = []
            for size in sizes:
                base, kw = size_args(size)
                kw_priced = {**kw, **priced}  # as trained: the data's concepts, the training vocabulary
                P = params_nonembedding(family, base, **kw_priced)
                M = flops_per_token(family, base, seq_len, **kw_priced)
                head = lm_head_flops(family, base, **kw_priced)
                n_concepts = make_config(family, base, **kw_priced).n_concepts if FAMILIES[family].is_concept else 0
                steps = round(c_target / M / batch_tokens)
                D = steps * batch_tokens
                achieved = M * D
                err = (achieved - c_target) / c_target
                tpp = D / P
                status = "ok"
                if steps < 1:
                    status = f"infeasible: D={c_target / M:.3g} < one batch ({batch_tokens})"
                elif abs(err) > tolerance:
                    status = f"infeasible: C off by {100 * err:+.1f}% (> {100 * tolerance:.0f}%)"
                elif not explicit_sizes and not window[0] <= tpp <= window[1]:
                    status = f"skipped: D/P={tpp:.3g} outside {window}"
                cands.append(dict(family=family, size=size, P=P, n_concepts=n_concepts, M=M, M_head=head,
                                  C_target=c_target, D=D, steps=steps, C_achieved=achieved, C_err_pct=100 * err,
                                  tokens_per_param=tpp, C_with_head=(M + head) * D,
                                  est_runtime_s=(M + head) * D / rate if steps else math.nan, status=status))
            ok = [r for r in cands if r["status"] == "ok"]
            if max_sizes and len(ok) > max_sizes:
                centre = math.sqrt(max(window[0], 1e-9) * window[1]) if math.isfinite(window[1]) else 20.0
                ok.sort(key=lambda r: abs(math.log(r["tokens_per_param"] / centre)))
                for r in ok[max_sizes:]:
                    r["status"] = f"skipped: more than {max_sizes} sizes in slice"
                ok = ok[:max_sizes]
            if not ok and strict:
                raise ValueError(f"{family}: no size fits slice C={c_target:.3g} "
                                 f"(sizes {sizes}; {[r['status'] for r in cands]})")
            rows.extend(cands)
            for r in ok:
                runs.append(RunSpec(family=family, size=r["size"], slice_flops=c_target, flops=r["C_achieved"],
                                    params=r["P"], tokens=r["D"], seq_len=seq_len, batch_tokens=batch_tokens,
                                    flops_per_token=r["M"], base_size=size_args(r["size"])[0] if r["size"] in custom
                                    else "", model_overrides=size_args(r["size"])[1], data=data, **train_kw))
    return Plan(runs=runs, table=pd.DataFrame(rows), launch=launch_cfg, device=dev_info)


def specs_table(runs: Iterable[RunSpec]) -> pd.DataFrame:
    """One row per RunSpec with the results-table column names (plus run_id, steps)."""
    return pd.DataFrame([{"run_id": r.run_id, "family": r.family, "size": r.size, "slice_flops": r.slice_flops,
                          "flops": r.flops, "params": r.params, "tokens": r.tokens, "seq_len": r.seq_len,
                          "steps": r.steps} for r in runs])
