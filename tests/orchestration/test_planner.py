"""IsoFLOP planner, presets, RunSpec and the WSD schedule."""

import math

import pytest

from interpscale.orchestration import PlanOptions, Preset, RunSpec, plan
from interpscale.orchestration.spec import lr_at, reservoir_steps, segments

# Table 24 of the Steerling paper
TABLE24 = {"ar": [6e18, 1e19, 3e19, 1e20], "cdlm": [6e18, 1e19, 3e19, 1e20],
           "ar+concept": [1e19, 3e19, 1.1e20, 3.09e20], "cdlm+concept": [1e19, 3e19, 1.1e20, 3.09e20]}


@pytest.fixture(scope="module")
def paper():
    return plan("paper", PlanOptions(flops_per_s=1e15))


def test_paper_plan_reproduces_table24(paper):
    for fam, targets in TABLE24.items():
        runs = [r for r in paper.runs if r.family == fam]
        assert sorted({r.slice_flops for r in runs}) == targets
        for c in targets:
            in_slice = [r for r in runs if r.slice_flops == c]
            assert 4 <= len(in_slice) <= 6, (fam, c, [r.size for r in in_slice])  # §8.1: four to six sizes
    for r in paper.runs:
        assert abs(r.flops - r.slice_flops) / r.slice_flops <= 0.15
        assert r.seq_len == 4096 and r.batch_tokens == 524_288 and r.batch_size == 128
        assert r.tokens % r.batch_tokens == 0 and r.flops == pytest.approx(r.flops_per_token * r.tokens)
        assert (r.lr, r.betas, r.eps, r.weight_decay, r.grad_clip) == (4e-4, (0.9, 0.95), 1e-8, 0.1, 1.0)


def test_paper_plan_prices_table23_models(paper):
    # Eq. 23 with Table 23's backbones: the 200M AR model has ~197.7M non-embedding params
    r = next(r for r in paper.runs if r.family == "ar" and r.size == "200M")
    assert r.params == pytest.approx(197.7e6, rel=0.01)
    L, d, N = 13, 1024, 4096
    assert r.flops_per_token == pytest.approx(6 * r.params + 12 * L * d * N, rel=1e-9)
    # the dry-run table reports every point, including skipped ones, with an error column
    t = paper.table
    assert {"family", "size", "P", "M", "C_target", "D", "steps", "C_err_pct", "est_runtime_s", "status"} <= set(t)
    assert (t.status != "ok").any() and t.loc[t.status == "ok", "C_err_pct"].abs().max() <= 15


def test_run_ids_are_deterministic_and_distinct(paper):
    ids = [r.run_id for r in paper.runs]
    assert len(set(ids)) == len(ids)
    r = paper.runs[0]
    assert RunSpec.from_dict(r.to_dict()).run_id == r.run_id
    assert RunSpec.from_dict({**r.to_dict(), "seed": 1}).run_id != r.run_id


def test_demo_presets_have_the_required_grid():
    for preset in ("demo", "demo-quick"):
        p = plan(preset, PlanOptions(flops_per_s=1e10))
        fams = {r.family for r in p.runs}
        assert fams == {"ar", "cdlm", "ar+concept", "cdlm+concept"}
        for f in fams:
            slices = {r.slice_flops for r in p.runs if r.family == f}
            assert len(slices) >= 3
            for c in slices:
                assert len([r for r in p.runs if r.family == f and r.slice_flops == c]) >= 4


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="unknown preset 'nope'"):
        plan("nope")
    options = PlanOptions(flops_per_s=1e10)
    with pytest.raises(ValueError, match="unknown family 'gpt5'"):
        Preset.load("demo", families=["gpt5"])
    with pytest.raises(ValueError, match="unknown size 'huge'"):
        Preset.load("demo", sizes=["huge"])
    with pytest.raises(ValueError, match="no size fits slice C=1e\\+06"):
        plan(Preset.load("demo", families=["ar"], slices=[1e6]), options)
    with pytest.raises(ValueError, match="not a multiple of seq_len"):
        Preset.load("demo", batch_tokens=100)
    with pytest.raises(ValueError, match="unknown training option"):
        Preset.load("demo", learning_rate=1.0)
    # D below one batch: flagged in the table, not planned (strict=False keeps going)
    tree = Preset.load("demo", families=["ar"], sizes=["nano", "micro"], slices=[5e7, 5e10])
    p = plan(tree, PlanOptions(flops_per_s=1e10, strict=False, all_sizes=True))
    small = p.table[p.table.C_target == 5e7]
    assert small.status.str.contains("one batch").all()
    assert all(r.slice_flops == 5e10 for r in p.runs)
    with pytest.raises(ValueError, match="smaller than one batch"):
        RunSpec(family="ar", size="nano", slice_flops=1, flops=1, params=1, tokens=10, seq_len=8, batch_tokens=64)


def test_wsd_schedule_and_segments():
    base = dict(family="ar", size="nano", slice_flops=1.0, flops=1.0, params=1, seq_len=8, batch_tokens=64)
    long = RunSpec(tokens=64 * 200_000, **base)
    assert long.warmup_steps == 2000  # min(2000, 2% of 200k)
    short = RunSpec(tokens=64 * 1000, lr=1e-3, reservoir=2, **base)
    assert short.warmup_steps == 20 and short.stable_steps == 800 and short.decay_steps == 200
    segs = segments(short)
    assert [(s.name, s.start, s.end) for s in segs] == [
        ("stable", 0, 800), ("anneal@800", 800, 1000), ("anneal@267", 267, 334), ("anneal@533", 533, 666)]
    assert reservoir_steps(short) == [267, 533]
    st, an = segs[0], segs[1]
    assert lr_at(short, st, 0) == pytest.approx(1e-3 / 20) and lr_at(short, st, 19) == pytest.approx(1e-3)
    assert lr_at(short, st, 799) == pytest.approx(1e-3)
    assert lr_at(short, an, 800) == pytest.approx(1e-3) and lr_at(short, an, 999) == pytest.approx(1e-3 / 200)
    # each anneal branch is itself an 80/20 run (App. I)
    for s in segs[2:]:
        assert s.length / s.end == pytest.approx(0.2, abs=0.01)
    assert math.isclose(sum(lr_at(short, an, k) for k in range(800, 1000)), 1e-3 * 100.5)


def test_presets_fall_back_to_the_installed_copy(tmp_path, monkeypatch):
    """Outside a source checkout the planner reads <prefix>/share/interpscale/configs."""
    from interpscale.orchestration import config

    (tmp_path / "mine.toml").write_text('[sweep]\nfamilies = ["ar"]\n')
    monkeypatch.setattr(config, "CONFIG_DIR", tmp_path / "no-checkout")
    monkeypatch.setattr(config, "INSTALLED_CONFIG_DIR", tmp_path)
    assert config.list_presets() == ["mine"]
    assert config.load_preset("mine")["sweep"]["families"] == ["ar"]
    with pytest.raises(ValueError, match="unknown preset 'demo'.*mine"):
        config.load_preset("demo")


def test_preset_data_paths_are_relative_to_the_toml(tmp_path, monkeypatch):
    from interpscale.orchestration import config

    cfg_dir = tmp_path / "study"
    cfg_dir.mkdir()
    (cfg_dir / "mine.toml").write_text('[data]\nkind = "jsonl"\npath = ["shards/a.jsonl", "/abs/b.jsonl"]\n'
                                       'concepts = "concepts.json"\n')
    monkeypatch.chdir(tmp_path)  # somewhere else than the TOML's directory
    data = config.load_preset(cfg_dir / "mine.toml")["data"]
    assert data["path"] == [str(cfg_dir.resolve() / "shards/a.jsonl"), "/abs/b.jsonl"]
    assert data["concepts"] == str(cfg_dir.resolve() / "concepts.json") and data["kind"] == "jsonl"


def test_wheel_ships_every_preset(tmp_path):
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(root)], check=True, capture_output=True)
    (whl,) = tmp_path.glob("interpscale-*.whl")
    shipped = {Path(n).name for n in zipfile.ZipFile(whl).namelist() if "/share/interpscale/configs/" in n}
    assert shipped == {p.name for p in (root / "configs").glob("*.toml")} and "demo.toml" in shipped


def _preset_with(tmp_path, data_extra: str, model_extra: str = "") -> str:
    """The demo preset with its [data] / [model] sections replaced."""
    from interpscale.orchestration.config import config_dir

    text = (config_dir() / "demo.toml").read_text()
    head = text[: text.index("[model]")]
    path = tmp_path / "p.toml"
    path.write_text(head + f"[model]\nvocab_size = 512\n{model_extra}\n[train]\nvocab_size = 512\nlr = 3e-3\n"
                    f"[data]\nkind = \"synthetic\"\n{data_extra}\n")
    return str(path)


def test_planner_prices_the_data_concepts_and_the_lm_head(tmp_path):
    from interpscale.models import build_model
    from interpscale import paper
    from interpscale.models.config import make_config

    p = plan(Preset.load(_preset_with(tmp_path, "n_concepts = 40"), families=["ar+concept", "ar"]),
             PlanOptions(flops_per_s=1e10, strict=False))
    row = p.table[(p.table.family == "ar+concept") & (p.table["size"] == "nano")].iloc[0]
    assert row.n_concepts == 40
    # M is Eq. 24 of the model that trains: the backbone plus concept terms at n = 40 concepts
    base = p.table[(p.table.family == "ar") & (p.table["size"] == "nano")].iloc[0]
    cfg = make_config("ar+concept", "nano", vocab_size=512, n_concepts=40)
    assert row.M - base.M == pytest.approx(paper.concept_module_flops(cfg.d_model, cfg.n_concepts, cfg.n_unknown, cfg.concept_rank))
    model = build_model("ar+concept", "nano", vocab_size=512, n_concepts=40)
    assert row.P == model.params_nonembedding()
    # LM head: 6·d·V per token, its own column, outside Eq. 23 but inside the runtime
    assert row.M_head == 6 * cfg.d_model * 512
    assert row.est_runtime_s == pytest.approx((row.M + row.M_head) * row.D / 1e10)
    # a [model] count that disagrees with the data is the model that would not be trained
    with pytest.raises(ValueError, match=r"n_concepts = 16 but \[data\] n_concepts = 40"):
        plan(_preset_with(tmp_path, "n_concepts = 40", "n_concepts = 16"), PlanOptions(flops_per_s=1e10))


def test_device_table_gives_gpu_hours():
    from interpscale.cli import main

    p = plan("paper", PlanOptions(device="h100"))
    ok = p.table[p.table.status == "ok"]
    hours = ((ok.M + ok.M_head) * ok.D).sum() / (989e12 * 0.40) / 3600
    assert ok.est_runtime_s.sum() / 3600 == pytest.approx(hours)
    assert 4000 < hours < 8000  # ~7e21 + LM-head FLOPs at 40% of an H100's dense bf16 peak
    assert f"estimated {hours:,.0f} H100-hours at 40% MFU" in p.summary()
    assert plan("paper", PlanOptions(device="a100", mfu=0.5)).table.est_runtime_s.sum() == pytest.approx(
        p.table.est_runtime_s.sum() * (989 * 0.40) / (312 * 0.5))
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        plan("paper", PlanOptions(device="tpu"))
    with pytest.raises(ValueError, match=r"MFU must be in \(0, 1\]"):
        plan("paper", PlanOptions(device="h100", mfu=1.5))
    assert main(["plan", "--preset", "paper", "--device", "h100"]) == 0
    cpu = plan("demo", PlanOptions(device="cpu"))
    assert "estimated total" in cpu.summary() and cpu.device["mfu"] == 0.30
