"""Issue 43 item 4: measured pricing of any model that trains. The project's own ``ar`` wrapped as a
user's plugin (written to a file and loaded as one, the loss in docs/own-model.md's style) with an
input check that reads ``tokens.min()`` is priced within 1% of ``ar``'s Eq. 23 at N = 16-512; before,
pricing it failed with ``Tensor.item() cannot be called on meta tensors``. On the meta device the
batch's own values are there to read (``pricing._BatchValues``); a model that reads a value
computed from its weights is priced by a real CPU forward, and the price and the plan say so."""

from __future__ import annotations

import textwrap

import pytest

from interpscale.errors import UserError
from interpscale.models import DataFields, price

WRAPPED_AR = '''
import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

from interpscale.models import DataFields, build_model, register_family
from interpscale.models.types import LossOutput, ModelOutput

SEEN = []  # the (min, max) token ids each input check read


class WrappedAR(nn.Module):
    """The project's ar behind my own loss, with my own input check."""

    def __init__(self, ar, family):
        super().__init__()
        self.ar = ar
        self.config = dataclasses.replace(ar.config, family=family)

    def check_tokens(self, tokens):
        lo, hi = int(tokens.min()), int(tokens.max())
        SEEN.append((lo, hi))
        if lo < 0 or hi >= self.config.vocab_size:
            raise ValueError(f"token ids must lie in [0, {self.config.vocab_size}), got [{lo}, {hi}]")

    def forward(self, tokens):
        self.check_tokens(tokens)
        return ModelOutput(logits=self.ar(tokens).logits)

    def loss(self, batch, step):
        tokens = batch.tokens
        if DROP_PADDING:  # keep the positions that are not [PAD] (a shape read off the values)
            tokens = tokens[:, tokens[0] != self.config.pad_id]
        logits = self(tokens[:, :-1]).logits
        target = tokens[:, 1:]
        lm = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten())
        if CHECK_FINITE and not torch.isfinite(lm):  # a value computed from the weights
            raise FloatingPointError("the loss is not finite")
        return LossOutput(total=lm, parts={"lm": lm.detach()}, n_tokens=target.numel())


def build(size, *, data=DataFields(), **overrides):
    return WrappedAR(build_model("ar", size, data=data, **overrides), FAMILY)


register_family(FAMILY, build)
'''


@pytest.fixture
def wrapped(plugin):
    """``wrapped(name, family, drop_padding=False, check_finite=False)``: WRAPPED_AR loaded as a plugin
    (the models conftest's ``plugin``: its families and module are forgotten after the test)."""
    def load(name: str, family: str, *, drop_padding: bool = False, check_finite: bool = False):
        head = f"FAMILY = {family!r}\nDROP_PADDING = {drop_padding}\nCHECK_FINITE = {check_finite}\n"
        return plugin(name, head + textwrap.dedent(WRAPPED_AR))

    return load


DATA = DataFields(vocab_size=1024)


def _vs_ar(family: str, size: str, seq_len: int):
    ours, ar = price(family, size, seq_len, data=DATA), price("ar", size, seq_len, data=DATA)
    assert ar.how == "analytic" and ours.params == ar.params and ours.head_flops == ar.head_flops
    return ours, ours.flops_per_token / ar.flops_per_token - 1


def test_ar_with_an_input_check_is_priced_as_ar_on_the_meta_device(wrapped):
    mod = wrapped("checked_ar", "checked-ar")
    for size, seqs in (("micro", (16, 64, 512)), ("85M", (16, 512))):  # the meta device: no memory, no kernels
        for seq_len in seqs:
            ours, err = _vs_ar("checked-ar", size, seq_len)
            assert ours.how == "measured" and abs(err) < 0.01, (size, seq_len, err)
    assert mod.SEEN and all(4 <= lo <= hi < 1024 for lo, hi in mod.SEEN)  # the batch's own (ordinary) ids


def test_a_shape_read_off_the_batch_is_the_batch_s_own(wrapped):
    """Boolean-mask indexing (``nonzero`` of the batch) runs on the batch's values: no [PAD] in
    the pricing batch, so every position stays and the price is ar's."""
    wrapped("unpadded_ar", "unpadded-ar", drop_padding=True)
    for seq_len in (16, 512):
        ours, err = _vs_ar("unpadded-ar", "micro", seq_len)
        assert ours.how == "measured" and abs(err) < 0.01


def test_a_value_read_off_the_weights_is_priced_by_a_cpu_forward_and_the_plan_says_so(wrapped):
    from interpscale.orchestration import PlanOptions, Preset, plan

    wrapped("finite_ar", "finite-ar", check_finite=True)
    for seq_len in (16, 512):
        ours, err = _vs_ar("finite-ar", "micro", seq_len)
        assert ours.how == "measured-cpu" and abs(err) < 0.01
    tree = Preset.load(Preset(), families=["finite-ar", "ar"], sizes=["micro"], slices=[4e9], seq_len=32,
                       batch_tokens=256, tolerance=0.5, vocab_size=256)
    p = plan(tree, PlanOptions(flops_per_s=1e12, strict=False, all_sizes=True))
    assert dict(zip(p.table["family"], p.table["pricing"])) == {"finite-ar": "measured-cpu", "ar": "analytic"}
    assert "'measured-cpu' (counted in a real CPU forward" in p.summary()
    with pytest.raises(UserError, match=r"too many to price by a CPU forward.*params_fn and flops_fn"):
        price("finite-ar", "1.5B", 64, data=DATA)  # 1.7B parameters: not built for real
