"""The LLM path over real HTTP against the scripted server (tests/judges/judge_server.py):
tags, embeddings, names and the relevance judge all come from the endpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from judge_server import LocalJudgeServer, ServerReply, default_embedder, default_responder, misbehaving

from interpscale.concepts import AnnotatorOptions, BuildOptions, Endpoint, LibraryOptions, build

SRC = Path(__file__).resolve().parents[2] / "src"
OPTS = BuildOptions(n_sample=120, n_validate=30)


def _keys(srv: LocalJudgeServer) -> list[str]:
    return [json.dumps(b.get("messages", b.get("input")), sort_keys=True) for b in srv.requests]


def _statuses(out: Path) -> dict:
    return json.loads((out / "tags.summary.json").read_text())["status"]


def test_misbehaving_server_is_counted_never_fatal_and_a_rerun_is_cached(small, tmp_path):
    responder = misbehaving(default_responder, {"garbled": 0.1, "refused": 0.1, "malformed": 0.1, "slow": 0.1},
                            delay=0.2)
    out = tmp_path / "c"
    with LocalJudgeServer(responder) as srv:  # one server (one base URL, part of every cache key) for both runs
        s = build(small[0], out, OPTS, Endpoint(base_url=srv.url, model="m", max_retries=1, concurrency=8))
        first = _keys(srv)
        # rerun: answered prompts (parsed, unparseable and refused alike) and embeddings come from the cache;
        # only replies that never arrived whole (malformed bodies) are asked again
        build(small[0], out, OPTS, Endpoint(base_url=srv.url, model="m", max_retries=1, concurrency=8))
        again = _keys(srv)[len(first):]
    st = _statuses(out)
    assert st.get("parse_error", 0) > 0 and st.get("refused", 0) > 0 and st.get("api_error", 0) > 0
    assert st.get("ok", 0) > 0.5 * OPTS.n_sample  # the well-behaved and slow majority
    assert s["tags"]["failed"] == st["parse_error"] + st["refused"] + st["api_error"]
    kinds = [responder.kind_of({"messages": json.loads(k)}) for k in set(first) if k.startswith("[")]
    assert {"garbled", "refused", "malformed", "slow"} <= set(kinds)
    tags = [json.loads(x) for x in (out / "tags.jsonl").read_text().splitlines()]
    assert sum(t["tags"] is None for t in tags) == s["tags"]["failed"]
    assert s["library"]["n_concepts"] >= 1 and (out / "concepts.json").exists()
    assert all(r["chunks"] > 0 for r in s["labelled"])
    assert again, "the malformed replies are asked again"
    assert all(responder.kind_of({"messages": json.loads(k)}) == "malformed" for k in again)
    assert _statuses(out) == st


def test_embeddings_that_fail_drop_their_tags_and_are_counted(small, tmp_path):
    def embedder(body, attempt):
        if any("a" == str(t)[:1] for t in body.get("input", [])):  # a batch holding a tag starting with "a"
            return ServerReply(raw_body=json.dumps({"data": [{"index": 0, "embedding": [1.0]}]}).encode())
        return default_embedder(body, attempt)

    with LocalJudgeServer(embedder=embedder) as srv:
        # the test server's vectors are random per tag, so its clusters are not coherent: keep them all
        loose = LibraryOptions(min_coherence=0.0, min_support=1, min_tags=1)
        s = build(small[0], tmp_path / "c", BuildOptions(n_sample=120, n_validate=10, library=loose),
                  Endpoint(base_url=srv.url, model="m"))
    assert s["library"]["embed_failed"] > 0
    lib = json.loads((tmp_path / "c/library/library.json").read_text())
    assert lib["embedding"] == "judge endpoint /embeddings" and lib["concepts"]


def test_sigkill_midway_then_rerun_loses_nothing_and_reasks_nothing(small, tmp_path):
    out, clean = tmp_path / "killed", tmp_path / "clean"
    with LocalJudgeServer(latency=0.05) as srv:
        code = ("import sys; from interpscale.concepts import build, BuildOptions, Endpoint; "
                f"build({[str(p) for p in small[0]]!r}, {str(out)!r}, BuildOptions(n_sample=120, n_validate=30), "
                f"Endpoint(base_url={srv.url!r}, model='m', concurrency=4))")
        proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(SRC)},
                                stderr=subprocess.PIPE)
        deadline = time.time() + 120
        while srv.n_requests < 40:
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read().decode()[-2000:]
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        before = _keys(srv)
        assert not (out / "tags.jsonl").exists()  # killed while tagging
        build(small[0], out, OPTS, Endpoint(base_url=srv.url, model="m", concurrency=4))
        again = _keys(srv)[len(before):]
        assert len(set(again) & set(before)) <= 4  # at most the requests in flight at the kill (concurrency 4)
        assert len(again) == len(set(again))  # and nothing twice
        build(small[0], clean, OPTS, Endpoint(base_url=srv.url, model="m", concurrency=4))  # its own cache
    for name in ("tags.jsonl", "concepts.json", "labelled/00000.jsonl"):
        assert (out / name).read_text() == (clean / name).read_text(), name  # nothing lost


def test_llm_tags_cards_and_annotator_features_come_from_the_endpoint(small, tmp_path):
    opts = BuildOptions(n_sample=60, n_validate=10, annotator=AnnotatorOptions(features="embedding"))
    with LocalJudgeServer() as srv:
        s = build(small[0], tmp_path / "c", opts, Endpoint(base_url=srv.url, model="m"))
        n_first, url = srv.n_requests, srv.url
        embedded = {t for b in srv.requests if "input" in b for t in b["input"]}
        build(small[0], tmp_path / "c", opts, Endpoint(base_url=srv.url, model="m"))
        assert srv.n_requests == n_first  # a rerun of everything, the per-file tasks' embeddings included, is cached
    tags = [json.loads(x) for x in (tmp_path / "c/tags.jsonl").read_text().splitlines()]
    assert all(t["status"] == "ok" and set(t["tags"]) == {"topic", "purpose", "tone", "minor"} for t in tags)
    assert np.mean([sum(len(v) for v in t["tags"].values()) for t in tags]) >= 8
    cards = json.loads((tmp_path / "c/concepts.json").read_text())
    assert all(c["description"].startswith("Passages about") for c in cards)  # named by the server
    chunks = [c["text"] for line in (tmp_path / "c/labelled/00000.jsonl").read_text().splitlines()
              for c in json.loads(line)["chunks"]]
    assert set(chunks) <= embedded  # every chunk was featurised by /embeddings
    meta = json.loads((tmp_path / "c/annotator/meta.json").read_text())
    assert meta["features"] == "embedding" and meta["endpoint"]["base_url"] == url
    assert all(r["without_features"] == 0 for r in s["labelled"])
