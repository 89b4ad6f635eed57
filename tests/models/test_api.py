"""Bad input, checkpoints, schedules and the registry."""

import math

import pytest
import torch

from interpscale.models import (
    FAMILIES, SIZES, build_model, load_checkpoint, make_config, params_nonembedding, register_family,
    save_checkpoint,
)
from interpscale.models.config import ModelConfig
from interpscale.models.objectives import alpha_schedule, mask_tokens, noise_center, sample_noise_levels
from interpscale.models.types import Batch, PhaseSchedule


# --- bad input -------------------------------------------------------------------
@pytest.mark.parametrize("family", ["ar", "cdlm+concept"])
def test_bad_tokens(family, tiny):
    model = tiny(family)
    good = torch.randint(4, 512, (2, 16))
    with pytest.raises(ValueError, match="dtype"):
        model(good.float())
    with pytest.raises(ValueError, match=r"shape \[B, T\]"):
        model(good[0])
    with pytest.raises(ValueError, match="token ids must be in"):
        model(torch.full((2, 16), 512))
    with pytest.raises(ValueError, match="token ids must be in"):
        model(torch.full((2, 16), -1))
    with pytest.raises(ValueError, match="torch.Tensor"):
        model([[1, 2]])
    with pytest.raises(ValueError, match="max_seq_len"):
        model(torch.randint(4, 512, (1, 1024)))


def test_block_multiple_required(tiny):
    model = tiny("cdlm")
    with pytest.raises(ValueError, match="multiple of block_size=16"):
        model(torch.randint(4, 512, (1, 20)))
    with pytest.raises(ValueError, match="multiple of block_size"):
        model.loss(Batch(torch.randint(4, 512, (1, 20))), 0)
    tiny("ar")(torch.randint(4, 512, (1, 20)))  # AR has no block constraint


def test_bad_concept_labels(tiny, chunked):
    model = tiny("ar+concept")
    tok = torch.randint(4, 512, (2, 16))
    cid, lab = chunked(2, 16, 8)
    with pytest.raises(ValueError, match="width 7 != n_concepts=8"):
        model(tok, chunk_ids=cid, chunk_labels=lab[..., :7])
    with pytest.raises(ValueError, match="together"):
        model(tok, chunk_ids=cid)
    with pytest.raises(ValueError, match="chunk_ids shape"):
        model(tok, chunk_ids=cid[:, :8], chunk_labels=lab)
    with pytest.raises(ValueError, match="chunk_ids must be in"):
        model(tok, chunk_ids=cid + 5, chunk_labels=lab)
    with pytest.raises(ValueError, match="no concept module"):
        tiny("ar")(tok, chunk_ids=cid, chunk_labels=lab)


def test_bad_config_and_names():
    with pytest.raises(ValueError, match="unknown size"):
        build_model("ar", "7B")
    with pytest.raises(ValueError, match="unknown family"):
        build_model("transformer", "nano")
    with pytest.raises(ValueError, match="unknown model override"):
        build_model("ar", "nano", d_modle=64)
    with pytest.raises(ValueError, match="divisible"):
        make_config("ar", "nano", d_model=48, n_heads=5)
    with pytest.raises(ValueError, match="t_min"):
        make_config("cdlm", "nano", t_min=0.9, t_max=0.1)


# --- checkpoints -------------------------------------------------------------------
@pytest.mark.parametrize("family", ["ar", "cdlm+concept"])
def test_checkpoint_roundtrip(family, tiny, tmp_path):
    model = tiny(family).eval()
    path = save_checkpoint(model, tmp_path / "ck" / "step_10.pt", extra={"step": 10, "phase": "stable"})
    loaded, extra = load_checkpoint(path)
    assert extra == {"step": 10, "phase": "stable"}
    assert loaded.config == model.config and loaded.is_diffusion == model.is_diffusion
    tok = torch.randint(4, 512, (1, 16))
    assert torch.equal(loaded.eval()(tok).logits, model(tok).logits)
    assert not list((tmp_path / "ck").glob("*.tmp"))  # atomic write leaves no temp file


def test_checkpoint_rejects_mismatch(tiny, tmp_path):
    model = tiny("ar")
    path = save_checkpoint(model, tmp_path / "a.pt")
    payload = torch.load(path, weights_only=True)
    payload["config_json"] = payload["config_json"].replace('"d_model": 32', '"d_model": 64').replace(
        '"n_heads": 2', '"n_heads": 4').replace('"n_kv_heads": 2', '"n_kv_heads": 4')
    torch.save(payload, tmp_path / "b.pt")
    with pytest.raises(ValueError, match="does not match its config"):
        load_checkpoint(tmp_path / "b.pt")
    torch.save({"hello": 1}, tmp_path / "c.pt")
    with pytest.raises(ValueError, match="not an interpscale model checkpoint"):
        load_checkpoint(tmp_path / "c.pt")


# --- schedules ---------------------------------------------------------------------
def test_alpha_schedules_tables_25_26():
    cfg = make_config("cdlm+concept", "nano")
    stable = PhaseSchedule("stable", max_steps=1000)
    assert alpha_schedule(cfg, stable, 0) == (1.0, 1.0)
    ak, au = alpha_schedule(cfg, stable, 50)  # half way through the 0.1·T_max ramp
    assert ak == pytest.approx(0.75) and au == pytest.approx(0.75)
    ak, au = alpha_schedule(cfg, stable, 25)  # cosine is above linear early on
    assert ak == pytest.approx(0.5 + 0.25 * (1 + math.cos(math.pi * 0.25))) and au == pytest.approx(0.875)
    assert alpha_schedule(cfg, stable, 100) == pytest.approx((0.5, 0.5))
    assert alpha_schedule(cfg, stable, 900) == pytest.approx((0.5, 0.5))
    anneal = PhaseSchedule("anneal", max_steps=1000, anneal_steps=200, anneal_start=800)
    assert alpha_schedule(cfg, anneal, 800) == pytest.approx((0.5, 0.0))
    assert alpha_schedule(cfg, anneal, 900) == pytest.approx((0.25, 0.0))
    assert alpha_schedule(cfg, anneal, 1000) == pytest.approx((0.0, 0.0))


def test_anneal_switches_topk(tiny):
    model = tiny("cdlm+concept", n_concepts=40, topk_known=16)
    assert model.concept.topk == (16, None)
    model.set_phase(PhaseSchedule("anneal", 100, 20))
    assert model.concept.topk == (32, 128)
    with pytest.raises(ValueError, match="phase"):
        model.set_phase(PhaseSchedule("warmup", 10))  # type: ignore[arg-type]


def test_noise_levels_uniform_per_block_and_gaussian():
    g = torch.Generator().manual_seed(0)
    cfg = make_config("cdlm", "nano")  # block 16
    t = sample_noise_levels(cfg, 512, 64, 0, 100, generator=g)
    assert t.min() >= 0.05 and t.max() <= 0.95
    assert (t.view(512, 4, 16).std(-1) == 0).all()  # one t_b per block (§5.4.2)
    assert t[:, 0].mean() == pytest.approx(0.5, abs=0.03)
    cfg_g = make_config("cdlm", "nano", mask_schedule="gaussian", per_block_t=False)
    early = sample_noise_levels(cfg_g, 4000, 16, 0, 100, generator=g)[:, 0]
    late = sample_noise_levels(cfg_g, 4000, 16, 100, 100, generator=g)[:, 0]
    assert noise_center(cfg_g, 50, 100) == pytest.approx(0.5)
    assert early.mean() < 0.35 < 0.65 < late.mean()  # centre 0.2 → 0.8, σ 0.3, clipped
    assert early.min() >= 0.05 and late.max() <= 0.95


def test_mask_tokens_rate_and_at_least_one():
    g = torch.Generator().manual_seed(1)
    tok = torch.randint(4, 512, (200, 64))
    x_t, m = mask_tokens(tok, torch.full((200, 64), 0.3), 3, generator=g)
    assert m.float().mean() == pytest.approx(0.3, abs=0.01)
    assert torch.equal(x_t[m], torch.full_like(x_t[m], 3)) and torch.equal(x_t[~m], tok[~m])
    _, m = mask_tokens(tok, torch.zeros(200, 64), 3, generator=g)
    assert (m.sum(1) == 1).all()


# --- registry ---------------------------------------------------------------------
def test_register_family_and_lookup():
    with pytest.raises(ValueError, match="already registered"):
        register_family("ar", lambda size, **kw: None)
    register_family("_test_alias", lambda size, **kw: build_model("ar", size, **kw), overwrite=True)
    try:
        assert params_nonembedding("_test_alias", "nano") == params_nonembedding("ar", "nano")
    finally:
        FAMILIES.pop("_test_alias")
    assert FAMILIES["cdlm+concept"].is_diffusion and FAMILIES["cdlm+concept"].is_concept
    assert set(SIZES) >= {"nano", "micro", "tiny", "mini", "small", "10M", "5B"}


def test_config_roundtrip():
    cfg = make_config("cdlm+concept", "10M", n_concepts=100)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown ModelConfig fields"):
        ModelConfig.from_dict({**cfg.to_dict(), "bogus": 1})


def test_zoo_import_has_no_cycle():
    import subprocess
    import sys

    code = "import interpscale.models.zoo, interpscale.models as m; assert 'cdlm+concept' in m.FAMILIES"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
