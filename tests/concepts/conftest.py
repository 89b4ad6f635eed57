"""Shared inputs of the concept-pipeline tests: the bundled generator's corpus written as
JSONL twice, with its labels (the truth) and without them (what the pipeline sees)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "judges"))  # judge_server


def write_corpus(folder: Path, n_docs: int, seed: int = 0) -> tuple[list[Path], list[Path]]:
    """([unlabelled file], [truth file]) of the synthetic corpus (``concepts synthetic``)."""
    from interpscale.concepts import write_synthetic

    raw, truth = write_synthetic(folder, n_docs, seed)
    return [raw], [truth]


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory):
    """400 documents (~1,400 chunks) of the bundled generator's corpus."""
    return write_corpus(tmp_path_factory.mktemp("synthetic"), 400)


@pytest.fixture(scope="session")
def small(tmp_path_factory):
    """60 documents (~200 chunks): enough for the LLM path's tests."""
    return write_corpus(tmp_path_factory.mktemp("small"), 60)


@pytest.fixture(scope="session")
def corpus_writer():
    return write_corpus


@pytest.fixture(scope="session")
def built(synthetic, tmp_path_factory):
    """The offline pipeline run once on the unlabelled corpus (shared by several tests)."""
    from interpscale.concepts import build

    out = tmp_path_factory.mktemp("built") / "concepts"
    summary = build(synthetic[0], out)
    return out, summary
