"""Errors that mean "the user's input is wrong" rather than "the program is wrong"; ``cli.main``
(the only place that does) turns them into one line on stderr and exit code 2, ``FailedWork`` 1, and
anything else -- a ValueError raised inside numpy, scipy or the standard library included -- into
``cli.INTERNAL_ERROR`` (a bug). Raise ``UserError`` for bad input; a plain ValueError raised by
interpscale's own code still counts as bad input (``cli.deliberate``) until it is converted."""

from __future__ import annotations


class UserError(ValueError):
    """Bad input: a file, option or configuration value the user can fix. The message names it."""


class ConfigError(UserError):
    """A preset / TOML configuration that fails validation (unknown key, wrong type, inconsistency)."""


class FailedWork(RuntimeError):
    """Work that was started and failed (a run, a job, a fit that could not be made): the CLI
    prints the message in one line and exits 1. The message says what failed and where."""
