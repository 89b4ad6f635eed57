"""``report.md`` + ``report.html`` from a results table: Table 6/7-style fits, warnings, figures."""

from __future__ import annotations

import html
import logging
import math
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from interpscale._atomic import atomic_write_text

log = logging.getLogger("interpscale.analysis.report")

REPORT_BOOT = 1000  # bootstrap replicates for the report's fits (pass n_boot=10_000 for the paper's)


def load_results(results: pd.DataFrame | str | os.PathLike) -> pd.DataFrame:
    """A results table from a DataFrame, a ``.parquet``, ``.csv`` or ``.tsv`` path (validated)."""
    from interpscale.results_table import read_results

    return read_results(results)


def markdown_table(df: pd.DataFrame, *, floatfmt: str = ".4g") -> str:
    """A GitHub-style pipe table of ``df`` (index dropped; NaN shown as —)."""
    def cell(v: Any) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "—"
        if isinstance(v, float):
            return format(v, floatfmt)
        return str(v).replace("|", "\\|").replace("\n", " ")

    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def data_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Rows, runs and compute range per (family, estimator, annealed) group."""
    keys = [k for k in ("family", "estimator", "annealed") if k in df.columns]
    rows = []
    for key, g in df.groupby(keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        rec = dict(zip(keys, key))
        rec["rows"] = len(g)
        if "slice_flops" in g:
            rec["slices"] = g["slice_flops"].nunique()
        if "flops" in g:
            rec["C range"] = f"{g['flops'].min():.2g} – {g['flops'].max():.2g}"
        if "mask_rate" in g and g["mask_rate"].notna().any():
            rec["mask rates"] = g["mask_rate"].nunique()
        rows.append(rec)
    return pd.DataFrame(rows)


def collect_warnings(obj: Any, path: str = "") -> list[str]:
    """Every ``warnings`` entry anywhere in a fit's ``to_dict()`` tree, prefixed by where it
    sits; a message already listed under another path is not repeated."""
    found: list[tuple[str, str]] = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "warnings" and isinstance(v, (list, tuple)):
                    found.extend((where or "fits", str(w)) for w in v if w)
                else:
                    walk(v, f"{where}.{k}" if where else str(k))
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f"{where}[{i}]")

    walk(obj, path)
    seen: set[str] = set()
    out = []
    for where, msg in found:
        if msg not in seen:
            seen.add(msg)
            out.append(f"{where}: {msg}")
    return out


def _ci_cell(value: float, lo: float, hi: float, digits: int = 3) -> str:
    """``0.528 [-0.025, +0.023]``: the estimate with its interval as offsets (Table 6 style)."""
    if not np.isfinite(value):
        return "—"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{lo - value:+.{digits}f}, {hi - value:+.{digits}f}]"


def table6_markdown(t6: pd.DataFrame) -> str:
    """Table 6 layout: alpha_P, alpha_D, alpha_L, L_inf with CI offsets per family."""
    rows = [{"Family": r["family"], **{sym: _ci_cell(r[k], r[f"{k}_lo"], r[f"{k}_hi"])
                                       for k, sym in (("alpha_P", "α_P"), ("alpha_D", "α_D"),
                                                      ("alpha_L", "α_L"), ("L_inf", "L∞"))}}
            for r in t6.to_dict("records")]
    return markdown_table(pd.DataFrame(rows))


def table7_markdown(t7: pd.DataFrame) -> str:
    """Table 7 layout: per metric and family, beta, e [CI] (flagged when on its bound), R²,
    the prediction at the target compute, the observed value and their difference."""
    rows = []
    for r in t7.to_dict("records"):
        rows.append({
            "Metric": r["metric"], "Family": r["family"], "β": f"{r['beta']:.3f}",
            "e [CI]": _ci_cell(r["e"], r["e_lo"], r["e_hi"]) + (" (bound)" if r["e_at_bound"] else ""),
            "R²": f"{r['r2']:.3f}", "pred": r["prediction"], "actual": r["actual"], "Δ": r["delta"],
        })
    return markdown_table(pd.DataFrame(rows))


def _fit_families(df: pd.DataFrame, n_boot: int, target_compute: float | None, actual: Mapping | None):
    from interpscale.scaling import fit_families

    return fit_families(df, n_boot=n_boot, seed=0, grid="coarse", target_compute=target_compute, actual=actual)


def _table(fits: Any, name: str) -> pd.DataFrame | None:
    method = getattr(fits, name, None)
    if method is None:
        return None
    try:
        table = method()
    except ValueError as exc:  # e.g. no +Concept family -> no Table 7
        log.info("report: %s unavailable: %s", name, exc)
        return None
    return table if isinstance(table, pd.DataFrame) and not table.empty else None


def build_markdown(df: pd.DataFrame, fits: Any, figure_set: Any, *, source: str, fig_dir: str) -> str:
    """The report's markdown text (figures referenced relative to the report)."""
    parts = [
        "# Scaling report",
        "",
        f"Results table: `{source}` — {len(df)} rows, families {', '.join(map(str, sorted(df['family'].unique())))}. "
        f"Generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by interpscale.",
        "",
        "## Data",
        "",
        markdown_table(data_summary(df)),
        "",
    ]
    t6 = _table(fits, "table6") if fits is not None else None
    parts += ["## Compute-optimal scaling (Table 6 layout)", "",
              "IsoFLOP parabolas per slice (Eq. 25), power laws P*(C), L*(C) (Eq. 26) and the joint fit (Eq. 27); "
              "brackets are bootstrap confidence intervals as offsets from the estimate.", ""]
    parts += [table6_markdown(t6) if t6 is not None else "_No compute-optimal fits could be made from this table._", ""]
    t7 = _table(fits, "table7") if fits is not None else None
    parts += ["## Interpretability scaling (Table 7 layout)", "",
              "Bounded fits m(C) = e ± A·C^-β (Eq. 29) of each metric on every checkpoint.", ""]
    parts += [table7_markdown(t7) if t7 is not None else "_No interpretability metrics to fit in this table._", ""]
    ext = [(k, f.extrapolation) for k, f in getattr(fits, "families", {}).items() if f.extrapolation is not None]
    if ext:
        parts += ["## Loss extrapolation to the target compute", "",
                  "Joint form (Eq. 27, compute-optimal allocation) vs the log-linear L*(C) law, with bootstrap "
                  "prediction intervals.", ""]
        parts += [markdown_table(pd.DataFrame([{
            "Family": k, "C": f"{x.compute:.3g}", "joint": _ci_cell(x.joint, *x.joint_ci),
            "log-linear": _ci_cell(x.loglinear, *x.loglinear_ci),
            "observed": x.observed, "Δ joint": x.joint_error, "Δ log-linear": x.loglinear_error,
        } for k, x in ext])), ""]
    warnings = collect_warnings(fits.to_dict()) if fits is not None and hasattr(fits, "to_dict") else []
    parts += ["## Fit warnings", ""]
    parts += [f"- {w}" for w in warnings] if warnings else ["None: every fit converged without boundary or quality flags."]
    parts += ["", "## Figures", ""]
    if figure_set is not None:
        for title, paths in figure_set.drawn.items():
            png = next((p for p in paths if p.suffix == ".png"), None)
            if png is not None:
                parts += [f"### {title}", "", f"![{title}]({fig_dir}/{png.name})", ""]
        if figure_set.skipped:
            parts += ["### Figures not drawn", ""]
            parts += [f"- **{title}**: {reason}" for title, reason in figure_set.skipped.items()]
            parts += [""]
    return "\n".join(parts).rstrip() + "\n"


_INLINE_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_ITALIC = re.compile(r"(?<![\w*])_([^_]+)_(?![\w])")
_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)]+)\)$")


def _inline(text: str) -> str:
    text = html.escape(text, quote=False)
    text = _INLINE_CODE.sub(r"<code>\1</code>", text)
    text = _BOLD.sub(r"<strong>\1</strong>", text)
    return _ITALIC.sub(r"<em>\1</em>", text)


def _split_row(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [c.strip().replace("\\|", "|") for c in cells]


def markdown_to_html(md: str, *, title: str = "Scaling report") -> str:
    """HTML for the subset of markdown this module writes: headings, pipe tables, images,
    bullet lists, paragraphs, inline code/bold/italic."""
    body: list[str] = []
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif m := re.match(r"^(#{1,6}) (.*)$", line):
            level = len(m.group(1))
            body.append(f"<h{level}>{_inline(m.group(2))}</h{level}>")
            i += 1
        elif m := _IMAGE.match(line.strip()):
            alt, src = html.escape(m.group(1)), html.escape(m.group(2))
            body.append(f'<figure><img src="{src}" alt="{alt}"><figcaption>{alt}</figcaption></figure>')
            i += 1
        elif line.startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(lines[i])
                i += 1
            head, rows = _split_row(block[0]), [_split_row(r) for r in block[2:]]
            body.append("<table><thead><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr></thead><tbody>"
                        + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in rows)
                        + "</tbody></table>")
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            body.append("<ul>" + "".join(items) + "</ul>")
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not re.match(r"^(#|\||- |!\[)", lines[i]):
                para.append(lines[i])
                i += 1
            body.append(f"<p>{_inline(' '.join(para))}</p>")
    style = ("body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}"
             "table{border-collapse:collapse;margin:1rem 0;font-size:.9rem}th,td{border:1px solid #ccc;padding:.25rem .5rem}"
             "th{background:#f3f3f3}img{max-width:100%}figure{margin:1rem 0}figcaption{font-size:.85rem;color:#555}"
             "code{background:#f3f3f3;padding:0 .2rem}")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_report(results: pd.DataFrame | str | os.PathLike, out_dir: str | os.PathLike, *, fits: Any = None,
                 run_dirs: Iterable[str | os.PathLike] | None = None, n_boot: int = REPORT_BOOT,
                 figures: bool = True, source: str | None = None, target_compute: float | None = None,
                 actual: Mapping[str, Mapping[str, float]] | None = None) -> Path:
    """Write ``out_dir/report.md`` (Table 6/7-style tables, fit warnings, embedded figures under
    ``out_dir/figures``) and its ``report.html`` twin; returns the markdown path.

    ``fits`` is a ``scaling.fit_families`` result; when omitted the families are fitted here
    with ``n_boot`` bootstrap replicates, extrapolated to ``target_compute`` and compared with
    ``actual[family][metric or "loss"]`` when given. ``source`` names the table in the header."""
    from interpscale.analysis.figures import CORE_COLUMNS, render_figures
    from interpscale.analysis.figures._style import require_columns

    if source is None:
        source = str(results) if not isinstance(results, pd.DataFrame) else "in-memory DataFrame"
    df = load_results(results)
    require_columns(df, CORE_COLUMNS, "write_report")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if fits is None:
        try:
            fits = _fit_families(df, n_boot, target_compute, actual)
        except ValueError as exc:
            log.warning("report: family fits failed: %s", exc)
            fits = None
    target = None
    if target_compute is not None:  # Figures 24/26 extrapolate the +Concept family to the same compute
        observed = (actual or {}).get("cdlm+concept") or (actual or {}).get("ar+concept") or {}
        target = {"flops": float(target_compute), **observed}
    figure_set = (render_figures(df, out / "figures", fits=fits, run_dirs=run_dirs, n_boot=n_boot, target=target)
                  if figures else None)
    md = build_markdown(df, fits, figure_set, source=source, fig_dir="figures")
    md_path = atomic_write_text(out / "report.md", md)
    atomic_write_text(out / "report.html", markdown_to_html(md))
    log.info("report written to %s", md_path)
    return md_path
