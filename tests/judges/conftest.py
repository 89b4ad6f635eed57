"""Fixtures: a scripted OpenAI-compatible server on 127.0.0.1 (real HTTP) and concept cards."""

import sys
from pathlib import Path

import pytest

from interpscale.judges import ConceptCard

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the test server module beside this file
from judge_server import LocalJudgeServer  # noqa: E402


@pytest.fixture
def serve():
    """``serve(responder=None, latency=0.0) -> LocalJudgeServer`` (stopped after the test)."""
    started = []

    def start(responder=None, latency=0.0):
        srv = LocalJudgeServer(responder, latency=latency).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture
def cards():
    return [
        ConceptCard("road cycling", "Racing bicycles on public roads.", ("bicycle", "peloton", "cyclist", "sprint", "tour")),
        ConceptCard("bread baking", "Making bread from flour, water and yeast.", ("bread", "flour", "yeast", "oven", "dough")),
        ConceptCard("volcanoes", "Volcanic eruptions, lava and magma.", ("volcano", "lava", "magma", "eruption", "ash")),
    ]
