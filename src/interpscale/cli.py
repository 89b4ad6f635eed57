"""The ``interpscale`` command: a thin dispatcher over ``interpscale._commands`` (each module's
``add_arguments(parser)`` and ``run(args) -> int``, imported only when its subcommand runs).
:func:`main` is the only place an exception becomes one stderr line and an exit code (bad
input 2, failed work 1, Ctrl-C 130, an internal error -- a bug -- 70; ``-v`` adds the traceback). Options are
checked while parsing (the ``type=`` validators of ``_commands.options``), before any work; a
usage error is one line too, exit 2. Each warning line is logged once per run (docs/errors.md).
"""

from __future__ import annotations

import argparse
import dis
import importlib
import logging
import os
import re
import sys
import traceback
import warnings

from interpscale.errors import FailedWork, UserError

# subcommand (its module under interpscale._commands: the name with - as _) -> one-line help
COMMANDS: dict[str, str] = {
    "plan": "plan an IsoFLOP sweep of a preset and print the dry-run table",
    "design": "the chance a planned sweep answers its question, and the cheapest grid that would",
    "sweep": "sweep launch | status | collect | evaluate",
    "train": "train one run from a RunSpec / run directory",
    "data": "data prepare (corpus -> memory-mapped token shards) | data info",
    "evaluate": "evaluate every checkpoint of a run directory",
    "fit": "fit families (a results table) | fit chinchilla (any CSV)",
    "forecast": "forecast record | check | list: loss forecasts made before a run, checked after",
    "judge": "LLM-judge scoring: judge alignment | steering | relevance",
    "human-study": "analyse a human-rating study (ordinal mixed models)",
    "figures": "draw the paper figures from a results table",
    "report": "write report.md / report.html from a results table",
    "demo": "run the embedded demo sweep end to end",
    "export": "export a checkpoint or resume state as safetensors (+ save_pretrained layout for hf:)",
    "concepts": "concept annotation of a corpus: concepts build | check | synthetic | chunk | tag | library | annotate | validate",
}

# exceptions that mean "the user's input is wrong" (exit 2): the declared type and a path that is not
# there / in the way; a plain ValueError only when interpscale's own code raised it (``deliberate``)
_BAD_INPUT = (UserError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError,
              PermissionError)
INTERNAL_ERROR = 70  # sysexits' EX_SOFTWARE: a bug, not the input and not work that failed


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one line in CLI words (``interpscale fit families:
    --level: must be ...``), not the usage block; exit status 2 (subparsers are of this class too)."""

    def error(self, message: str):
        sys.stderr.write(f"{self.prog}: {usage_words(message)}\n")
        raise SystemExit(2)


def usage_words(message: str) -> str:
    """An argparse error message as the one line ``_Parser.error`` writes."""
    message = re.sub(r"^argument ([^:]+): ", r"\1: ", message)
    message = re.sub(r"invalid int value: (.*)$", r"\1 is not a whole number", message)
    message = re.sub(r"invalid float value: (.*)$", r"\1 is not a number", message)
    if message.startswith(("the following arguments are required", "unrecognized arguments")):
        message += " (--help lists the options)"
    return message


# the library's fitters, named in its messages by their Python names, as the CLI's words
_FITTERS = {"fit_chinchilla": "joint fit", "fit_isoflop": "IsoFLOP fit", "fit_power_law": "power-law fit",
            "fit_multiplier": "compute multiplier", "fit_law_table": "law fit", "forecast_from_results": "forecast"}


def cli_words(text: str) -> str:
    """``text`` with what only Python shows put in the CLI's words: numpy scalar reprs
    (``np.float64(0.0)`` -> ``0.0``), a fitter's Python name (``fit_bounded(concept_loss): `` ->
    ``concept_loss fit: ``, ``fit_chinchilla`` -> ``joint fit``), a figure's function left out, and
    the name of the function or table reader that starts a message (``fit_families: ``) taken out."""
    text = re.sub(r"\bnp\.(?:float|int|uint|bool|str)_?\d*\(([^()]*)\)", r"\1", text)
    text = re.sub(r"^(?:backtest|report|figure|forecast): ", "", text)  # fit_rows' callers
    text = re.sub(r"\bfit_bounded\((\w+)\)", r"\1 fit", text)
    text = re.sub(r" \([a-z_]+_figure\)", "", text)  # "Figure 34 (estimator_isoflop_figure): " -> "Figure 34: "
    text = re.sub(r"\b(?:fit_families|fit_rows|fit_law): ", "", text)
    text = re.sub(r"\b(fit|forecast)_[a-z_]+\b", lambda m: _FITTERS.get(m.group(0), m.group(0)), text)
    return re.sub(r"\b([\w-]+ fit) skipped: \1: ", r"\1 skipped: ", text)  # "IsoFLOP fit skipped: IsoFLOP fit: "


class _Once(logging.Filter):
    """Each warning line once per run of a command, in CLI words (:func:`cli_words`): fits of one
    table repeat the same row-selection warning for every figure, backtest and multiplier."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or getattr(record, "interpscale_once", False):
            return True  # (a record another handler let through: every handler shows it)
        text = cli_words(record.getMessage())
        if text in self.seen:
            return False
        self.seen.add(text)
        record.msg, record.args, record.interpscale_once = text, (), True
        return True


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """A Python warning as one log line: its category, message and where it was raised."""
    return f"{category.__name__}: {' '.join(str(message).split())} ({os.path.basename(filename)}:{lineno})"


def _load(name: str):
    return importlib.import_module(f"interpscale._commands.{name.replace('-', '_')}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full parser; only ``command``'s module is imported to add its arguments."""
    parser = _Parser(
        prog="interpscale",
        description="Plan, train, evaluate and fit IsoFLOP scaling sweeps of interpretable-by-design LMs.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        # -v is accepted after the subcommand too; SUPPRESS keeps a top-level -v from being reset
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        _plugin_option(p, [])
        if name == command:
            _load(name).add_arguments(p)
            for verb in _verbs(p):  # accepted after a verb too (``sweep launch --plugin m``)
                _plugin_option(verb, argparse.SUPPRESS)
        else:
            p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _plugin_option(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument("--plugin", action="append", default=default, metavar="MODULE",
                        help="import MODULE first (it registers model families; repeatable; docs/own-model.md)")


def _verbs(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    return [p for a in parser._actions if isinstance(a, argparse._SubParsersAction) for p in a.choices.values()]


def _old_spelling(argv: list[str], command: str | None) -> list[str]:
    """``argv`` with the command's default verb inserted where an old spelling left it out
    (``fit RESULTS`` -> ``fit families RESULTS``), after one deprecation line on stderr."""
    mod = _load(command) if command in COMMANDS else None
    default = getattr(mod, "DEFAULT_VERB", None)
    if default is None:
        return argv
    i = argv.index(command) + 1
    while i < len(argv) and (argv[i] in ("-v", "-vv", "--verbose", "--plugin") or argv[i].startswith("--plugin=")):
        i += 2 if argv[i] == "--plugin" else 1  # the command's own options, before any verb
    if i == len(argv) or argv[i] in mod.VERBS or argv[i] in ("-h", "--help"):
        return argv  # (nothing after the command: argparse names the verbs)
    sys.stderr.write(f"interpscale {command}: deprecated spelling; write `interpscale {command} {default} ...` "
                     f"(the form without `{default}` goes in the next release)\n")
    return argv[:i] + [default] + argv[i:]


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


def exit_code(exc: BaseException) -> int:
    """The exit status of a command that raised ``exc``: 2 bad input (a ``UserError``, a path not there
    or in the way, a ValueError interpscale raised on purpose: :func:`deliberate`), 1 failed work
    (``FailedWork``), 130 Ctrl-C, else ``INTERNAL_ERROR`` (a bug: a ValueError from numpy, scipy,
    pandas or the standard library, such as ``math domain error``, is one, not the user's input)."""
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, FailedWork):
        return 1
    if isinstance(exc, _BAD_INPUT) or (isinstance(exc, ValueError) and deliberate(exc)):
        return 2
    return INTERNAL_ERROR


def deliberate(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by a ``raise`` statement of interpscale's own code: a message the
    library wrote about what it was given (not yet a ``UserError``). Read off the innermost frame of
    its traceback: a ValueError raised inside another package, or by a C function interpscale called
    (``math.log(0)``: the frame's instruction is a call, not a raise), is not one."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    if not str(tb.tb_frame.f_globals.get("__name__", "")).startswith("interpscale."):
        return False
    instr = next((i for i in dis.get_instructions(tb.tb_frame.f_code) if i.offset == tb.tb_lasti), None)
    return instr is not None and instr.opname == "RAISE_VARARGS" and bool(instr.arg)


def _message(exc: BaseException, verbose: int) -> str:
    """The one stderr line for ``exc`` (without the command prefix)."""
    if isinstance(exc, KeyboardInterrupt):
        return str(exc) or "interrupted"  # e.g. the sweep's "interrupted; N run(s) stopped ..."
    msg = str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:  # not "[Errno 17] ..."
        msg = f"{exc.filename}: {exc.strerror[:1].lower()}{exc.strerror[1:]}"
        if isinstance(exc, (FileExistsError, NotADirectoryError)):
            msg = (f"{exc.filename}: a file is in the way where a directory is needed (e.g. --out DIR); "
                   "remove it or pick another path")
    if exit_code(exc) == 2 or isinstance(exc, FailedWork):
        return msg
    return (f"internal error (a bug, not bad input): {type(exc).__name__}: {msg}"
            f"{'' if verbose else ' (rerun with -v for the traceback)'}")


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand and return its exit status (see the module docstring)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)  # its first non-option argument
    argv = _old_spelling(argv, command)
    parser = build_parser(command)
    try:
        args, extra = parser.parse_known_args(argv)  # every option checked here (_commands.options), before any work
    except SystemExit as exc:
        if exc.code == 2:  # _Parser.error wrote the one line
            return 2
        raise  # --help
    if extra:  # named by the command they were given to, not by the top-level parser
        verb = " ".join(filter(None, ("interpscale", args.command, getattr(args, "verb", None))))
        sys.stderr.write(f"{verb}: {usage_words('unrecognized arguments: ' + ' '.join(extra))}\n")
        return 2
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command is None:
        parser.print_help()
        return 2
    once, formatwarning = _Once(), warnings.formatwarning
    handlers = list(logging.getLogger().handlers)
    for h in handlers:
        h.addFilter(once)
    warnings.formatwarning = _one_line_warning
    try:
        with warnings.catch_warnings():
            _quiet_warnings(args.verbose)
            return _run(args)
    finally:
        warnings.formatwarning = formatwarning
        for h in handlers:
            h.removeFilter(once)


def _run(args: argparse.Namespace) -> int:
    """The command's ``run(args)``; an exception becomes one stderr line and its exit status."""
    try:
        if args.plugin:  # before any family is looked up; plans record them in their runs
            from interpscale.models.plugins import load_plugins

            load_plugins(args.plugin)
        return int(_load(args.command).run(args) or 0)
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 -- the one place exceptions become exit codes
        if args.verbose:
            traceback.print_exc()
        verb = " ".join(filter(None, (args.command, getattr(args, "verb", None))))
        sys.stderr.write(f"interpscale {verb}: {cli_words(_message(exc, args.verbose))}\n")
        return exit_code(exc)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
