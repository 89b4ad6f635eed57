"""The `cuda`-marked tests (issue 26.8, run by scripts/gpu-check.sh): every CUDA path of the
toolkit on one GPU. Without a CUDA device they are skipped, and the summary says how many."""

import os

import pytest
import torch

# INTERPSCALE_CUDA_TESTS_ON_CPU=1 runs the same test bodies on the CPU (gloo instead of NCCL):
# a check of the tests' own logic where no GPU is lent, never a substitute for the GPU run
ON_CPU = os.environ.get("INTERPSCALE_CUDA_TESTS_ON_CPU") == "1"
_SKIPPED: list[str] = []


def pytest_collection_modifyitems(config, items):
    """`@pytest.mark.cuda` tests skip (with the reason) when no CUDA device is visible."""
    if torch.cuda.is_available() or ON_CPU:
        return
    for it in items:
        if it.get_closest_marker("cuda") is not None:
            it.add_marker(pytest.mark.skip(reason="needs a CUDA device (none visible)"))
            _SKIPPED.append(it.nodeid)


def pytest_terminal_summary(terminalreporter):
    if _SKIPPED:
        terminalreporter.write_line(f"cuda tests: {len(_SKIPPED)} skipped (no CUDA device visible); "
                                    f"run scripts/gpu-check.sh on a GPU machine")


@pytest.fixture(autouse=True)
def _fresh_compile_cache():
    """Each test compiles its own graphs (Dynamo keeps at most 8 per function)."""
    torch.compiler.reset()
    yield
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@pytest.fixture
def device() -> torch.device:
    return torch.device("cpu" if ON_CPU or not torch.cuda.is_available() else "cuda")


def make_batch(model, B: int, T: int, device: torch.device, vocab: int):
    """A random batch the family takes: concept families get chunks of 16 tokens with labels."""
    from interpscale.models.types import Batch

    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(4, vocab, (B, T), generator=g)
    if not getattr(model, "is_concept", False):
        return Batch(tokens).to(device)
    n = model.config.n_concepts
    cid = (torch.arange(T) // 16).expand(B, T).contiguous()
    labels = (torch.rand(B, (T + 15) // 16, n, generator=g) < 0.2).float()
    return Batch(tokens, cid, labels).to(device)


@pytest.fixture
def batch_for():
    """batch_for(model, B, T, device, vocab) -> a Batch the family takes (see make_batch)."""
    return make_batch


TINY_DATA = {"kind": "synthetic", "n_concepts": 6, "n_docs": 120, "entities_per_concept": 6}


def tiny_spec(family: str = "ar", steps: int = 12, **kw):
    """A RunSpec of a nano model on the tiny synthetic corpus (seconds on any device)."""
    from interpscale.models import DataFields, flops_per_token, params_nonembedding
    from interpscale.orchestration import RunSpec

    seq, bt, data = 32, 4 * 32, DataFields(vocab_size=128)
    M = flops_per_token(family, "nano", seq, data=data)
    fields = dict(family=family, size="nano", slice_flops=M * steps * bt, flops=M * steps * bt,
                  params=params_nonembedding(family, "nano", data=data), tokens=steps * bt, seq_len=seq, batch_tokens=bt,
                  flops_per_token=M, data=TINY_DATA, vocab_size=128, lr=3e-3, log_every=4, eval_batches=2,
                  model_overrides={})
    fields.update(kw)
    return RunSpec(**fields)


@pytest.fixture
def make_spec():
    return tiny_spec
