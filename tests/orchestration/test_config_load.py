"""Issue 46.3: a preset is loaded in one place, ``Preset.load(source, **overrides)``: the TOML
read, the older spellings mapped, every key's type, every value's range (the fields' metadata)
and the facts sections must agree on checked once, before anything runs; overrides are
checked as if the TOML said them; ``plan`` and ``Sweep`` take the sections whole."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest

from interpscale.errors import ConfigError
from interpscale.orchestration import PlanOptions, Preset
from interpscale.orchestration.config import validate_config

ROOT = Path(__file__).resolve().parents[2]
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
    tree = Preset.load(path)
    assert tree.source == str(path) and Preset.load(tree.to_table()).to_table() == tree.to_table()


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
        plan(bad, PlanOptions(flops_per_s=1e9))


def test_micro_batch_must_divide_the_batch():
    # the cross-check covers any [train] micro-batch option the RunSpec offers
    from interpscale.orchestration.config import _cross_checks

    c = cfg()
    c["train"]["micro_batch_size"] = 3
    with pytest.raises(ConfigError, match=r"micro_batch_size = 3 does not divide the batch \(8 sequences\)"):
        _cross_checks(c, "my.toml")
    c["train"]["micro_batch_size"] = 4
    _cross_checks(c, "my.toml")
    c["train"] = {"micro_batch_tokens": 96}
    with pytest.raises(ConfigError, match=r"\(256 tokens\)"):
        _cross_checks(c, "my.toml")


def test_overrides_are_checked_as_the_toml_would_be(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(BASE)
    tree = Preset.load(path, families=["ar"], sizes=None, lr=1e-3, micro_batch_tokens=64, max_parallel=3, n_boot=9,
                       size_presets={"L1d16": {"base": "nano", "n_layers": 1, "d_model": 16, "n_heads": 2}})
    assert tree.plan.families == ["ar"] and tree.plan.sizes == ["nano"]  # None keeps the preset's
    assert tree.plan.slices == {"ar": [1e9]}  # a per-family slice table narrows with the families
    assert tree.recipe.lr == 1e-3 and tree.train.micro_batch_tokens == 64
    assert tree.launch.max_parallel == 3 and tree.fit.n_boot == 9 and "L1d16" in tree.size_presets
    assert Preset.load(tree) is tree  # a tree without overrides is itself
    for kw, message in [(dict(tolerance=1.5), r"^.*p\.toml: \[plan\] tolerance = 1\.5: must be in \(0, 1\)$"),
                        (dict(tokens_per_param=(30, 10)), r"tokens_per_param = \[30, 10\]: expected \[low, high\]"),
                        (dict(sizes=["nanno"]), r"unknown size 'nanno'; did you mean 'nano'"),
                        (dict(lr=-1.0), r"\[train\] lr = -1\.0: must be positive"),
                        (dict(max_parallel=0), r"\[launch\] max_parallel = 0: must be positive")]:
        with pytest.raises(ConfigError, match=message):
            Preset.load(path, **kw)
    with pytest.raises(ValueError, match=r"unknown training option\(s\) \['learning_rate'\]; allowed: .*'lr'"):
        Preset.load(path, learning_rate=1.0)


def test_the_recipe_is_a_typed_section_of_the_runspec_fields():
    from dataclasses import fields

    from interpscale.orchestration.config import OVERRIDE_SECTIONS, PLANNED, Recipe, section_types
    from interpscale.orchestration.spec import RunSpec

    assert {f.name for f in fields(Recipe)} == {f.name for f in fields(RunSpec)} - PLANNED
    assert section_types(Recipe)["betas"][0] == (list,) and section_types(Recipe)["lr"][0] == (int, float)
    assert Preset.load(cfg()).recipe.given() == {"lr": 3e-3, "vocab_size": 256}
    names = [f.name for c in ("plan", "train", "launch", "observe", "fit") for f in
             fields(Preset.__dataclass_fields__[c].default_factory())] + [f.name for f in fields(Recipe)]
    assert len(names) == len(set(names)) == len(OVERRIDE_SECTIONS)  # an override's name says its section


def test_plan_and_sweep_take_sections_whole(tmp_path, make_spec, caplog):
    import inspect
    import logging

    from interpscale import orchestration
    from interpscale.orchestration import Sweep, planner
    from interpscale.orchestration.config import LaunchConfig

    assert importlib.util.find_spec("interpscale.orchestration.config_schema") is None
    for fn in (planner.plan, orchestration.plan):
        assert len(inspect.signature(fn).parameters) <= 3, fn
    sw = Sweep([make_spec("ar", steps=5)], tmp_path / "sw", LaunchConfig(max_parallel=3, gpus_per_node=1))
    assert (sw.max_parallel, sw.tasks_per_node, sw.launch_config.max_parallel) == (3, 1, 3)
    # the earlier keywords still work for one release, with one deprecation line each
    with caplog.at_level(logging.WARNING, logger="interpscale.orchestration.config"):
        for _ in range(2):
            old = Sweep([make_spec("ar", steps=5)], tmp_path / "sw", executor="debug", max_parallel=4,
                        slurm={"timeout_min": 5})
    assert (old.max_parallel, old.executor, old.launch_config.timeout_min) == (4, "debug", 5)
    lines = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert len(lines) <= 1 and all("LaunchConfig(...)" in m for m in lines)


def test_plan_keywords_of_the_earlier_spelling(tmp_path, caplog):
    import logging

    from interpscale.orchestration import plan

    path = tmp_path / "p.toml"
    path.write_text(BASE)
    new = plan(Preset.load(path, families=["ar"], sizes=["nano"]), PlanOptions(flops_per_s=1e9, all_sizes=True))
    with caplog.at_level(logging.WARNING, logger="interpscale.orchestration.config"):
        old = plan(path, families=["ar"], sizes=["nano"], flops_per_s=1e9)
    assert [r.run_id for r in old.runs] == [r.run_id for r in new.runs] and len(new.runs) == 1
    assert new.table.drop(columns=["est_runtime_s", "est_run_s"]).equals(
        old.table.drop(columns=["est_runtime_s", "est_run_s"]))


def test_each_launch_default_is_written_once():
    """A [launch] / [plan] / [train] default lives on its field in config.py; the Sweep, the
    planner and the executors read it from there (``max_parallel = 2`` was written three times)."""
    import re
    from dataclasses import fields

    from interpscale.orchestration.config import SECTION_CLASSES

    names = sorted({f.name for c in SECTION_CLASSES.values() for f in fields(c)})
    literal = re.compile(rf"\b({'|'.join(names)})\s*(?::[^=\n,()]*)?=\s*(-?\d[\d.e+-]*|\"[^\"]*\"|True|False)(?=[\s,)#])")
    src = ROOT / "src" / "interpscale"
    files = [*(src / "orchestration").glob("*.py"), src / "executors.py", src / "pipeline.py"]
    found = [f"{p.name}:{i}: {m.group(0)}" for p in files if p.name != "config.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) for m in [literal.search(line)]
             if m and "==" not in line]
    # the Checkpointer and the executors' one-node launch are used outside a preset too
    allowed = {"save_every_s: float = 60.0", "tasks_per_node: int = 1", "nodes: int = 1",
               "max_parallel: int = 1"}
    assert [f for f in found if f.split(": ", 1)[1] not in allowed] == []
    assert not [f for f in found if "max_parallel" in f and "= 2" in f]
