"""Issue 34.1: a preset is one typed tree (orchestration.config); each section validates itself
from its fields and travels whole to its component (TrainConfig to the Trainer, through the
job's JobConfig); a trainer setting is one field plus its use (``compile_mode`` is the example:
its TOML key, schema check and CLI flags come from the field)."""

from __future__ import annotations

import tomllib

import pytest

from interpscale.cli import build_parser
from interpscale.errors import ConfigError
from interpscale.orchestration import PlanOptions, Sweep, plan
from interpscale.orchestration.config import LaunchConfig, ObserveConfig, Preset, Recipe, TrainConfig, validate_config
from interpscale.orchestration.launch import JobConfig

PRESET = """
[plan]
families = ["ar"]
sizes = ["nano"]
seq_len = 32
batch_tokens = 128
slices = [2e8]
[model]
vocab_size = 128
[train]
lr = 3e-3
vocab_size = 128
compile_mode = "max-autotune"
micro_batch_tokens = 64
[data]
kind = "synthetic"
n_concepts = 6
n_docs = 120
[launch]
executor = "debug"
max_parallel = 3
n_boot = 7
[observe]
tensorboard = false
"""


@pytest.fixture
def preset(tmp_path):
    p = tmp_path / "tree.toml"
    p.write_text(PRESET)
    return p


def test_the_preset_is_a_tree_of_typed_sections(preset):
    tree = Preset.load(preset)
    assert tree.train == TrainConfig(compile_mode="max-autotune", micro_batch_tokens=64)
    assert tree.recipe == Recipe(lr=3e-3, vocab_size=128)  # the RunSpec's part of [train], typed
    assert tree.recipe.given() == {"lr": 3e-3, "vocab_size": 128}
    assert tree.launch == LaunchConfig(executor="debug", max_parallel=3)
    assert tree.fit.n_boot == 7  # [launch] n_boot, kept from before [fit]
    assert tree.observe == ObserveConfig(tensorboard=False)
    assert tree.plan.families == ["ar"] and tree.plan.seq_len == 32
    # [launch] trainer keys of earlier presets land in [train]'s section
    old = tomllib.loads(PRESET.replace("micro_batch_tokens = 64\n", "")
                        .replace("n_boot = 7", "micro_batch_tokens = 32"))
    assert Preset.load(old).train.micro_batch_tokens == 32


@pytest.mark.parametrize("replace,message", [
    ('compile_mode = "max-autotune"', r"\[train\] compile_mode = 'max-autotun': expected one of default, "
                                      r"reduce-overhead, max-autotune.*; did you mean 'max-autotune'\?"),
    ("micro_batch_tokens = 64", r"\[train\] micro_batch_tokens = 'x': expected an integer \(tokens per rank"),
    ("tensorboard = false", r"\[observe\] tensorboard = 1: expected true or false, got an integer"),
    ("max_parallel = 3", r"\[launch\] max_parallel = 0: must be positive"),
    ("n_boot = 7", r"\[launch\]: unknown key 'n_bot'; did you mean 'n_boot'"),
])
def test_each_section_checks_its_fields(preset, replace, message):
    bad = {'compile_mode = "max-autotune"': 'compile_mode = "max-autotun"', "micro_batch_tokens = 64":
           'micro_batch_tokens = "x"', "tensorboard = false": "tensorboard = 1", "max_parallel = 3": "max_parallel = 0",
           "n_boot = 7": "n_bot = 7"}[replace]
    with pytest.raises(ConfigError, match=message):
        validate_config(tomllib.loads(PRESET.replace(replace, bad)), "my.toml")


def test_train_config_travels_whole_from_preset_to_trainer(preset, tmp_path, monkeypatch):
    p = plan(preset, PlanOptions(flops_per_s=1e9))
    assert p.config.train.compile_mode == "max-autotune"
    sw = Sweep.from_plan(p, tmp_path / "sw", max_parallel=1, compile=False)  # flag overrides, by field name
    assert sw.train == TrainConfig(compile_mode="max-autotune", micro_batch_tokens=64, compile=False)
    assert sw.observe is p.config.observe and sw.max_parallel == 1 and sw.executor == "debug"
    assert Sweep.from_plan(p, tmp_path / "sw").train is p.config.train  # not re-typed or re-mapped
    sent = []
    monkeypatch.setattr(Sweep, "_run", lambda self, fn, groups, args, wait, what: sent.append(args) or [])
    sw.launch(wait=False)
    (job,) = sent[0]  # the job receives one config object, not a tuple of settings
    assert isinstance(job, JobConfig) and job.train is sw.train and job.observe is sw.observe
    assert job.data_root == str(tmp_path / "sw" / "_data")


def test_the_trainer_takes_its_section_and_settings_by_field_name(tmp_path, make_spec):
    from interpscale.orchestration import Trainer

    spec = make_spec("ar", steps=4)
    cfg = TrainConfig(compile_mode="reduce-overhead", save_every_steps=2)
    tr = Trainer(spec, tmp_path / "r", config=cfg, observe=ObserveConfig(tensorboard=False), progress=False)
    assert tr.config is cfg and tr.observe.tensorboard is False
    tr = Trainer(spec, tmp_path / "r", config=cfg, micro_batch_tokens=64, tensorboard=False, progress=False)
    assert tr.config == TrainConfig(compile_mode="reduce-overhead", save_every_steps=2, micro_batch_tokens=64)
    assert tr.n_micro == 2 and tr.observe.tensorboard is False
    with pytest.raises(TypeError, match="unknown setting 'compile_mod'; did you mean 'compile_mode'"):
        Trainer(spec, tmp_path / "r", compile_mod="default")


@pytest.mark.parametrize("command,argv", [("train", ["RUN"]), ("sweep", ["launch", "--preset", "p"])])
def test_trainer_flags_come_from_the_fields(command, argv):
    args = build_parser(command).parse_args([command, *argv, "--compile-mode", "max-autotune", "--no-compile",
                                             "--micro-batch-tokens", "64", "--parallel", "fsdp"])
    from interpscale.orchestration.config import flag_values

    assert TrainConfig(**flag_values(args, TrainConfig)) == TrainConfig(
        compile_mode="max-autotune", compile=False, micro_batch_tokens=64, parallel="fsdp")
    with pytest.raises(SystemExit):
        build_parser(command).parse_args([command, *argv, "--compile-mode", "fastest"])
