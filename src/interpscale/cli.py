"""The ``interpscale`` command: a thin dispatcher over ``interpscale._commands``.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; modules are imported only when their subcommand runs, so
``interpscale plan`` never imports PyMC and ``interpscale fit`` never imports torch.
All logic lives in the library; these modules only parse arguments and call it.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import traceback
import warnings

# subcommand -> (module under interpscale._commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("plan", "plan an IsoFLOP sweep and print the dry-run table"),
    "sweep": ("sweep", "launch, inspect (status) or collect (collect) a sweep"),
    "train": ("train", "train one run from a RunSpec / run directory"),
    "data": ("data", "prepare a corpus into memory-mapped token shards (data prepare / data info)"),
    "evaluate": ("evaluate", "evaluate every checkpoint of a run directory"),
    "fit": ("fit", "fit scaling laws to a results table, or `fit chinchilla` on any CSV"),
    "forecast": ("forecast", "record a loss forecast before a run; check it against the observed loss later"),
    "judge": ("judge", "LLM-judge scoring: alignment | steering | relevance"),
    "human-study": ("human_study", "analyse a human-rating study (ordinal mixed models)"),
    "figures": ("figures", "draw the paper figures from a results table"),
    "report": ("report", "write report.md / report.html from a results table"),
    "demo": ("demo", "run the embedded demo sweep end to end"),
}


def _load(name: str):
    module, _ = COMMANDS[name]
    try:
        return importlib.import_module(f"interpscale._commands.{module}")
    except ModuleNotFoundError as exc:
        if exc.name == f"interpscale._commands.{module}":
            return None
        raise


def _command_in(argv: list[str]) -> str | None:
    """The subcommand named in argv: its first argument that is not an option."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full parser; only ``command``'s module is imported to add its arguments."""
    parser = argparse.ArgumentParser(
        prog="interpscale",
        description="Plan, train, evaluate and fit IsoFLOP scaling sweeps of interpretable-by-design LMs.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        # -v is accepted after the subcommand too; SUPPRESS keeps a top-level -v from being reset
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        mod = _load(name) if name == command else None
        if mod is not None:
            mod.add_arguments(p)
        else:
            p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _quiet_warnings(verbose: int) -> None:
    """Library warnings reach the user once, through logging; numerical RuntimeWarnings
    (overflow in a bootstrap replicate, mean of an empty slice) only with -v."""
    logging.captureWarnings(True)
    warnings.filterwarnings("default" if verbose else "once", category=UserWarning)
    if not verbose:
        warnings.filterwarnings("ignore", category=RuntimeWarning)
        shown = warnings.showwarning

        def show(message, category, *args, **kwargs):
            if category.__name__ != "ScalingFitWarning":  # the fitters log these already
                shown(message, category, *args, **kwargs)

        warnings.showwarning = show


def _user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is about the user's input (bad value, missing or unreadable file)."""
    from interpscale.errors import UserError

    return isinstance(exc, (UserError, ValueError, OSError, UnicodeDecodeError))


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand. Bad input ends in one line on stderr and exit code 2 (``-v``:
    with its traceback); an unexpected failure in one line and exit code 1."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_in(argv))
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command is None:
        parser.print_help()
        return 2
    mod = _load(args.command)
    if mod is None:
        sys.stderr.write(f"interpscale {args.command}: not built yet in this version\n")
        return 2
    with warnings.catch_warnings():
        _quiet_warnings(args.verbose)
        try:
            return int(mod.run(args) or 0)
        except KeyboardInterrupt:
            sys.stderr.write(f"interpscale {args.command}: interrupted\n")
            return 130
        except Exception as exc:  # noqa: BLE001 -- the one place exceptions become exit codes
            if args.verbose:
                traceback.print_exc()
            msg = str(exc) or type(exc).__name__
            if _user_error(exc):
                sys.stderr.write(f"interpscale {args.command}: error: {msg}\n")
                return 2
            sys.stderr.write(f"interpscale {args.command}: internal error: {type(exc).__name__}: {msg}"
                             f"{'' if args.verbose else ' (rerun with -v for the traceback)'}\n")
            return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
