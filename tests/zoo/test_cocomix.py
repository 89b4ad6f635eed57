"""CoCoMix: locally trained teacher + SAE, attribution targets, interleaving, baselines."""

import pytest
import torch

from interpscale.models import build_model, flops_per_token, load_checkpoint, params_nonembedding, save_checkpoint
from interpscale.models.zoo.cocomix import concept_targets, topk_keep
from interpscale.models.zoo.replace import override_output
from interpscale.orchestration.teachers import attach_frozen, prepare_cocomix_teacher

V = 128


@pytest.fixture(scope="module")
def teacher_setup(tmp_path_factory, make_batches, trainer):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    teacher = build_model("ar", "nano", vocab_size=V, max_seq_len=64)
    batches = make_batches(20, vocab=V)
    losses = trainer(teacher, batches, 100, lr=1e-2)
    assert losses[-1] < 2.0  # the teacher has learned the chain
    overrides = prepare_cocomix_teacher(teacher, batches, tmp_path_factory.mktemp("teacher"), width=128, k=8, steps=200)
    return teacher, batches, overrides


def _student(overrides, **kw):
    """Built from the overrides (no file read), then the teacher attached the trainer's way."""
    return attach_frozen(build_model("cocomix", "nano", vocab_size=V, max_seq_len=64, k_concept=8, insert_layer=1,
                                     **overrides, **kw))


def test_sequence_is_doubled_after_the_insertion_layer(teacher_setup):
    _, batches, ov = teacher_setup
    m = _student(ov)
    seen = []
    hooks = [b.register_forward_pre_hook(lambda _m, args: seen.append(args[0].shape[1])) for b in m.backbone.blocks]
    out = m(batches[0].tokens)
    for h in hooks:
        h.remove()
    T = batches[0].tokens.size(1)
    assert seen == [T, 2 * T]  # block 0 sees T tokens, block 1 (after insertion) sees 2T
    assert out.logits.shape == (8, T, V)


def test_interleaving_is_causal(teacher_setup):
    _, batches, ov = teacher_setup
    m = _student(ov).eval()
    x = batches[0].tokens[:1]
    x2 = x.clone()
    x2[:, 10:] = 5
    assert torch.allclose(m(x).logits[:, :10], m(x2).logits[:, :10], atol=1e-5)


def test_concept_loss_decreases_in_training(teacher_setup):
    _, batches, ov = teacher_setup
    torch.manual_seed(0)
    m = _student(ov)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    concept, lm = [], []
    for step in range(40):
        out = m.loss(batches[step % len(batches)], step)
        opt.zero_grad()
        out.total.backward()
        opt.step()
        concept.append(out.parts["concept"])
        lm.append(out.parts["lm"])
    assert sum(concept[-5:]) / 5 < 0.93 * sum(concept[:5]) / 5  # measured: 0.486 -> 0.42
    assert lm[-1] < lm[0]
    assert not any(p.requires_grad for p in m._frozen["teacher"].parameters())


def test_attribution_targets_leave_teacher_unchanged(teacher_setup):
    teacher, batches, ov = teacher_setup
    m = _student(ov)
    sae, layer = m._frozen["sae"], ov["teacher_layer"]
    x = batches[1].tokens
    idx = concept_targets(m._frozen["teacher"], sae, layer, x, k_attr=4)
    assert idx.shape == (8, x.size(1) - 1, 4) and int(idx.max()) < 128
    # same teacher logits with the SAE-plus-error substitution
    block = m._frozen["teacher"].backbone.blocks[layer - 1]
    with override_output(block, lambda _i, h: sae.decode(sae.encode(h)) + (h - sae.decode(sae.encode(h)))):
        sub = m._frozen["teacher"](x).logits
    assert torch.allclose(sub, m._frozen["teacher"](x).logits, atol=1e-5)


def test_topk_keep():
    z = torch.tensor([[1.0, -3.0, 2.0, -0.5]])
    assert topk_keep(z, 2).tolist() == [[1.0, 0.0, 2.0, 0.0]]


def test_baselines_and_accounting(teacher_setup):
    _, batches, ov = teacher_setup
    base_kw = dict(vocab_size=V, max_seq_len=64, insert_layer=1)
    pause = build_model("cocomix-pause", "nano", **base_kw)  # no teacher needed
    kd = attach_frozen(build_model("cocomix-kd", "nano", **base_kw, **ov))
    for m in (pause, kd):
        out = m.loss(batches[0], 0)
        out.total.backward()
    assert "kd" in kd.loss(batches[0], 0).parts and set(pause.loss(batches[0], 0).parts) == {"lm"}
    # analytic = built, and FLOPs: interleaving doubles the upper layer's cost
    coco = _student(ov)
    for fam, m in (("cocomix", coco), ("cocomix-pause", pause)):
        kw = dict(base_kw, **(dict(ov, k_concept=8) if fam == "cocomix" else {}))
        assert m.params_nonembedding() == params_nonembedding(fam, "nano", **kw)
        assert m.params_nonembedding() == sum(p.numel() for p in m.parameters()) - V * 32
    ar = build_model("ar", "nano", vocab_size=V)
    per_layer = (ar.params_nonembedding() - 32) / 2
    extra = pause.flops_per_token(64) - ar.flops_per_token(64)
    assert extra == pytest.approx(6 * per_layer + 36 * 32 * 64)  # upper layer: 2× weights, 4× attention
    assert flops_per_token("cocomix-kd", "nano", 64, **base_kw, **ov) > ar.flops_per_token(64)
    assert flops_per_token("cocomix-kd", "nano", 64, count_teacher=False, **base_kw) == pytest.approx(ar.flops_per_token(64))


def test_checkpoint_and_missing_teacher(teacher_setup, tmp_path):
    _, batches, ov = teacher_setup
    m = _student(ov)
    m2, _ = load_checkpoint(save_checkpoint(m, tmp_path / "c.pt"))
    x = batches[0].tokens[:2]
    assert torch.allclose(m(x).logits, m2(x).logits)
    assert not any(k.startswith("_frozen") or "teacher" in k for k in m.state_dict())
    bare = build_model("cocomix", "nano", vocab_size=V, max_seq_len=64, k_concept=8, insert_layer=1, **ov)
    assert bare.needs_teacher and not m.needs_teacher  # building read no file
    assert bare(x).logits.shape == (2, x.size(1), V)  # forward (evaluation) needs no teacher
    with pytest.raises(ValueError, match="needs a frozen teacher"):
        bare.loss(batches[0], 0)
    with pytest.raises(ValueError, match="no teacher_checkpoint"):
        attach_frozen(build_model("cocomix", "nano", vocab_size=V))
    with pytest.raises(ValueError, match="vocab_size"):
        attach_frozen(build_model("cocomix", "nano", vocab_size=2 * V, k_concept=8, insert_layer=1, **ov))


def test_cocomix_runs_through_the_training_pipeline(teacher_setup, tmp_path):
    from interpscale.orchestration import RunSpec, evaluate_run, train_run

    _, _, ov = teacher_setup
    over = {"n_concepts": 6, "k_concept": 8, "insert_layer": 1, **ov}
    seq, bt, steps = 32, 4 * 32, 10
    M = flops_per_token("cocomix", "nano", seq, vocab_size=V, **over)
    spec = RunSpec(family="cocomix", size="nano", slice_flops=M * steps * bt, flops=M * steps * bt,
                   params=params_nonembedding("cocomix", "nano", vocab_size=V, **over), tokens=steps * bt,
                   seq_len=seq, batch_tokens=bt, flops_per_token=M, vocab_size=V, lr=3e-3, log_every=5,
                   eval_batches=2, model_overrides=over,
                   data={"kind": "synthetic", "n_concepts": 6, "n_docs": 120, "entities_per_concept": 6})
    d = tmp_path / "runs" / spec.run_id
    assert train_run(spec, d, progress=False)["state"] == "done"
    table = evaluate_run(d)
    assert len(table) >= 1 and table["loss"].notna().all() and set(table["family"]) == {"cocomix"}
