"""Presets are validated before anything runs: names, types and cross-section facts."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from interpscale.errors import ConfigError
from interpscale.orchestration.config_schema import validate_config

ROOT = Path(__file__).resolve().parents[1]
BASE = """
[plan]
families = ["ar", "cdlm+concept"]
sizes = ["nano"]
seq_len = 32
batch_tokens = 256
[plan.slices]
"ar" = [1e9]
"cdlm+concept" = [1e9]
[model]
vocab_size = 256
[train]
lr = 3e-3
vocab_size = 256
[data]
kind = "synthetic"
n_concepts = 8
[launch]
executor = "local"
"""


def cfg(extra: str = "", replace: tuple[str, str] | None = None) -> dict:
    text = BASE if replace is None else BASE.replace(*replace)
    return tomllib.loads(text + extra)


@pytest.mark.parametrize("preset", sorted(p.name for p in (ROOT / "configs").glob("*.toml")) + ["tests/data/tiny-demo.toml"])
def test_every_shipped_preset_is_valid(preset):
    path = ROOT / ("configs/" + preset if not preset.startswith("tests") else preset)
    validate_config(tomllib.loads(path.read_text()), path)


@pytest.mark.parametrize("text,replace,message", [
    ("[dataa]\nkind = 'synthetic'\n", None, r"unknown section \[dataa\]; did you mean 'data'"),
    ("", ("families =", "familes ="), r"\[plan\]: unknown key 'familes'; did you mean 'families'"),
    ("", ('executor = "local"', 'executer = "local"'), r"unknown key 'executer'; did you mean 'executor'"),
    ("", ('executor = "local"', 'executor = "lcoal"'), r"executor = 'lcoal'.*did you mean 'local'"),
    ("", ("lr = 3e-3", 'lr = "fast"'), r"\[train\] lr = 'fast': expected a number, got a string"),
    ("", ("lr = 3e-3", "lr = -1.0"), r"lr = -1.0: must be positive"),
    ("", ("seq_len = 32", "seq_len = 32.5"), r"seq_len = 32.5: expected an integer"),
    ("", ('sizes = ["nano"]', 'sizes = ["nanno"]'), r"unknown size 'nanno'; did you mean 'nano'"),
    ("", ('families = ["ar", "cdlm+concept"]', 'families = ["ar", "cdlm+concpt"]'), r"did you mean 'cdlm\+concept'"),
    ("", ("batch_tokens = 256", "batch_tokens = 250"), r"batch_tokens = 250 is not a multiple of seq_len = 32"),
    ("", ("[model]", "[model]\nn_concepts = 12"), r"n_concepts = 12 but \[data\] n_concepts = 8"),
    ("", ("[model]", "[model]\nblock_size = 24"), r"block_size = 24, which does not divide \[plan\] seq_len = 32"),
    ("", ("vocab_size = 256\n[data]", "vocab_size = 384\n[data]"), r"\[train\] vocab_size = 384 but \[model\] vocab_size = 256"),
    ("", ('"ar" = [1e9]', '"arr" = [1e9]'), r"'arr' is not one of the planned families"),
    ("", ('"ar" = [1e9]', '"ar" = ["big"]'), r"expected a positive number of FLOPs"),
])
def test_bad_config_is_named(text, replace, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(cfg(text, replace), "my.toml")


def test_the_error_names_the_file_and_good_configs_pass():
    assert validate_config(cfg(), "ok.toml")["plan"]["seq_len"] == 32
    with pytest.raises(ConfigError, match=r"^my\.toml: "):
        validate_config(cfg("[oops]\n"), "my.toml")


def test_plan_validates_before_planning(tmp_path):
    from interpscale.orchestration.planner import plan

    bad = tmp_path / "bad.toml"
    bad.write_text(BASE.replace("[data]", "[dataa]"))
    with pytest.raises(ConfigError, match="dataa"):
        plan(bad, flops_per_s=1e9)


def test_micro_batch_must_divide_the_batch():
    # the cross-check covers any [train] micro-batch option the RunSpec offers
    from interpscale.orchestration.config_schema import _cross_checks

    c = cfg()
    c["train"]["micro_batch_size"] = 3
    with pytest.raises(ConfigError, match=r"micro_batch_size = 3 does not divide the batch \(8 sequences\)"):
        _cross_checks(c, "my.toml")
    c["train"]["micro_batch_size"] = 4
    _cross_checks(c, "my.toml")
    c["train"] = {"micro_batch_tokens": 96}
    with pytest.raises(ConfigError, match=r"\(256 tokens\)"):
        _cross_checks(c, "my.toml")
