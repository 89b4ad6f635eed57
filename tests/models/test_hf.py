"""Issue 26.5: Hugging Face architectures as families (``hf:llama``, ``hf:gpt_neox``, ``hf:qwen2``).

The sweep test runs ``hf:llama`` next to ``ar`` through the local executor in fresh
``interpscale`` processes (plan, sweep launch, evaluate, collect, fit); the saved ``hf:llama``
checkpoint reloads through the protocol and, exported, through
``AutoModelForCausalLM.from_pretrained`` with the same logits. Models are built from configs
only (HF_HUB_OFFLINE=1 in tests/conftest.py: a download would fail).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from interpscale import paper

pytest.importorskip("transformers")  # the `hf` extra (CI installs it)

from interpscale.errors import UserError  # noqa: E402
from interpscale.models import SIZES, DataFields, build_model, get_family, load_checkpoint, save_checkpoint  # noqa: E402
from interpscale.models.hf import HFCausalLM, export_pretrained, hf_config  # noqa: E402
from interpscale.models.pricing import price  # noqa: E402
from interpscale.models.protocol import find_blocks  # noqa: E402
from interpscale.models.pricing import flops_per_token, params_nonembedding  # noqa: E402
from interpscale.models.types import Batch  # noqa: E402

PRESET = """
[plan]
families = ["ar", "hf:llama"]
sizes = ["L1d4", "L1d8", "L1d16"]
seq_len = 16
batch_tokens = 128
tolerance = 0.3

[plan.slices]
"ar" = [6e7, 1.2e8]
"hf:llama" = [6e7, 1.2e8]

[size_presets.L1d4]
base = "nano"
n_layers = 1
d_model = 4
n_heads = 1

[size_presets.L1d8]
base = "nano"
n_layers = 1
d_model = 8
n_heads = 2

[size_presets.L1d16]
base = "nano"
n_layers = 1
d_model = 16
n_heads = 2

[train]
lr = 1e-2
vocab_size = 192
eval_batches = 2
log_every = 5

[data]
kind = "synthetic"
n_concepts = 4
n_docs = 120
entities_per_concept = 4

[launch]
executor = "local"
max_parallel = 2
threads_per_job = 1
runs_per_job = 6
n_boot = 10
"""


def _cli(*args: str, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "interpscale.cli", *args], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, f"interpscale {' '.join(args)} exited {out.returncode}:\n{out.stderr[-3000:]}"
    return out.stdout + out.stderr


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A swept ``ar`` + ``hf:llama`` grid (trained, evaluated, collected) in a temporary directory."""
    root = tmp_path_factory.mktemp("hf-sweep")
    (root / "hf.toml").write_text(PRESET)
    plan_out = _cli("plan", "--preset", "hf.toml", cwd=root)
    _cli("sweep", "launch", "--preset", "hf.toml", "--out", "sweep", cwd=root)
    _cli("sweep", "collect", "sweep", cwd=root)
    return root, plan_out


@pytest.mark.filterwarnings("ignore")
def test_hf_llama_and_ar_swept_together_then_evaluated_collected_fitted(sweep):
    root, plan_out = sweep
    rows = [line.split() for line in plan_out.splitlines() if line.split()[:1] == ["hf:llama"]]
    assert len(rows) == 6 and all(r[5] == "analytic" for r in rows)  # priced by Eq. 23 from its config
    runs = sorted((root / "sweep" / "runs").iterdir())
    specs = {r: json.loads((r / "spec.json").read_text()) for r in runs}
    assert {s["family"] for s in specs.values()} == {"ar", "hf:llama"}
    for r in runs:
        assert json.loads((r / "status.json").read_text())["state"] == "done", r.name
    import pandas as pd

    table = pd.read_csv(root / "sweep" / "results.csv")
    hf_rows = table[table["family"] == "hf:llama"]
    assert len(hf_rows) >= 6 and hf_rows["loss"].notna().all() and (hf_rows["estimator"] == "ar_ce").all()
    assert hf_rows["loss"].min() < 5.0  # trained: below log(192) = 5.26 of a uniform guess
    _cli("fit", "families", "sweep/results.csv", "--out", "fits", "--n-boot", "10", "--allow-partial", cwd=root)
    fitted = "".join(p.read_text() for p in (root / "fits").glob("*.json"))
    assert '"hf:llama"' in fitted and '"ar"' in fitted


def test_swept_hf_llama_checkpoint_reloads_and_exports_for_from_pretrained(sweep, tmp_path):
    from transformers import AutoModelForCausalLM

    root, _ = sweep
    run = next(r for r in sorted((root / "sweep" / "runs").iterdir())
               if json.loads((r / "spec.json").read_text())["family"] == "hf:llama")
    ckpt = sorted(p.parent for p in (run / "checkpoints").rglob("checkpoint.json"))[-1]  # a checkpoint directory
    model, extra = load_checkpoint(ckpt)  # the protocol's reload
    assert isinstance(model, HFCausalLM) and extra["step"] > 0 and model.config.vocab_size == 192
    out = export_pretrained(ckpt, tmp_path / "export")
    assert {p.name for p in out.iterdir()} >= {"config.json", "model.safetensors", "checkpoint.json"}
    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    tokens = torch.randint(4, 192, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours, theirs = model.eval()(tokens).logits, hf(input_ids=tokens).logits
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=0)
    # the exported weights are the trained ones, not a fresh init
    fresh = build_model("hf:llama", "nano", **json.loads((run / "spec.json").read_text())["model_overrides"],
                        data=DataFields(vocab_size=192))
    assert not torch.allclose(fresh(tokens).logits, ours)


def _train(model, steps: int = 4) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = Batch(torch.randint(4, 96, (4, 16), generator=torch.Generator().manual_seed(1)))
    model.check_batch(batch)
    losses = []
    for step in range(steps):
        out = model.loss(batch, step)
        opt.zero_grad(set_to_none=True)
        out.total.backward()
        opt.step()
        losses.append(float(out.total.detach()))
    return losses


@pytest.mark.parametrize("family", ["hf:llama", "hf:gpt_neox", "hf:qwen2"])
def test_hf_family_builds_trains_and_prices(family):
    torch.manual_seed(0)
    model = build_model(family, "nano", data=DataFields(vocab_size=96, special_ids={"eos": 5}), loss_chunk_tokens=16)
    c = model.config
    assert (c.vocab_size, c.eos_id, model.hf.config.eos_token_id) == (96, 5, 5)  # the injected DataFields
    assert model.hf.config.model_type == family[3:] and model.hf.config.num_hidden_layers == c.n_layers == 2
    assert len(find_blocks(model)) == 2 and find_blocks(model)[0] is model.hf.base_model.layers[0]
    losses = _train(model)
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    # the loss is Eq. 1 on the Hugging Face model's own logits (the chunked head is the same head)
    batch = Batch(torch.randint(4, 96, (2, 40)))
    from interpscale.models.objectives import ar_loss

    torch.testing.assert_close(model.loss(batch, 0).total, ar_loss(model(batch.tokens).logits, batch.tokens, None)[0])
    p = price(family, "nano", 16, data=DataFields(vocab_size=96))
    assert p.how == "analytic" and p.params == sum(x.numel() for n, x in model.named_parameters() if "embed" not in n)
    assert p.head_flops == 6 * c.d_model * 96


@pytest.mark.parametrize("size", ["nano", "85M"])
def test_hf_llama_measured_pricing_equals_eq23_within_one_percent(size):
    data = DataFields(vocab_size=1024)
    P, M = params_nonembedding("hf:llama", size, data=data), flops_per_token("hf:llama", size, 256, data=data)
    got = price("hf:llama", size, 256, data=data, measure=True)  # counted on the meta device
    assert got.params == P
    assert abs(got.flops_per_token / M - 1) < 0.01


def test_hf_sizes_follow_the_presets_and_a_measured_type_is_priced_on_meta():
    c = hf_config("hf:llama", "85M", data=DataFields(vocab_size=1000))
    assert (c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.d_ff) == (10, 768, 6, 2, 4 * 768)  # Table 23
    # Table 23's backbone P = L(14d² + 2d·d_kv): SwiGLU at 4d and two KV heads; Llama adds only its norms
    assert abs(params_nonembedding("hf:llama", "85M") / paper.TABLE23["85M"][2] - 1) < 1e-3
    assert hf_config("hf:gpt_neox", "85M").n_kv_heads == 6  # NeoX has no grouped-query attention
    assert price("hf:llama", "nano", 32, data=DataFields(vocab_size=64)).how == "analytic"
    assert price("hf:qwen3", "nano", 32, data=DataFields(vocab_size=64)).how == "measured"
    with pytest.raises(ValueError, match="unknown override"):
        hf_config("hf:llama", "nano", gate="headwise")


def test_only_hf_checkpoints_export(tmp_path):
    ar = build_model("ar", "nano", vocab_size=64)
    save_checkpoint(ar, tmp_path / "ar.pt")
    with pytest.raises(UserError, match="not an hf: family"):
        export_pretrained(tmp_path / "ar.pt", tmp_path / "out")


def test_without_transformers_the_families_price_and_building_names_the_extra():
    code = ("import sys; sys.modules['transformers'] = None\n"
            "from interpscale.models import build_model, flops_per_token\n"
            "print(flops_per_token('hf:llama', 'nano', 64))\n"
            "try:\n    build_model('hf:llama', 'nano')\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    first, second = out.stdout.strip().splitlines()
    assert float(first) > 0
    assert second.startswith("UserError") and "pip install 'interpscale[hf]'" in second


def test_compiled_hf_llama_loss_equals_eager(compiled_matches_eager):
    """The trainer's compile path (CPU Inductor, fullgraph) on the Hugging Face module."""
    torch.manual_seed(0)
    model = build_model("hf:llama", "nano", n_layers=1, data=DataFields(vocab_size=96), loss_chunk_tokens=16)
    batch = Batch(torch.randint(4, 96, (2, 16)))
    compiled_matches_eager(model.loss, batch, list(model.parameters()), 3)
