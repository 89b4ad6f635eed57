"""Suite-wide test settings (headless plotting, offline hubs) and the reference-data fixture."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT / "tests" / "data"  # reference data, indexed in tests/data/README.md


def find_reference_data(name: str) -> Path:
    """``tests/data/NAME`` or ``tests/data/*/NAME``; a missing file is a failure, never a skip."""
    hits = [DATA_DIR / name] + sorted(DATA_DIR.glob(f"*/{name}"))
    for p in hits:
        if p.is_file():
            return p
    pytest.fail(f"reference data {name} is not in {DATA_DIR} (see tests/data/README.md)")


@pytest.fixture(scope="session")
def reference_data():
    """``reference_data(name)`` -> path of a file under ``tests/data/`` (see its README)."""
    return find_reference_data


@pytest.fixture(scope="session")
def shared_data(reference_data):
    """Old name of :func:`reference_data`; it now looks only inside the repository."""
    return reference_data
