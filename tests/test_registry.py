"""The one Registry class: eager and lazy ("module:object") entries, unknown names, entry points once."""

import pytest

from interpscale._registry import Registry
from interpscale.errors import UserError


def test_lazy_entry_is_imported_on_first_lookup_and_kept():
    reg = Registry("codec")
    reg.register("json", "json:dumps", lazy=True)
    reg.register("plain", str)
    import json
    assert reg.lookup("json") is json.dumps
    assert reg["json"] is json.dumps and "json" in reg and sorted(reg) == ["json", "plain"]


def test_lazy_entry_must_name_module_and_object():
    with pytest.raises(ValueError, match="module:object"):
        Registry("codec").register("bad", "json.dumps", lazy=True)


def test_unknown_name_says_what_is_registered_and_the_closest():
    reg = Registry("law", hint=lambda name: "register one with register_law")
    reg.register("chinchilla", "json:dumps", lazy=True)
    with pytest.raises(UserError, match=r"unknown law 'chinchila' \(did you mean 'chinchilla'\?\); registered: chinchilla\. register"):
        reg.lookup("chinchila")


def test_on_miss_runs_once_and_can_register():
    calls = []
    reg = Registry("family", on_miss=lambda: (calls.append(1), reg.register("late", 3)))
    assert reg.lookup("late") == 3 and "nope" not in reg and calls == [1]


def test_re_registering_needs_overwrite():
    reg = Registry("judge kind")
    reg.register("a", 1)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a", 2)
    reg.register("a", "json:loads", overwrite=True, lazy=True)
    import json
    assert reg["a"] is json.loads
