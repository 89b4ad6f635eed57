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


def _shared_data_dirs() -> list[Path]:
    env = os.environ.get("INTERPSCALE_SHARED_DATA")
    return ([Path(env)] if env else []) + [REPO_ROOT.parent / "shared" / "data", Path("/work/shared/data")]


@pytest.fixture(scope="session")
def shared_data():
    """``shared_data(name)`` -> path of an external reference file (``shared/data`` beside the
    repo, or $INTERPSCALE_SHARED_DATA). Missing data fails under CI, where the acceptance
    tests against published numbers must never be skipped, and skips elsewhere."""

    def find(name: str) -> Path:
        dirs = _shared_data_dirs()
        for d in dirs:
            if (d / name).is_file():
                return d / name
        msg = f"reference data {name} not found in {[str(d) for d in dirs]} (set INTERPSCALE_SHARED_DATA)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)

    return find
