"""One registry class for every "name -> how to do it" table (model families, loss estimators,
laws, forecast methods, calibration rules, executors, figures, judge kinds), shaped like
lm-evaluation-harness's ``Registry``. A lazy ``"module:object"`` entry is imported the first
time it is looked up, so a registry can name what it does not load yet; ``on_miss`` (e.g.
loading entry points) runs once before a name is declared unknown.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator, Mapping
from typing import Callable, Generic, Optional, TypeVar

from interpscale.errors import UserError

T = TypeVar("T")


def resolve(path: str):
    """The object a lazy ``"module:object"`` path names (imported now)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


class Registry(Mapping, Generic[T]):
    """Named entries of one ``kind`` (e.g. "model family"), read as a mapping; ``hint(name)`` ends
    an unknown name's message (where it looked, how to register)."""

    def __init__(self, kind: str, *, hint: Optional[Callable[[str], str]] = None,
                 on_miss: Optional[Callable[[], None]] = None) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._hint = hint
        self._on_miss = on_miss
        self._missed = False
        self._lazy: set[str] = set()

    def register(self, name: str, item: T, *, overwrite: bool = False, lazy: bool = False) -> T:
        """Add ``item`` under ``name``; with ``lazy=True`` ``item`` is a ``"module:object"`` path."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")
        if name in self._items and not overwrite:
            raise ValueError(f"{self.kind} {name!r} is already registered (pass overwrite=True to replace it)")
        if lazy and not (isinstance(item, str) and item.count(":") == 1):
            raise ValueError(f"lazy {self.kind} {name!r} must be a 'module:object' string, got {item!r}")
        self._items[name] = item
        (self._lazy.add if lazy else self._lazy.discard)(name)
        return item

    def _resolved(self, name: str) -> T:
        if name in self._lazy:  # import on first use, then keep the object
            self._items[name] = resolve(self._items[name])
            self._lazy.discard(name)
        return self._items[name]

    def pop(self, name: str, *default):
        self._lazy.discard(name)
        return self._items.pop(name, *default)

    def _load_missing(self, name: str) -> bool:
        if name not in self._items and self._on_miss is not None and not self._missed:
            self._missed = True  # once per process: entry points do not appear while it runs
            self._on_miss()
        return name in self._items

    def lookup(self, name: str) -> T:
        """The entry ``name``; unknown names raise a UserError naming the registered ones."""
        if self._load_missing(name):
            return self._resolved(name)
        close = difflib.get_close_matches(str(name), list(self._items), n=1)
        msg = f"unknown {self.kind} {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
        msg += f"; registered: {', '.join(sorted(self._items))}"
        raise UserError(msg + (f". {self._hint(name)}" if self._hint else ""))

    # Mapping
    def __getitem__(self, name: str) -> T:
        if not self._load_missing(name):
            raise KeyError(name)
        return self._resolved(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._load_missing(name)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._items)})"
