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

# subcommand -> (module under interpscale._commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("plan", "plan an IsoFLOP sweep and print the dry-run table"),
    "sweep": ("sweep", "launch, inspect (status) or collect (collect) a sweep"),
    "train": ("train", "train one run from a RunSpec / run directory"),
    "evaluate": ("evaluate", "evaluate every checkpoint of a run directory"),
    "fit": ("fit", "fit scaling laws to a results table, or `fit chinchilla` on any CSV"),
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="interpscale", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        mod = _load(name) if name in sys.argv[1:2] else None
        if mod is not None:
            mod.add_arguments(p)
        else:
            p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    saved = sys.argv
    sys.argv = [saved[0], *argv]  # build_parser only imports the module being run
    try:
        parser = build_parser()
    finally:
        sys.argv = saved
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
    return int(mod.run(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
