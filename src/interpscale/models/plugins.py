"""Plugin families (docs/own-model.md): modules named by ``--plugin MODULE`` / ``[plan] plugins``
(recorded in runs and checkpoints, so every process imports them before a family lookup), or
entry points of the group ``interpscale.families``, loaded the first time a name is not found."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Iterable

from interpscale.errors import UserError

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "interpscale.families"
LOADED: list[str] = []  # plugin modules imported in this process, in order
ENTRY_POINTS: list[str] = []  # "name = value" of the entry points loaded in this process


def load_plugins(modules: Iterable[str] | str | None) -> tuple[str, ...]:
    """Import each plugin (idempotent): a module name on the Python path or a ``.py`` file (recorded
    absolute, for other processes). A plugin that does not import is a UserError naming it."""
    names = [modules] if isinstance(modules, str) else list(modules or ())
    out = []
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise UserError(f"plugin module names must be non-empty strings, got {name!r}")
        name = _import(name)
        out.append(name)
        if name not in LOADED:
            LOADED.append(name)
            log.debug("loaded plugin %s", name)
    return tuple(out)


def _import(name: str) -> str:
    """Import one plugin; returns how runs record it (a module name, or an absolute file path)."""
    if not name.endswith(".py"):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise UserError(f"plugin module {name!r} does not import ({exc}); install it or put its directory "
                            f"on the Python path (or pass the path of its .py file)") from exc
        return name
    path = Path(name).resolve()
    if not path.is_file():
        raise UserError(f"plugin file {name} does not exist")
    module = sys.modules.get(path.stem)
    if module is None or Path(getattr(module, "__file__", "") or "").resolve() != path:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module  # its classes pickle and checkpoint as ``<stem>:<class>``
        try:
            spec.loader.exec_module(module)
        except ImportError as exc:
            del sys.modules[path.stem]
            raise UserError(f"plugin file {path} does not import ({exc})") from exc
    return str(path)


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
