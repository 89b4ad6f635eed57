"""Shared inputs of the concept-pipeline tests: the bundled generator's corpus written as
JSONL twice, with its labels (the truth) and without them (what the pipeline sees)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "judges"))  # judge_server


def write_corpus(folder: Path, n_docs: int, seed: int = 0, n_files: int = 1) -> tuple[list[Path], list[Path]]:
    """(unlabelled files, truth files) of the synthetic corpus, documents split over ``n_files``."""
    from interpscale.data.corpus import CorpusConfig, generate_documents

    concepts, docs = generate_documents(CorpusConfig(n_docs=n_docs, seed=seed))
    folder.mkdir(parents=True, exist_ok=True)
    raw, truth = [], []
    for f in range(n_files):
        part = docs[f::n_files]
        r, t = folder / f"raw-{f}.jsonl", folder / f"truth-{f}.jsonl"
        r.write_text("".join(json.dumps({"chunks": [{"text": x} for x, _ in d]}) + "\n" for d in part))
        t.write_text("".join(json.dumps({"chunks": [{"text": x, "concepts": [concepts[c].label for c in labs]}
                                                    for x, labs in d]}) + "\n" for d in part))
        raw.append(r)
        truth.append(t)
    return raw, truth


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
