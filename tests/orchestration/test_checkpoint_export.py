"""Evaluation checkpoints without pickles (issue 35): safetensors directories that reload with
the same logits, `interpscale export` of old .pt files and of DCP states, and hf: exports that
`from_pretrained` loads with the same logits."""

import pytest
import torch

from interpscale.cli import main
from interpscale.models import DataFields, build_model, load_checkpoint, save_checkpoint
from interpscale.models.checkpoint import list_checkpoints, save_pretrained_dir
from interpscale.orchestration import train_run
from interpscale.orchestration.checkpointer import completed_states


def _no_torch_load(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("torch.load called on the safetensors path")

    monkeypatch.setattr(torch, "load", refuse)


@pytest.mark.parametrize("family", ["ar+concept", "cdlm"])
def test_our_families_reload_from_safetensors_with_the_same_logits(family, tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = build_model(family, "nano", data=DataFields(vocab_size=256)).eval()
    path = save_pretrained_dir(model, tmp_path / "ck", extra={"step": 7})
    assert sorted(p.name for p in path.iterdir()) == ["checkpoint.json", "model.safetensors"]
    _no_torch_load(monkeypatch)
    again, extra = load_checkpoint(path)
    tokens = torch.randint(4, 256, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(again.eval()(tokens).logits, model(tokens).logits, atol=0, rtol=0)
    assert extra == {"step": 7}


def test_export_of_an_old_hf_llama_checkpoint_loads_with_from_pretrained(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = build_model("hf:llama", "nano", data=DataFields(vocab_size=256)).eval()
    save_checkpoint(model, tmp_path / "old.pt", extra={"step": 3})
    assert main(["export", str(tmp_path / "old.pt"), "--out", str(tmp_path / "hf")]) == 0
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    tokens = torch.randint(4, 256, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(hf(tokens).logits, model.hf(tokens).logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(load_checkpoint(tmp_path / "hf")[0].eval()(tokens).logits,
                                   model(tokens).logits, atol=1e-5, rtol=0)


def test_export_of_a_dcp_stable_state_equals_its_evaluation_checkpoint(tmp_path, make_spec):
    spec = make_spec("ar", steps=20)
    run = tmp_path / "run"
    train_run(spec, run, data_root=tmp_path / "_data", progress=False)
    (state, marker), *_ = [s for s in completed_states(run / "state") if s[1]["step"] == spec.stable_steps]
    assert main(["export", str(state), "--out", str(tmp_path / "out")]) == 0
    a = load_checkpoint(tmp_path / "out")[0].state_dict()
    b = load_checkpoint(run / "checkpoints" / f"stable_step{spec.stable_steps:07d}")[0].state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_export_refuses_a_state_cut_short(tmp_path, capsys):
    (tmp_path / "resume_0000004_stable").mkdir()
    (tmp_path / "resume_0000004_stable" / ".metadata").write_bytes(b"")
    assert main(["export", str(tmp_path / "resume_0000004_stable"), "--out", str(tmp_path / "o")]) == 2
    assert "COMPLETE marker" in capsys.readouterr().err


def test_an_old_resume_pt_state_still_resumes_bit_exactly(tmp_path, make_spec):
    """A ``state/resume.pt`` of the releases before DCP (weights, whole AdamW state, RNG) resumes."""
    from interpscale.orchestration.checkpointer import load_sharded
    from interpscale.orchestration.parallel import LossModule
    from interpscale.orchestration.rundir import read_status
    from interpscale.orchestration.trainer import Trainer, build_run_model, open_run_data, param_groups

    spec = make_spec("ar", steps=20)
    train_run(spec, tmp_path / "ref", data_root=tmp_path / "_data", progress=False)
    run = tmp_path / "old"
    Trainer(spec, run, data_root=tmp_path / "_data", progress=False).run(stop_at_step=10)
    (state, marker), = completed_states(run / "state")
    model = build_run_model(spec, open_run_data(run))  # the DCP state rewritten as the old format
    opt = torch.optim.AdamW(param_groups(model, spec.weight_decay), lr=spec.lr, betas=spec.betas, eps=spec.eps)
    rng = load_sharded(LossModule(model), opt, state)["rng"]
    save_checkpoint(model, run / "state" / "resume.pt", extra={"segment": "stable", "step": 10,
                                                                "optimizer": opt.state_dict(), "rng": rng})
    import shutil

    shutil.rmtree(state)
    train_run(spec, run, data_root=tmp_path / "_data", progress=False)
    assert read_status(run)["resumed_at"] == [10] and not (run / "state" / "resume.pt").exists()
    final = lambda d: load_checkpoint([p for p in list_checkpoints(d / "checkpoints")  # noqa: E731
                                       if p.name.startswith("anneal")][-1])[0].state_dict()
    a, b = final(tmp_path / "ref"), final(run)
    assert all(torch.equal(a[k], b[k]) for k in a)
