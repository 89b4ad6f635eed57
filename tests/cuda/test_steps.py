"""A compiled bf16 training step per family (the trainer's GPU recipe: LossModule under
torch.compile, bf16 autocast, fused AdamW), Hugging Face families included."""

import pytest
import torch

from interpscale.models import DataFields, build_model
from interpscale.models.protocol import check_batch
from interpscale.orchestration.parallel import LossModule

FAMILIES = ["ar", "cdlm", "ar+concept", "cdlm+concept", "crate", "crate-gpt", "mxd", "reetym",
            "hf:llama", "hf:gpt_neox", "hf:qwen2", "hf:qwen3"]


def compiled_steps(model, batch, device, steps: int = 6) -> list[float]:
    fn = torch.compile(LossModule(model))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, fused=device.type == "cuda" or None)
    losses = []
    for step in range(steps):
        with torch.autocast(device.type, dtype=torch.bfloat16):
            total, parts = fn(batch, step)
        assert total.dtype == torch.float32  # losses reduce in float32 under autocast
        total.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(total.detach()))
    return losses


@pytest.mark.cuda
@pytest.mark.parametrize("family", FAMILIES)
def test_compiled_bf16_training_step(family, device, batch_for):
    if family.startswith("hf:"):
        pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = build_model(family, "nano", data=DataFields(vocab_size=256, n_concepts=8)).to(device).train()
    batch = batch_for(model, 4, 64, device, 256)
    check_batch(model, batch)
    losses = compiled_steps(model, batch, device)
    assert all(map(lambda x: x == x and abs(x) < 1e4, losses)), losses
    assert losses[-1] < losses[0], losses  # six steps on one batch: the loss goes down
