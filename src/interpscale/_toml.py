"""A mapping written as TOML (the standard library reads TOML, it does not write it): the presets
``interpscale design`` recommends."""

from __future__ import annotations

from collections.abc import Mapping


def _toml_value(v) -> str:
    """One TOML value: bool, int, float (6 significant digits), string or list of them."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v) if isinstance(v, int) else f"{v:.6g}" if not float(v).is_integer() or abs(v) >= 1e6 \
            else f"{v:.1f}"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise ValueError(f"cannot write {v!r} to TOML")


def dumps(d: Mapping, prefix: str = "") -> str:
    """``d`` as TOML text: its plain keys, then each sub-mapping as a ``[table]`` (``tomllib`` reads it back)."""
    plain = [f"{_key(k)} = {_toml_value(v)}" for k, v in d.items() if not isinstance(v, Mapping)]
    out = ("\n".join(plain) + "\n") if plain else ""
    for k, v in d.items():
        if isinstance(v, Mapping):
            name = f"{prefix}{_key(k)}"
            out += f"\n[{name}]\n" + dumps(v, name + ".")
    return out


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else _toml_value(str(k))
