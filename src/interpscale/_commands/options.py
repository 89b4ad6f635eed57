"""Argparse options whose defaults and choices are the library's, stated once there: an
:func:`option` has ``default=None``, its help shows the library default read from the
signature, and :func:`given` passes on only the options the user set."""

from __future__ import annotations

import argparse
import inspect
import math
import sys
import typing
from pathlib import Path
from typing import Any, Callable


def library_default(func: Callable, name: str) -> Any:
    """The default of ``func``'s keyword ``name`` (a dataclass field works too)."""
    return inspect.signature(func).parameters[name].default


def option(p: argparse.ArgumentParser | Any, flag: str, func: Callable, name: str | None = None, *,
           help: str = "", **kw: Any) -> None:
    """Add ``flag`` to ``p`` for ``func``'s keyword ``name`` (default: the flag's name), with
    no argparse default and the library default shown in the help."""
    name = name or flag.lstrip("-").replace("-", "_")
    default = library_default(func, name)
    shown = f"{default:g}" if isinstance(default, float) and 1e4 <= abs(default) else (
        ",".join(map(str, default)) if isinstance(default, (tuple, list)) else default)
    text = f"{help} (default: {shown})" if help else f"default: {shown}"
    p.add_argument(flag, default=None, help=text.replace("%", "%%"), **kw)  # dest: argparse's, from the flag


def given(args: argparse.Namespace, *names: str, **rename: str) -> dict[str, Any]:
    """The options among ``names`` (and ``rename``'s values, passed on under its keys) that
    the user set: ``given(args, "seed", n_boot="n_boot")``."""
    pairs = [(n, n) for n in names] + list(rename.items())
    return {key: getattr(args, attr) for key, attr in pairs if getattr(args, attr, None) is not None}


def literal_choices(func: Callable, name: str) -> tuple[str, ...] | None:
    """The string values of a ``Literal[...]`` annotation of ``func``'s keyword ``name``
    (``None`` when it is not one: the library then checks the value itself)."""
    try:
        hint = typing.get_type_hints(func)[name]
    except Exception:  # noqa: BLE001 -- an annotation that does not resolve: no choices, the library checks
        return None
    args = [hint] if typing.get_origin(hint) is typing.Literal else list(typing.get_args(hint))
    values = [v for a in args if typing.get_origin(a) is typing.Literal for v in typing.get_args(a)]
    return tuple(v for v in values if isinstance(v, str)) or None


def number(text: str | None) -> float | None:
    """``text`` as a number; None when it is None or not one (e.g. a column name)."""
    try:
        return None if text is None else float(text)
    except ValueError:
        return None


# ---- argparse ``type=`` validators: every command checks its common options with these, at parse
# time, before any work; a bad value is one line naming the flag (cli.main), exit 2 (docs/errors.md).

def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def finite(text: str) -> float:
    """An argparse ``type``: a finite number (an observed loss)."""
    return _float(text)


def positive_float(text: str) -> float:
    """An argparse ``type``: a finite number > 0 (a compute budget, a parameter or token count)."""
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def level(text: str) -> float:
    """An argparse ``type``: an interval level in (0, 1)."""
    value = _float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a level between 0 and 1 (e.g. 0.9 for 90%), got {text}")
    return value


def fraction(text: str) -> float:
    """An argparse ``type``: a share in [0, 1) (e.g. the held-out share of documents)."""
    value = _float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a share from 0 up to (not including) 1, got {text}")
    return value


def share(text: str) -> float:
    """An argparse ``type``: a share above 0 and at most 1 (e.g. a utilisation)."""
    value = _float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a share above 0 and at most 1 (e.g. 0.4), got {text}")
    return value


level_type = level  # (inside fit_options, ``level`` is its help-text parameter)


def replicates(text: str) -> int:
    """An argparse ``type``: bootstrap replicates, a whole number >= 0 (0: no bootstrap)."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0 (0: no bootstrap), got {text}")
    return value


def count(text: str) -> int:
    """An argparse ``type``: a whole number >= 1 (replicates, draws, chains, jobs, batches)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse ``type``: a whole number >= 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text}")
    return value


TABLE_SUFFIXES = (".parquet", ".csv", ".tsv")  # results_table.SUFFIXES (not imported: keeps parsing light)


def power_options(p: argparse.ArgumentParser | Any) -> None:
    """``--power-sims N`` / ``--growth G``: the power an undetermined multiplier verdict had and the grid
    that would decide (``design.with_powers``; fit multiplier, fit families, report)."""
    p.add_argument("--power-sims", type=non_negative_int, default=0, metavar="N",
                   help="for an undetermined multiplier verdict, the power this sweep had to detect --growth at "
                        "its measured noise and the grid that would have had 80%%, from N simulated sweeps per "
                        "truth (docs/design.md; minutes; default 0: not computed)")
    p.add_argument("--growth", type=finite, default=0.05,
                   help="the growth of k ∝ C^g --power-sims asks about (default 0.05)")


def _suffix(path: Path) -> str:
    name = path.name.lower()
    return ".csv.gz" if name.endswith(".csv.gz") else path.suffix.lower()


def table_file(text: str, suffixes: tuple[str, ...] = TABLE_SUFFIXES) -> Path:
    """An argparse ``type``: an existing file that is a table (``suffixes``)."""
    path = Path(text)
    kinds = "/".join(suffixes)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a directory, not a table ({kinds})")
    if _suffix(path) not in suffixes:
        raise argparse.ArgumentTypeError(f"{path} is not a table ({kinds})")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{path}: no such file")
    return path


def log_table(text: str) -> Path:
    """An argparse ``type``: a table or a per-step log (``.csv.gz`` too)."""
    return table_file(text, (*TABLE_SUFFIXES, ".csv.gz"))


def results_or_example(text: str) -> Path | str:
    """An argparse ``type``: a results table, or ``example`` (the bundled example table)."""
    return text if text == "example" else table_file(text)


def existing_file(text: str) -> Path:
    """An argparse ``type``: a file that exists (not a directory)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a directory, not a file")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{path}: no such file")
    return path


def existing_dir(text: str) -> Path:
    """An argparse ``type``: a directory that exists."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{path}: no such directory")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a file, not a directory")
    return path


CHECKPOINT_KINDS = "a checkpoints/<name> directory, an older .pt file, or a state/<name> directory"


def checkpoint_path(text: str) -> Path:
    """An argparse ``type``: a checkpoint that exists: a directory, or a ``.pt`` file."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{path}: no such checkpoint ({CHECKPOINT_KINDS})")
    if path.is_file() and path.suffix.lower() != ".pt":
        raise argparse.ArgumentTypeError(f"{path} is not a checkpoint ({CHECKPOINT_KINDS})")
    return path


def out_dir(text: str) -> Path:
    """An argparse ``type``: an output directory that exists or can be made: no file is in the way
    (the path itself or a parent), checked before any work so nothing computed is lost writing it."""
    path = Path(text)
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    if p.exists() and not p.is_dir():
        raise argparse.ArgumentTypeError(f"{p}: a file is in the way where a directory is needed; remove it "
                                         "or pick another path")
    return path


def out_json(text: str) -> Path:
    """An argparse ``type``: a ``.json`` file to write, or a directory (:func:`out_dir`)."""
    path = Path(text)
    if path.suffix.lower() == ".json" and not path.is_dir():
        out_dir(str(path.parent))
        return path
    return out_dir(text)


# One column-mapping vocabulary for every command that reads a table (issue 37): the flag names
# the user's column, the results-table name it stands for is the key's value.
COLUMN_FLAGS: dict[str, tuple[str, str]] = {
    "params": ("params", "parameter counts"),
    "tokens": ("tokens", "training tokens"),
    "loss": ("loss", "the loss"),
    "family": ("family", "the model family of each row"),
    "run": ("run_id", "the run each row belongs to (several checkpoints of one run)"),
    "step": ("step", "the training step of each row"),
    "slice": ("slice_flops", "each row's IsoFLOP slice, its compute budget in FLOPs (without one: each row's "
                             "compute, grouped within the slice tolerance)"),
    "compute": ("flops", "each row's achieved training compute in FLOPs (without one: 6·params·tokens)"),
}
TABLE_FIELDS = tuple(COLUMN_FLAGS)  # every column flag: what a results-table command maps


def add_columns(p: argparse.ArgumentParser | Any, *fields: str, required: tuple[str, ...] = (),
                defaults: bool = True, help: dict[str, str] | None = None) -> None:
    """``--params COL``, ``--tokens COL`` ... for ``fields`` (keys of :data:`COLUMN_FLAGS`); with
    ``defaults`` the help says the results-table column read when the flag is left out."""
    for field in fields:
        canonical, what = COLUMN_FLAGS[field]
        text = (help or {}).get(field, f"column with {what}")
        if defaults and field not in required:
            text += f" (default: {canonical})"
        p.add_argument(f"--{field}", metavar="COL", required=field in required, help=text.replace("%", "%%"))


def table_options(p: argparse.ArgumentParser, func: Callable, metric: str,
                  columns: dict[str, str] | None = None) -> None:
    """What a fit of a results table reads: RESULTS, the column flags (``columns``: their help
    where it differs), the rows (``--estimator``, ``--annealed``) and ``--metric`` (help ``metric``)."""
    p.add_argument("results", metavar="RESULTS", type=table_file, help="results table (.parquet, .csv or .tsv)")
    add_columns(p, *TABLE_FIELDS, help=columns)
    p.add_argument("--estimator", help="use rows with this loss estimator (e.g. mdlm_elbo, ar_ce)")
    p.add_argument("--annealed", action=argparse.BooleanOptionalAction, default=None,
                   help="use (non-)annealed rows only")
    option(p, "--metric", func, "loss", metavar="COL", help=metric)


def fit_options(p: argparse.ArgumentParser | Any, func: Callable, level: str, *,
                n_boot: str = "bootstrap replicates", grids: tuple[str, ...] | None = None) -> None:
    """``--grid``, ``--n-boot``, ``--level`` (help ``level``) and ``--seed`` of ``func``'s fit;
    ``grids``: the start grids where ``func``'s annotation does not list them."""
    grids = grids or literal_choices(func, "grid")
    option(p, "--grid", func, choices=grids,
           help="initialisation grid of the joint fit" + ("" if grids else " (epoch | coarse)"))
    option(p, "--n-boot", func, type=replicates, help=n_boot)
    option(p, "--level", func, type=level_type, help=level)
    option(p, "--seed", func, type=int)


def column_map(args: argparse.Namespace, *fields: str) -> dict[str, str]:
    """``{results-table column: the user's column}`` for the column flags among ``fields`` set."""
    return {COLUMN_FLAGS[f][0]: getattr(args, f) for f in fields
            if getattr(args, f, None) is not None and getattr(args, f) != COLUMN_FLAGS[f][0]}


def deprecated(command: str, old: str, new: str) -> None:
    """The one deprecation line of an old spelling (kept for one release)."""
    sys.stderr.write(f"interpscale {command}: {old} is deprecated; write {new} (the old spelling goes in the "
                     "next release)\n")
