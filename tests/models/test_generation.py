"""Cached generation equals uncached generation token for token; steering plumbs through."""

import pytest
import torch

from interpscale.models.steering import Steering

STEERLING = ("ar", "cdlm", "ar+concept", "cdlm+concept")


@pytest.mark.parametrize("family", STEERLING)
@pytest.mark.parametrize("temperature,top_k", [(0.0, None), (1.0, None), (0.8, 20)])
def test_cached_equals_uncached(family, temperature, top_k, tiny):
    model = tiny(family).double()
    prompt = torch.randint(4, 512, (2, 5))  # 5 is not a multiple of the block: partial first block
    kw = dict(temperature=temperature, top_k=top_k, seed=3)
    a = model.generate(prompt, 37, **kw)
    b = model.generate(prompt, 37, use_cache=False, **kw)
    assert a.shape == (2, 42)
    assert torch.equal(a[:, :5], prompt)
    assert torch.equal(a, b)
    if model.is_diffusion:
        assert not (a[:, 5:] == model.config.mask_id).any()  # every position denoised


@pytest.mark.parametrize("family", ["ar+concept", "cdlm+concept"])
def test_cached_equals_uncached_with_steering(family, tiny):
    model = tiny(family).double()
    prompt = torch.randint(4, 512, (1, 16))
    for st in (Steering((2,), tau=4.0, layer=1), Steering((2, 5), suppress=True, strength=3.0, suppress_inject=True)):
        a = model.generate(prompt, 20, steer=st, seed=1)
        b = model.generate(prompt, 20, steer=st, seed=1, use_cache=False)
        assert torch.equal(a, b)


def test_cdlm_steps_per_block_and_prompt_aligned(tiny):
    model = tiny("cdlm").double()
    prompt = torch.randint(4, 512, (1, 16))  # exactly one block
    a = model.generate(prompt, 16, steps_per_block=4, temperature=0)
    b = model.generate(prompt, 16, steps_per_block=4, temperature=0, use_cache=False)
    assert torch.equal(a, b) and a.shape == (1, 32)


def test_generation_is_seeded(tiny):
    model = tiny("ar")
    p = torch.randint(4, 512, (1, 4))
    assert torch.equal(model.generate(p, 10, seed=7), model.generate(p, 10, seed=7))
    assert not torch.equal(model.generate(p, 30, seed=7), model.generate(p, 30, seed=8))


@pytest.mark.parametrize("family", ["ar", "cdlm+concept"])
def test_cached_equals_uncached_with_gqa(family, tiny):
    model = tiny(family, d_model=64, n_heads=4, n_kv_heads=2).double()
    prompt = torch.randint(4, 512, (2, 7))
    a = model.generate(prompt, 25, seed=5)
    assert torch.equal(a, model.generate(prompt, 25, seed=5, use_cache=False))
