"""Plugin families: modules outside the package that register model families.

Three ways in, all ending in an import that calls ``register_family``:

- ``--plugin MODULE`` on the command line and ``[plan] plugins = ["MODULE"]`` in a preset
  (:func:`load_plugins`); the planner records the modules in every run's ``spec.json`` and
  checkpoints record them too, so submitit jobs (local and SLURM), ``train``, ``evaluate``,
  the lm-eval adapter and the checkpoint judges import them before looking a family up;
- an entry point in the group ``interpscale.families`` (a package's ``pyproject.toml``:
  ``[project.entry-points."interpscale.families"] myarch = "myarch"``), loaded the first
  time a family name is not found in a process (:func:`load_entry_points`).
"""

from __future__ import annotations

import importlib
import logging
from importlib.metadata import entry_points
from typing import Iterable

from interpscale.errors import UserError

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "interpscale.families"
LOADED: list[str] = []  # plugin modules imported in this process, in order
ENTRY_POINTS: list[str] = []  # "name = value" of the entry points loaded in this process


def load_plugins(modules: Iterable[str] | str | None) -> tuple[str, ...]:
    """Import each plugin module (idempotent); a module that does not import is a UserError."""
    names = [modules] if isinstance(modules, str) else list(modules or ())
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise UserError(f"plugin module names must be non-empty strings, got {name!r}")
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise UserError(f"plugin module {name!r} does not import ({exc}); install it or put its directory "
                            f"on the Python path") from exc
        if name not in LOADED:
            LOADED.append(name)
            log.debug("loaded plugin module %s", name)
    return tuple(names)


def load_entry_points() -> list[str]:
    """Load every entry point of ``interpscale.families``: a module (registering on import) or
    a callable taking no arguments (called once)."""
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        label = f"{ep.name} = {ep.value}"
        if label in ENTRY_POINTS:
            continue
        obj = ep.load()
        if callable(obj) and not isinstance(obj, type):
            obj()
        ENTRY_POINTS.append(label)
    return list(ENTRY_POINTS)


def where_looked(name: str) -> str:
    """What an unknown family's message adds: where the lookup looked, how to register."""
    eps = [f"{ep.name} = {ep.value}" for ep in entry_points(group=ENTRY_POINT_GROUP)]
    return (f"Looked in the built-in families, the plugin modules imported in this process "
            f"({', '.join(LOADED) or 'none'}) and the entry points of group {ENTRY_POINT_GROUP!r} "
            f"({', '.join(eps) or 'none installed'}). To add {name!r}: call "
            f"interpscale.models.register_family({name!r}, builder, ...) in a module and name the module with "
            f"--plugin MODULE or [plan] plugins = [\"MODULE\"], or declare it as an entry point in the group "
            f"{ENTRY_POINT_GROUP!r} (docs/own-model.md)")
