"""Errors that mean "the user's input is wrong" rather than "the program is wrong".

The CLI turns any of these (and ``ValueError`` / ``OSError`` raised by the library for bad
input) into one line on stderr and exit code 2; ``-v`` adds the traceback.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input: a file, option or configuration value the user can fix. The message names it."""


class ConfigError(UserError):
    """A preset / TOML configuration that fails validation (unknown key, wrong type, inconsistency)."""
