"""Shared fixtures for the model tests: one thread, tiny models."""

import sys
import textwrap

import pytest
import torch

from interpscale.models import build_model, plugins



@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _tiny(family: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    overrides.setdefault("n_concepts", 8)
    return build_model(family, "nano", **overrides)


def _chunked(B: int, T: int, n: int, chunk: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    cid = (torch.arange(T) // chunk).expand(B, T).clone()
    labels = (torch.rand(B, T // chunk + (T % chunk > 0), n, generator=g) < 0.3).float()
    return cid, labels


@pytest.fixture
def tiny():
    """tiny(family, seed=0, **overrides): a seeded nano model with an 8-concept library."""
    return _tiny


@pytest.fixture
def chunked():
    """chunked(B, T, n, chunk=8, seed=0): consecutive chunk ids and random multi-hot labels."""
    return _chunked


@pytest.fixture
def plugin(tmp_path):
    """``plugin(name, source)``: the source written to ``<name>.py`` and loaded as a plugin; the
    module and the families it registered are forgotten after the test (tests/conftest.py)."""

    def load(name: str, source: str):
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        plugins.load_plugins(str(path))
        return sys.modules[name]

    return load
