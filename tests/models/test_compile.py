"""``torch.compile(model.loss, fullgraph=True)`` on CPU Inductor equals eager (forward and
gradients) for the four Steerling families. Tiny one-layer models: Inductor's C++ build of
each graph dominates (≈ 10 s per family with a warm cache, minutes cold on a loaded box)."""

import pytest
import torch
import torch._dynamo
import torch._inductor.config as inductor_config

from interpscale.models.types import Batch, PhaseSchedule


@pytest.mark.parametrize("family,phase", [("ar", "stable"), ("cdlm", "stable"), ("ar+concept", "anneal"),
                                          ("cdlm+concept", "stable")])
def test_fullgraph_compiled_loss_equals_eager(family, phase, tiny, chunked):
    # one layer; loss_chunk_tokens=32 puts two checkpointed chunks of the LM head in the graph
    model = tiny(family, n_layers=1, n_concepts=8, topk_known=3, anneal_topk_unknown=5, loss_chunk_tokens=32)
    model.set_phase(PhaseSchedule(phase, 100, 20, 80))
    tok = torch.randint(4, 512, (2, 32))
    cid, lab = chunked(2, 32, 8)
    batch = Batch(tok, cid, lab) if model.is_concept else Batch(tok)
    params = list(model.parameters())

    def run(fn):
        torch.manual_seed(7)  # same masks, teacher forcing and dropout draws
        out = fn(batch, 90)
        return out, torch.autograd.grad(out.total, params, allow_unused=True)

    torch._dynamo.reset()
    try:
        # fallback_random: Inductor draws random numbers with eager's generator, so both runs
        # see the same masks; error_on_recompile: a second call must reuse the graph
        with inductor_config.patch(fallback_random=True):
            compiled = torch.compile(model.loss, fullgraph=True)
            ref, g_ref = run(model.loss)
            got, g_got = run(compiled)
            with torch._dynamo.config.patch(error_on_recompile=True):
                again, _ = run(compiled)
    finally:
        torch._dynamo.reset()
    assert set(got.parts) == set(ref.parts)
    for k in ref.parts:
        torch.testing.assert_close(got.parts[k], ref.parts[k], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(again.total, ref.total, rtol=1e-5, atol=1e-5)
    assert int(got.n_tokens) == int(ref.n_tokens)
    for a, b in zip(g_got, g_ref):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
