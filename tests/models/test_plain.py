"""The plain-PyTorch model: memory-bounded loss, checkpoint compatibility, hooks, host-side
validation, activation checkpointing and the configurable special-token ids."""

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from interpscale.models import build_model, load_checkpoint
from interpscale.models.backbone import RMSNorm
from interpscale.models.objectives import chunked_cross_entropy, cross_entropy_sum
from interpscale.models.types import Batch, PhaseSchedule



class PeakMemory(TorchDispatchMode):
    """Peak bytes of CPU tensor storage created by ops while active: each op output with a
    new storage is counted until its tensor is garbage-collected (autograd's saved tensors
    and the backward pass's temporaries included)."""

    def __init__(self):
        super().__init__()
        self.live, self.now, self.peak = {}, 0, 0

    def _free(self, key):
        self.now -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                key = t.untyped_storage().data_ptr()
                if key and key not in self.live:
                    self.live[key] = t.untyped_storage().nbytes()
                    self.now += self.live[key]
                    self.peak = max(self.peak, self.now)
                    weakref.finalize(t, self._free, key)
        return out


def test_peak_memory_tracker_sees_allocations():
    with PeakMemory() as pm:
        a = torch.ones(1 << 20)  # 4 MiB
        del a
        b = torch.ones(1 << 19)  # 2 MiB, after a was freed
    assert pm.peak == 4 << 20 and pm.now == 2 << 20
    del b


def test_loss_peak_memory_at_100k_vocab_is_bounded_by_the_chunk():
    V, chunk, B, T = 100_000, 64, 2, 256
    torch.manual_seed(0)
    model = build_model("ar", "nano", n_layers=1, vocab_size=V, loss_chunk_tokens=chunk, max_seq_len=T)
    batch = Batch(torch.randint(4, V, (B, T)))
    with PeakMemory() as pm:
        model.loss(batch, 0).total.backward()
    chunk_logits, full_logits = chunk * V * 4, B * T * V * 4
    emb = V * model.config.d_model * 4  # the tied embedding's gradient (and its accumulation)
    assert pm.peak < 4 * chunk_logits + 4 * emb, (pm.peak, chunk_logits, emb)
    assert pm.peak < full_logits  # unchunked, logits + log-softmax + their gradient: ~3x this


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_chunked_cross_entropy_equals_unchunked(dtype):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(3, 50, 16, generator=g, dtype=dtype, requires_grad=True)
    w = torch.randn(97, 16, generator=g, dtype=dtype, requires_grad=True)
    targets = torch.randint(0, 97, (3, 50), generator=g)
    targets[0, :7] = -100
    ref = cross_entropy_sum(torch.nn.functional.linear(h, w), targets)
    for chunk in (1, 16, 64, 150, 1000):
        got = chunked_cross_entropy(h, w, targets, chunk)
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=0)
        for a, b in zip(torch.autograd.grad(got, (h, w)), torch.autograd.grad(ref, (h, w), retain_graph=True)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", ["cdlm", "ar+concept"])
def test_model_loss_chunked_and_checkpointed_equal_plain(family, tiny, chunked):
    """Chunked LM head and per-block activation checkpointing change memory, not values."""
    tok = torch.randint(4, 512, (2, 32))
    cid, lab = chunked(2, 32, 8)
    batch = Batch(tok, cid, lab) if family.endswith("concept") else Batch(tok)

    def loss_and_grads(**over):
        model = tiny(family, **over)
        torch.manual_seed(3)
        total = model.loss(batch, 5).total
        return total, torch.autograd.grad(total, list(model.parameters()), allow_unused=True)

    ref, g_ref = loss_and_grads(loss_chunk_tokens=4096)
    for over in (dict(loss_chunk_tokens=7), dict(activation_checkpointing=True, loss_chunk_tokens=16)):
        got, g_got = loss_and_grads(**over)
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=0)
        for a, b in zip(g_got, g_ref):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# The checkpoint layout written by the model code before the plain-PyTorch rewrite (commit
# 60a886e), copied from a cdlm+concept nano checkpoint it saved: its config (with the old
# `mask_token_id` field, refused since its deprecation release, and none of pad_id / eos_id / eoc_id / mask_id / loss_chunk_tokens)
# and its state-dict keys. The test writes a checkpoint in that layout from a seeded model.
PRE_PLAIN_CONFIG = {
    "alpha_known_floor": 0.5, "alpha_known_start": 1.0, "alpha_ramp_frac": 0.1, "alpha_unknown_floor": 0.5,
    "alpha_unknown_start": 1.0, "anneal_alpha_known": [0.5, 0.0], "anneal_alpha_unknown": 0.0,
    "anneal_topk_known": 32, "anneal_topk_unknown": 128, "block_size": 16, "clip_qkv": 10.0, "concept_rank": 4,
    "d_model": 32, "dropout": 0.0, "family": "cdlm+concept", "gauss_center": [0.2, 0.8], "gauss_sigma": 0.3,
    "indep_terms": 1, "init_std": 0.02, "lambda_concept": 1.0, "lambda_indep": 1.0, "lambda_rec": 1.0,
    "mask_schedule": "uniform", "mask_token_id": 3, "max_seq_len": 512, "mlp_ratio": 4.0, "n_concepts": 4,
    "n_heads": 2, "n_kv_heads": 2, "n_layers": 1, "norm_eps": 1e-06, "p_cfg": 0.1, "p_eps": 0.3, "per_block_t": True,
    "qk_norm": True, "rope_base": 500000.0, "size": "nano", "t_max": 0.95, "t_min": 0.05, "topk_known": 2,
    "topk_unknown": None, "unknown_ratio": 3, "vocab_size": 64,
}
PRE_PLAIN_KEYS = [
    "backbone.blocks.0.attn.k_norm.weight", "backbone.blocks.0.attn.q_norm.weight", "backbone.blocks.0.attn.wo.weight",
    "backbone.blocks.0.attn.wqkv.weight", "backbone.blocks.0.attn_norm.weight", "backbone.blocks.0.mlp.down.weight",
    "backbone.blocks.0.mlp.gate.weight", "backbone.blocks.0.mlp.up.weight", "backbone.blocks.0.mlp_norm.weight",
    "backbone.embed.weight", "backbone.norm.weight", "concept.known_emb", "concept.known_head.weight",
    "concept.unk_a", "concept.unk_b", "concept.unk_down.weight", "concept.unk_pred.weight",
]


def test_checkpoint_from_before_the_rewrite_loads_and_reproduces_logits(tmp_path):
    """The pre-rewrite layout loads with today's field names; its old `mask_token_id` key (the
    alias's deprecation release has passed) is refused, naming the field."""
    import json

    renamed = {("mask_id" if k == "mask_token_id" else k): v for k, v in PRE_PLAIN_CONFIG.items()}
    over = {k: v for k, v in renamed.items() if k not in ("family", "size")}
    torch.manual_seed(0)
    model = build_model("cdlm+concept", "nano", **over).eval()
    state = model.state_dict()
    assert sorted(state) == PRE_PLAIN_KEYS  # the rewrite kept every parameter name
    for name, cfg in (("old", PRE_PLAIN_CONFIG), ("new", renamed)):
        torch.save({"format": "interpscale-model/1", "family": "cdlm+concept",
                    "config_json": json.dumps(cfg, sort_keys=True),
                    "class": "interpscale.models.lm:SteerlingLM", "state_dict": state,
                    "extra": {"note": "pre-plain layout (commit 60a886e)"}}, tmp_path / f"{name}.pt")
    with pytest.raises(ValueError, match="mask_token_id"):
        load_checkpoint(tmp_path / "old.pt")
    loaded, extra = load_checkpoint(tmp_path / "new.pt")
    assert loaded.config.mask_id == 3 and "60a886e" in extra["note"]
    tokens = torch.randint(4, 64, (2, 32), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(loaded.eval()(tokens).logits, model(tokens).logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", ["ar", "cdlm+concept"])
def test_forward_hooks_fire_on_every_norm(family, tiny):
    model = tiny(family, n_layers=2)
    seen = []
    norms = [m for m in model.modules() if isinstance(m, RMSNorm)]
    for m in norms:
        m.register_forward_hook(lambda mod, i, o: seen.append(mod))
    assert len(norms) == 2 * 2 + 2 * 2 + 1  # post-attn, post-mlp, q-norm, k-norm per layer; final
    model.loss(Batch(torch.randint(4, 512, (1, 16))), 0)
    assert len(seen) == len(norms) and {id(m) for m in seen} == {id(m) for m in norms}


def test_check_batch_reports_bad_values(tiny, chunked):
    ar, cdlm = tiny("ar"), tiny("cdlm+concept")
    tok = torch.randint(4, 512, (2, 16))
    with pytest.raises(ValueError, match="token ids must be in"):
        ar.check_batch(Batch(torch.full((2, 16), 600)))
    with pytest.raises(ValueError, match="Batch"):
        ar.check_batch(tok)
    with pytest.raises(ValueError, match="no valid \\(input, target\\) pairs"):
        ar.check_batch(Batch(tok, valid=torch.eye(2, 16, dtype=torch.bool)))
    with pytest.raises(ValueError, match="no valid tokens"):
        cdlm.check_batch(Batch(tok, valid=torch.zeros(2, 16, dtype=torch.bool)))
    with pytest.raises(ValueError, match="valid shape"):
        ar.check_batch(Batch(tok, valid=torch.ones(2, 8, dtype=torch.bool)))
    cid, lab = chunked(2, 16, 8)
    with pytest.raises(ValueError, match="chunk_ids must be in"):
        cdlm.check_batch(Batch(tok, cid + 5, lab))
    cdlm.check_batch(Batch(tok, cid, lab))  # a good batch passes
    assert torch.isfinite(cdlm.loss(Batch(tok, cid, lab), 0).total)


def test_special_token_ids_come_from_the_config(tiny):
    cfg_ids = dict(pad_id=10, eos_id=11, eoc_id=12, mask_id=13)
    model = tiny("cdlm", **cfg_ids).double()
    assert (model.config.pad_id, model.config.eos_id, model.config.eoc_id, model.config.mask_id) == (10, 11, 12, 13)
    out = model.generate(torch.randint(20, 512, (2, 5)), 27, seed=0)
    assert not (out == 13).any() and (out[:, 5:] != 3).any()  # [MASK] = 13 is never emitted; 3 is a token
    with pytest.raises(ValueError, match="mask_id=600"):
        tiny("cdlm", mask_id=600)


def test_anneal_phase_loss_compiles_nothing_on_the_host(tiny, chunked):
    """The loss's parts are tensors (no host sync inside the step)."""
    model = tiny("cdlm+concept", n_concepts=16, topk_known=3, anneal_topk_unknown=5)
    model.set_phase(PhaseSchedule("anneal", 100, 20, 80))
    cid, lab = chunked(2, 32, 16)
    out = model.loss(Batch(torch.randint(4, 512, (2, 32)), cid, lab), 90)
    assert set(out.parts) == {"lm", "concept", "rec", "indep", "total"}
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in out.parts.values())
    out.total.backward()
    assert model.concept.unk_a.grad.count_nonzero(-1).gt(0).sum() <= 2 * 32 * 5  # only selected rows of A
