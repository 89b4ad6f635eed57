"""Evaluate every checkpoint of a run directory into RUN_DIR/results.parquet (resumable), and
the results table itself: one row per evaluated checkpoint, parquet + CSV twin, written
atomically, merged and collected over a sweep's runs.

Cached rows are keyed by (checkpoint name, estimator, checkpoint signature): a checkpoint
that changed since it was evaluated is evaluated again and its old rows replaced.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd
import torch
from tqdm.auto import tqdm

from interpscale._atomic import atomic_path
from interpscale.data.loaders import open_data
from interpscale.executors import stop_requested
from interpscale.metrics import estimate_loss
from interpscale.metrics.bpb import bits_per_byte, scored_bytes
from interpscale.metrics.interp import interp_metrics
from interpscale.models import get_family, load_checkpoint
from interpscale.models.checkpoint import list_checkpoints, weights_file
from interpscale.orchestration.rundir import data_fingerprint, fingerprint_label, read_status
from interpscale.results_table import RESULT_COLUMNS, read_results
from interpscale.orchestration.spec import RunSpec
from interpscale.errors import UserError

log = logging.getLogger(__name__)


def default_estimators(family: str) -> tuple[str, ...]:
    """``mdlm_elbo`` for a diffusion family, else ``ar_ce``."""
    return ("mdlm_elbo",) if get_family(family).is_diffusion else ("ar_ce",)


EVAL_BATCH_TOKENS = 65_536  # 16 x 4096-token rows per forward at paper scale


def checkpoint_signature(path: Path) -> str:
    """A checkpoint's size and modification time (ns), which its cached rows are keyed by
    besides its name: one rewritten since it was evaluated has its rows recomputed."""
    st = weights_file(path).stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


def pending_evaluations(run_dir: str | os.PathLike, estimators: Sequence[str] | None = None,
                        table: pd.DataFrame | None = None) -> list[tuple[Path, str]]:
    """(checkpoint, estimator) pairs of RUN_DIR whose rows are missing from its results
    table or were computed from another version of the checkpoint (:func:`checkpoint_signature`)."""
    run_dir = Path(run_dir)
    if table is None:
        table = read_results(run_dir / "results.parquet", missing_ok=True)
    estimators = tuple(estimators or default_estimators(RunSpec.load(run_dir).family))
    sigs = table.get("checkpoint_sig", pd.Series(pd.NA, index=table.index))
    done = set(zip(table.get("checkpoint", []), table.get("estimator", []), sigs))
    return [(c, e) for c in list_checkpoints(run_dir / "checkpoints") for e in estimators
            if (c.name, e, checkpoint_signature(c)) not in done]


def evaluate_run(run_dir: str | os.PathLike, *, estimators: Sequence[str] | None = None,
                 eval_batches: int | None = None, seed: int = 0, interp: bool = True,
                 device: str | torch.device | None = None, eval_batch_tokens: int | None = None) -> pd.DataFrame:
    """Evaluate each of :func:`pending_evaluations` and return the run's full table, rewritten
    after every checkpoint (a killed evaluation resumes where it stopped).

    The validation set is ``eval_batches`` x the training batch (rows), in batches of
    ``eval_batch_tokens`` (default ``EVAL_BATCH_TOKENS``; at least one row, at most the
    training batch) held on the host, each moved to ``device`` (default: CUDA when
    available) only while evaluated, so memory stays bounded at paper scale.  Loss by
    ``metrics.estimate_loss`` (default: :func:`default_estimators`) and, for concept
    families, ``metrics.interp_metrics``.
    """
    run_dir = Path(run_dir)
    spec = RunSpec.load(run_dir)
    table_path = run_dir / "results.parquet"
    table = read_results(table_path, missing_ok=True)
    estimators = tuple(estimators or default_estimators(spec.family))
    todo = pending_evaluations(run_dir, estimators, table)
    if not todo:
        return table
    concept = get_family(spec.family).is_concept
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tokens = EVAL_BATCH_TOKENS if eval_batch_tokens is None else int(eval_batch_tokens)
    if tokens < 1:
        raise UserError(f"eval_batch_tokens must be positive, got {eval_batch_tokens}")
    rows = max(1, min(spec.batch_size, tokens // spec.seq_len))
    n_rows = (eval_batches or spec.eval_batches) * spec.batch_size  # the same validation rows whatever `rows`
    data = open_data(run_dir)
    batches = data.val.eval_batches(rows, -(-n_rows // rows), concepts=concept)
    n_bytes = {e: scored_bytes(batches, data.tokenizer, e) for e in estimators}  # for bits per byte
    for ckpt in dict.fromkeys(c for c, _ in todo):
        wanted = [e for c, e in todo if c == ckpt]
        out = _evaluate_checkpoint(spec, ckpt, wanted, batches, n_bytes, device=device, seed=seed,
                                   interp=concept and interp, table_path=table_path)
        table = merge_results([table, pd.DataFrame(out)])  # a changed checkpoint's old rows are replaced
        write_results(table, table_path)
        log.info("%s: evaluated %s", spec.run_id, ckpt.name)
    return table


@torch.no_grad()
def _evaluate_checkpoint(spec: RunSpec, ckpt: Path, estimators: Sequence[str], batches, n_bytes: dict[str, int], *,
                         device: torch.device, seed: int, interp: bool, table_path: Path) -> list[dict]:
    """One results row per estimator for checkpoint ``ckpt``."""
    sig = checkpoint_signature(ckpt)  # before reading: a rewrite during evaluation is caught next time
    try:
        model, extra = load_checkpoint(ckpt, map_location=device)
    except Exception as exc:
        raise UserError(f"checkpoint {ckpt} is corrupt or unreadable ({exc}); "
                        f"rows already evaluated in {table_path} are kept") from exc
    model.eval()
    interp_vals = dict(interp_metrics(model, batches, seed=seed)) if interp else {}
    out = []
    step = int(extra.get("step", 0))
    for est in estimators:
        le = estimate_loss(model, batches, est, seed=seed)
        out.append({"run_id": spec.run_id, "family": spec.family, "size": spec.size,
                    "slice_flops": spec.slice_flops, "flops": spec.flops_per_token * step * spec.batch_tokens,
                    "params": spec.params, "tokens": step * spec.batch_tokens, "seq_len": spec.seq_len,
                    "step": step, "annealed": bool(extra.get("annealed", False)), "estimator": est,
                    "loss": float(le.value), "loss_se": float(le.se),
                    "bpb": bits_per_byte(le.value, le.n_tokens, n_bytes[est]), **interp_vals,
                    "checkpoint": ckpt.name, "checkpoint_sig": sig, "anneal_from": extra.get("anneal_from"),
                    "target_tokens": spec.tokens, "target_flops": spec.flops})
    return out


def evaluate_runs(run_dirs, *, progress: bool = True, **kwargs) -> pd.DataFrame:
    """Evaluate several run directories in this process (trained ones only; others are
    skipped with a log line) until a job is asked to stop; returns their merged tables."""
    tables = []
    for d in tqdm(list(run_dirs), desc="evaluating runs", unit="run", disable=not progress):
        if stop_requested():  # a cancelled job: the next launch evaluates what is left
            break
        if read_status(Path(d)).get("state") != "done":
            log.info("%s: not trained yet; skipped", d)
            continue
        tables.append(evaluate_run(d, **kwargs))
    return merge_results(tables) if tables else pd.DataFrame()


# -- the results table -------------------------------------------------------------------------
KEY = ("run_id", "checkpoint", "estimator")  # a row's identity; columns beyond RESULT_COLUMNS are kept


def _ordered(df: pd.DataFrame) -> pd.DataFrame:
    """The table's columns first (missing ones all NA), extra columns after."""
    extra = [c for c in df.columns if c not in RESULT_COLUMNS]
    return df.reindex(columns=[*RESULT_COLUMNS, *extra], fill_value=pd.NA)


def write_results(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write ``path`` (.parquet) and its ``.csv`` twin, each atomically."""
    path = Path(path)
    if path.suffix != ".parquet":
        raise UserError(f"results path must end in .parquet, got {path}")
    df = _ordered(df)
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)
    with atomic_path(path.with_suffix(".csv")) as tmp:
        df.to_csv(tmp, index=False)
    return path


def merge_results(tables: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate tables; for duplicate (run_id, checkpoint, estimator) keep the last."""
    frames = [t for t in tables if len(t)]
    if not frames:
        return _ordered(pd.DataFrame())
    df = pd.concat(frames, ignore_index=True)
    df = df.drop_duplicates(subset=[k for k in KEY if k in df.columns], keep="last")
    return _ordered(df.sort_values(["family", "slice_flops", "params", "step", "annealed"], kind="stable")
                    .reset_index(drop=True))


def _with_fingerprint(df: pd.DataFrame, run_dir: Path) -> pd.DataFrame:
    """A run's rows with the ``data_fingerprint`` column (corpus and tokenizer hashes of its
    data), so rows trained on different corpora are never mistaken for replicates."""
    if not len(df) or not (run_dir / "data.json").exists():
        return df
    try:
        label = fingerprint_label(data_fingerprint(run_dir))
    except (ValueError, OSError, KeyError):  # the data moved or predates fingerprints
        return df
    return df.assign(data_fingerprint=label)


def collect(run_dirs: Iterable[str | os.PathLike], out: str | os.PathLike | None = None) -> pd.DataFrame:
    """Merge every RUN_DIR/results.parquet (each row labelled with its ``data_fingerprint``);
    write to ``out`` (parquet + CSV) when given.  Rows of several corpora are logged."""
    df = merge_results(_with_fingerprint(read_results(Path(d) / "results.parquet", missing_ok=True), Path(d))
                       for d in run_dirs)
    if "data_fingerprint" in df.columns and df["data_fingerprint"].nunique() > 1:
        log.warning("the collected results come from %d different data sets (column data_fingerprint: %s)",
                    df["data_fingerprint"].nunique(), sorted(df["data_fingerprint"].dropna().unique()))
    if out is not None:
        write_results(df, out)
    return df
