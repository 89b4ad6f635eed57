"""Shared fixtures: a tiny synthetic data source and a tiny RunSpec factory (seconds of CPU)."""

import pytest
import torch

from interpscale.orchestration import RunSpec

TINY_DATA = {"kind": "synthetic", "n_concepts": 6, "n_docs": 120, "entities_per_concept": 6}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def tiny_spec(family: str = "ar", steps: int = 20, **kw) -> RunSpec:
    from interpscale.models import flops_per_token, params_nonembedding

    seq, bt = 32, 4 * 32
    over = {"vocab_size": 128, "n_concepts": 6}
    M = flops_per_token(family, "nano", seq, **over)
    fields = dict(family=family, size="nano", slice_flops=M * steps * bt, flops=M * steps * bt,
                  params=params_nonembedding(family, "nano", **over), tokens=steps * bt, seq_len=seq,
                  batch_tokens=bt, flops_per_token=M, data=TINY_DATA, vocab_size=128, lr=3e-3, log_every=5,
                  eval_batches=2, model_overrides={"n_concepts": 6})
    fields.update(kw)
    return RunSpec(**fields)


@pytest.fixture
def make_spec():
    return tiny_spec
