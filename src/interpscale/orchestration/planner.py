"""IsoFLOP planner: slice targets x sizes -> RunSpecs with C = M·D within tolerance (§8.1, App. G).

For each (family, slice C, size): M = flops_per_token (Eq. 23 / Eq. 24), D = C / M rounded
to whole batches, achieved C = M·D.  A point is infeasible when D is under one batch, when
the rounding misses the slice by more than ``tolerance``, or (when sizes are chosen
automatically) when D/P lies outside ``tokens_per_param``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd

from interpscale.data.corpus import read_concepts
from interpscale.data.loaders import describe, read_meta
from interpscale.errors import ConfigError, FailedWork, UserError
from interpscale.data.tokenizer import load_tokenizer
from interpscale.models import FAMILIES, SIZES, params_nonembedding
from interpscale.models import plugins as plugin_modules
from interpscale.models.pricing import model_config, price
from interpscale.models.protocol import DataFields
from interpscale.models.registry import accepted, family_overrides
from interpscale.orchestration import runtime
from interpscale.orchestration.config import LaunchConfig, Preset, deprecated
from interpscale.orchestration.outcome import own_code_error
from interpscale.orchestration.spec import RunSpec

log = logging.getLogger(__name__)

VOCAB_RANGE = (256, 32_768)  # the default vocabulary's bounds (docs/training.md)


@dataclass
class Plan:
    """The planned RunSpecs plus the dry-run table (one row per candidate point)."""

    runs: list[RunSpec]
    table: pd.DataFrame
    launch: dict[str, Any]  # the [launch] table as a dict (config.launch is the typed section)
    device: dict[str, Any] = field(default_factory=dict)  # name, peak, mfu, rate, how
    estimate: dict[str, Any] = field(default_factory=dict)  # runs {run_id: s}, wall_s, ... (runtime.py)
    config: Preset | None = None  # the preset's tree: its sections go to the sweep and the trainers

    def summary(self) -> str:
        fmt = runtime.fmt_seconds
        cols = ["family", "size", "P", "n_concepts", "M", "pricing", "M_head", "C_target", "D", "steps", "C_err_pct",
                "tokens_per_param", "est_runtime_s", "status"]
        t = self.table[[c for c in cols if c in self.table.columns]].copy()
        sig3 = ("P", "M", "M_head", "C_target", "D", "tokens_per_param")
        formats = {**dict.fromkeys(sig3, "{:.3g}".format), "C_err_pct": "{:+.2f}".format,
                   "n_concepts": lambda v: f"{int(v)}" if v else "-", "est_runtime_s": fmt}
        for c in set(formats) & set(t.columns):
            t[c] = t[c].map(formats[c])
        ok = self.table[self.table.status == "ok"]
        total, dev, e = ok["est_runtime_s"].sum(), self.device, self.estimate
        lines = [t.to_string(index=False),
                 "M: Eq. 23/24 FLOPs per token (no LM head); M_head: LM-head matmul FLOPs per token (6·d·V), "
                 "computed in training but outside Eq. 23; pricing: 'analytic' (the family's formulas) or "
                 "'measured' (counted on the meta device) or 'measured-cpu' (counted in a real CPU forward: "
                 "the model reads a value the meta device lacks; docs/own-model.md)",
                 f"{len(self.runs)} runs; {ok['C_achieved'].sum():.3g} FLOPs (Eq. 23/24) + "
                 f"{(ok['M_head'] * ok['D']).sum():.3g} LM-head FLOPs"]
        if dev.get("name") and dev["name"] != "cpu":
            lines.append(f"estimated {total / 3600:,.0f} {dev['name'].upper()}-hours at {dev['mfu']:.0%} MFU "
                         f"({dev['peak'] / 1e12:.0f} TFLOP/s dense bf16 peak; runtime counts LM-head FLOPs)")
        elif dev.get("name") == "cpu":
            lines.append(f"estimated total {fmt(total)} of training steps ({dev['how']}; mean of "
                         f"timed steps, spread up to {e.get('max_spread', 0.0):.0%})")
        else:
            lines.append(f"estimated total {fmt(total)} at {dev.get('rate', float('nan')):.3g} FLOP/s "
                         f"({dev.get('how', 'given')})")
        if e:
            lines.append(f"estimated sweep wall time {fmt(e['wall_s'])}: every run with its anneal branches, "
                         f"evaluation and fixed costs ({fmt(sum(e['runs'].values()))} in all), "
                         f"{e['max_parallel']} job(s) at a time, {e['runs_per_job']} run(s) per job, "
                         f"{e['job_start_s']:.1f} s start-up per job")
        return "\n".join(lines)


def data_counts(source: dict) -> tuple[int | None, int | None]:
    """(concept count, tokenizer vocabulary) a data source fixes, read without preparing it:
    prepared data's meta.json, a synthetic corpus's explicit ``n_concepts``, the cards of a
    ``concepts`` file, a given tokenizer file; None where the source does not say (a
    tokenizer still to be trained has the training ``vocab_size``)."""
    kind = source.get("kind", "synthetic")
    if kind == "synthetic":
        return (int(source["n_concepts"]) if "n_concepts" in source else None), None
    what = source.get("path") or ""
    try:
        if kind == "prepared":
            info = describe(what)
            return info.n_concepts, info.vocab_size
        what = source.get("concepts")
        n = len(read_concepts(what)) if what else None
        what = source.get("tokenizer")
        return n, load_tokenizer(what).get_vocab_size() if what else None
    except OSError as exc:
        raise UserError(f"data {what!r}: {exc}") from exc


def default_vocab_size(g: "_Grid") -> int:
    """The largest power of two V with V·d ≤ P for the largest planned model (its embedding no
    bigger than its non-embedding part, so the LM head does not dominate the small models'
    compute), within ``VOCAB_RANGE``: the vocabulary when neither the preset nor the data sets one."""
    best = 0.0
    for size in g.sizes:
        for family in g.families:
            kw = {k: v for k, v in g.size_args(size, family).items() if k != "vocab_size"}
            d = getattr(model_config(family, size, **kw), "d_model", None)
            if d:
                best = max(best, params_nonembedding(family, size, **kw) / d)
    v = 2 ** int(math.floor(math.log2(max(best, 1.0))))
    return int(min(max(v, VOCAB_RANGE[0]), VOCAB_RANGE[1]))


def slice_targets(families: Sequence[str], slices) -> dict[str, list[float]]:
    """``{family: [C, ...]}`` from targets shared by all families or a ``{family: [C, ...]}`` table."""
    per = {f: [float(c) for c in (slices[f] if isinstance(slices, dict) else slices)] for f in families
           if not isinstance(slices, dict) or f in slices}
    if missing := [f for f in families if f not in per]:
        raise ConfigError(f"no slice targets for famil{'ies' if len(missing) > 1 else 'y'} {missing}")
    return per


def window_centre(window: Sequence[float]) -> float:
    """The geometric centre of a ``tokens_per_param`` window; 20 (Chinchilla's) when open-ended."""
    return math.sqrt(max(window[0], 1e-9) * window[1]) if math.isfinite(window[1]) else 20.0


@dataclass
class _Grid:
    """A plan's resolved options (explicit arguments over the preset's values)."""

    families: list[str]
    slices: dict[str, list[float]]
    sizes: list[str]
    explicit_sizes: bool
    seq_len: int
    batch_tokens: int
    tolerance: float
    window: tuple[float, float]
    max_sizes: int | None
    overrides: dict[str, Any]  # the preset's [model] table: shared keys and [model.<family>] tables
    custom: dict[str, dict]
    train: dict[str, Any]
    data: dict[str, Any]
    launch: LaunchConfig
    plugins: tuple[str, ...] = ()

    def size_args(self, size: str, family: str) -> dict:
        """``family``'s model overrides at ``size``: its [model] keys, then the keys of its
        [size_presets] entry that its config accepts (the entry is a models.SIZES preset, _grid)."""
        kw = family_overrides(self.overrides, family)
        if size in self.custom:
            return {**kw, **accepted(family, {k: v for k, v in self.custom[size].items() if k != "base"})}
        return kw


def _grid(tree: Preset, all_sizes: bool) -> _Grid:
    """A plan's settings from the checked tree (``Preset.load`` checked names, ranges and the
    batch); what a preset may leave out is checked here."""
    p = tree.plan
    plugin_modules.load_plugins(p.plugins)  # before any family is looked up (a tree built in code)
    g = _Grid(families=list(p.families), slices={}, sizes=list(p.sizes), explicit_sizes=all_sizes,
              seq_len=int(p.seq_len), batch_tokens=int(p.batch_tokens), tolerance=float(p.tolerance),
              window=tuple(p.tokens_per_param or (0.0, math.inf)), max_sizes=int(p.max_sizes_per_slice) or None,
              overrides=dict(tree.model), train=tree.recipe.given(),
              custom={k: dict(v) for k, v in tree.size_presets.items()}, data=dict(tree.data), launch=tree.launch,
              plugins=tuple(plugin_modules.LOADED))  # with --plugin's: plugin families' runs record them
    for name, c in g.custom.items():  # [size_presets]: sizes by their own name (builders, spec.json, checkpoints)
        SIZES.define(name, c["base"], **{k: v for k, v in c.items() if k != "base"})
    if not g.families:
        raise ConfigError("no families to plan (pass families=... or a preset)")
    if not g.sizes:
        raise ConfigError("no sizes to plan (pass sizes=... or a preset)")
    if p.slices is None:
        raise ConfigError("no slice targets (pass slices=... or a preset)")
    g.slices = slice_targets(g.families, p.slices)
    return g


def _data_fields(g: _Grid) -> dict[str, int]:
    """What the data decides of the models the plan prices (its concept count, the training
    vocabulary), checked against ``[model]`` before anything trains."""
    n_data, v_data = data_counts(g.data)
    where = "the prepared data (meta.json)" if g.data.get("kind") == "prepared" else "the data source"
    if n_data is not None and "n_concepts" in g.overrides and int(g.overrides["n_concepts"]) != n_data:
        raise ConfigError(f"[model] n_concepts = {g.overrides['n_concepts']} but {where} has {n_data} "
                          f"concepts; training uses the data's count, so the plan would price another model")
    if n_data is None and any(FAMILIES[f].is_concept for f in g.families):
        log.warning("the data source does not state its concept count; concept modules are priced at the "
                    "model's n_concepts, while training uses however many concepts the data has")
    vocab = g.train.get("vocab_size", g.overrides.get("vocab_size"))
    if v_data is not None and vocab is not None and int(vocab) < v_data:
        raise ConfigError(f"vocab_size = {vocab} but the tokenizer of {where} has {v_data} tokens; "
                          f"the model's vocabulary must hold every token (set [train] vocab_size >= {v_data})")
    if vocab is None:  # the model's vocabulary is the data's when it has one, else the rule's
        vocab = v_data if v_data is not None else default_vocab_size(g)
        g.train["vocab_size"] = int(vocab)
    return {**({"n_concepts": n_data} if n_data is not None else {}), "vocab_size": int(vocab)}


def _priced_args(g: _Grid, family: str, size: str, priced: dict) -> dict:
    """The build arguments as trained: the data's fields (concepts, the training vocabulary)
    through ``data=``, the family's overrides beside them."""
    data = DataFields(vocab_size=priced.get("vocab_size"), n_concepts=priced.get("n_concepts"))
    return {"data": data, **{k: v for k, v in g.size_args(size, family).items() if k not in priced}}


def _candidate(g: _Grid, family: str, size: str, c_target: float, priced: dict) -> dict[str, Any]:
    """One (family, slice, size) point: its price (Eq. 23/24 or measured, the LM head), D and status."""
    try:
        pr = price(family, size, g.seq_len, **_priced_args(g, family, size, priced))
    except Exception as exc:  # a plugin's own builder or loss, run by the pricing: named as such
        own = own_code_error(family, g.plugins, exc)
        if own is None:
            raise
        raise FailedWork(f"pricing {family} size {size}: {own}") from exc
    P, M = pr.params, pr.flops_per_token
    steps = round(c_target / M / g.batch_tokens)
    D = steps * g.batch_tokens
    err, tpp = (M * D - c_target) / c_target, D / P
    status = "ok"
    if steps < 1:
        status = f"infeasible: D={c_target / M:.3g} < one batch ({g.batch_tokens})"
    elif abs(err) > g.tolerance:
        status = f"infeasible: C off by {100 * err:+.1f}% (> {100 * g.tolerance:.0f}%)"
    elif not g.explicit_sizes and not g.window[0] <= tpp <= g.window[1]:
        status = f"skipped: D/P={tpp:.3g} outside {g.window}"
    return dict(family=family, size=size, P=P, n_concepts=pr.n_concepts, M=M, M_head=pr.head_flops,
                C_target=c_target, D=D, steps=steps, C_achieved=M * D, C_err_pct=100 * err,
                tokens_per_param=tpp, C_with_head=(M + pr.head_flops) * D, est_runtime_s=math.nan,
                est_run_s=math.nan, status=status, pricing=pr.how)


def _choose(g: _Grid, cands: list[dict], strict: bool) -> list[dict]:
    """The slice's planned points: the feasible ones, at most ``max_sizes`` closest in log
    D/P to the window's centre (the others marked skipped)."""
    ok = [r for r in cands if r["status"] == "ok"]
    if g.max_sizes and len(ok) > g.max_sizes:
        ok.sort(key=lambda r: abs(math.log(r["tokens_per_param"] / window_centre(g.window))))
        for r in ok[g.max_sizes:]:
            r["status"] = f"skipped: more than {g.max_sizes} sizes in slice"
        ok = ok[:g.max_sizes]
    if not ok and strict and cands:
        raise UserError(f"{cands[0]['family']}: no size fits slice C={cands[0]['C_target']:.3g} "
                        f"(sizes {g.sizes}; {[r['status'] for r in cands]})")
    return ok


@dataclass(frozen=True)
class PlanOptions:
    """How a plan is made (the command's options; the preset says what is planned): its
    runtime estimate (``device``'s dense peak x ``mfu``, or ``flops_per_s``; else timed CPU
    steps), ``strict`` (a slice with no feasible size raises), ``all_sizes`` (every
    ``[plan]`` size planned, infeasible ones flagged, as for ``--sizes``; else only those with
    D/P inside ``tokens_per_param``) and ``force`` (plan runs longer than a year)."""

    flops_per_s: float | None = None
    device: str | None = None
    mfu: float | None = None
    strict: bool = True
    all_sizes: bool = False
    force: bool = False


def split_keywords(preset: "str | os.PathLike | Preset | None", options: PlanOptions | None,
                   keywords: dict[str, Any]) -> tuple[Preset, PlanOptions]:
    """The tree and the options of a ``plan`` call, with the keywords of the earlier
    ``plan(preset, families=..., flops_per_s=..., lr=...)`` (kept one release: one deprecation
    line) as ``Preset.load`` overrides and ``PlanOptions`` fields."""
    options = options or PlanOptions()
    if not keywords:
        return Preset.load(preset if preset is not None else Preset()), options
    own = {f.name for f in dataclasses.fields(PlanOptions)}
    opts = {k: keywords.pop(k) for k in list(keywords) if k in own}
    deprecated("plan(preset, <setting or option>=...)",
               "plan(Preset.load(preset, <setting>=...), PlanOptions(<option>=...))")
    if keywords.get("sizes") is not None:  # sizes given are all planned
        opts.setdefault("all_sizes", True)
    return Preset.load(preset if preset is not None else Preset(), **keywords), dataclasses.replace(options, **opts)


def plan(preset: "str | os.PathLike | Preset | None" = None, options: PlanOptions | None = None,
         **keywords: Any) -> Plan:
    """Plan the IsoFLOP sweep of ``preset`` (a name, a TOML path or a :class:`Preset`, loaded
    and checked once by ``Preset.load``; settings given in code are its overrides:
    ``Preset.load(preset, sizes=[...], lr=3e-3)``) made as ``options`` say.  A preset's
    sizes are planned only with D/P inside ``tokens_per_param``, at most ``max_sizes_per_slice``
    (nearest the window's centre), unless ``options.all_sizes``; a preset without sizes is
    ``interpscale.orchestration.plan``'s (the adaptive sweep's first grid).  Models are priced
    as trained (the data's concepts and vocabulary); runtime by ``orchestration.runtime``.  A
    run that would train for more than a year at the estimated speed is refused unless
    ``options.force``; runs above ``MAX_EPOCHS`` of a prepared corpus are warned about.
    ``keywords``: the earlier spelling (``split_keywords``)."""
    tree, options = split_keywords(preset, options, keywords)
    g = _grid(tree, options.all_sizes)
    priced = _data_fields(g)
    rate, dev_info = runtime.device_rate(options.device, options.flops_per_s, options.mfu, g.launch)
    rows: list[dict] = []
    runs: dict[int, RunSpec] = {}  # row index -> its RunSpec
    for family in g.families:
        for c_target in g.slices[family]:
            cands = [_candidate(g, family, size, c_target, priced) for size in g.sizes]
            for r in _choose(g, cands, options.strict):
                kw = g.size_args(r["size"], family)
                runs[len(rows) + cands.index(r)] = RunSpec(
                    family=family, size=r["size"], slice_flops=c_target, flops=r["C_achieved"], params=r["P"],
                    tokens=r["D"], seq_len=g.seq_len, batch_tokens=g.batch_tokens, flops_per_token=r["M"],
                    base_size=g.custom[r["size"]]["base"] if r["size"] in g.custom else "", model_overrides=kw,
                    data=g.data, plugins=() if FAMILIES[family].builtin else g.plugins, **g.train)
            rows.extend(cands)
    estimate = runtime.price_runs(rows, runs, rate, lambda r: _priced_args(g, r["family"], r["size"], priced),
                                  seq_len=g.seq_len, batch_tokens=g.batch_tokens, launch=g.launch,
                                  data=g.data)
    _check_epochs(rows, runs, g.data)
    _check_duration(rows, runs, options.force, tree.source)
    return Plan(runs=list(runs.values()), table=pd.DataFrame(rows), launch=dataclasses.asdict(g.launch),
                device=dev_info, estimate=estimate, config=tree)


MAX_EPOCHS = 4  # above: repeated data costs loss (Muennighoff et al. 2023); `plan --unique-tokens` prices it
YEAR_S = 365 * 86400.0


def corpus_tokens(data: dict) -> int | None:
    """Training tokens of a prepared corpus (its meta.json); None for a source not yet prepared."""
    if data.get("kind") != "prepared" or not data.get("path"):
        return None
    try:
        return int(read_meta(data["path"])["splits"]["train"]["tokens"])
    except (OSError, KeyError, TypeError, ValueError):
        return None


def _check_epochs(rows: list[dict], runs: dict[int, RunSpec], data: dict) -> None:
    """Each row's ``epochs`` on the prepared corpus; one warning naming the runs above MAX_EPOCHS."""
    unique = corpus_tokens(data)
    if not unique:
        return
    for r in rows:
        r["epochs"] = r["D"] / unique
    over = [(runs[i].run_id, rows[i]["epochs"]) for i in sorted(runs) if rows[i]["epochs"] > MAX_EPOCHS]
    if over:
        worst = max(e for _, e in over)
        log.warning("%d run(s) would repeat the prepared corpus (%s training tokens) more than %d times (up to "
                    "%.3g epochs: %s); repeated tokens are worth less than new ones (see `interpscale plan "
                    "--unique-tokens` for the loss cost)", len(over), f"{unique:,}", MAX_EPOCHS, worst,
                    ", ".join(f"{rid} {e:.3g}" for rid, e in over[:4]) + (" ..." if len(over) > 4 else ""))


def _check_duration(rows: list[dict], runs: dict[int, RunSpec], force: bool, source: str) -> None:
    """Refuse (``UserError``) a planned run whose training steps alone take more than a year at
    the estimated speed, unless ``force``: a slice typo (``8e99``) is not a plan."""
    long = [(runs[i], rows[i]) for i in sorted(runs) if rows[i].get("est_runtime_s", 0) > YEAR_S]
    if not long:
        return
    spec, r = max(long, key=lambda sr: sr[1]["est_runtime_s"])
    msg = (f"{source}: {len(long)} run(s) would train for more than a year at the estimated speed, e.g. "
           f"{spec.family} {spec.size} at slice C={spec.slice_flops:.3g}: {r['steps']:.3g} steps, "
           f"{runtime.fmt_seconds(r['est_runtime_s'])}")
    if not force:
        raise UserError(f"{msg}; check [plan] slices (a typo such as 8e99?) or pass --force")
    log.warning("%s (--force given: planned anyway)", msg)
