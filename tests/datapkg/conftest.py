"""The reference packing beside these tests, and the tiny RunSpec factory of tests/orchestration
(for the tests that hand prepared data to a run)."""

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # reference_packing.py, imported by the tests (importlib mode)


def _orchestration_conftest():
    path = HERE.parent / "orchestration" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_orchestration_conftest", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def make_spec():
    return _orchestration_conftest().tiny_spec
