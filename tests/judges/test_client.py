"""JudgeClient over real HTTP (the real openai SDK) against the scripted local server."""

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from interpscale.judges import JudgeClient, JudgeTask, TemplateSet, score_alignment
from judge_server import ServerReply, default_responder, digit_logprobs

TS = TemplateSet()


def _tasks(n, template="steer_quality"):
    return [JudgeTask(TS[template], {"continuation": f"sample text number {i}"}) for i in range(n)]


def _last_user(body):
    return body["messages"][-1]["content"]


def test_scripted_reply_parsed_with_expected_score_from_top_logprobs(serve, tmp_path):
    srv = serve(lambda b, n: ServerReply("ALIGNMENT: 4", logprobs=digit_logprobs("ALIGNMENT: 4", {5: 0.6, 4: 0.3, 1: 0.1})))
    judge = JudgeClient(model="m", base_url=srv.url, cache_path=tmp_path / "c.sqlite", top_logprobs=5)
    task = JudgeTask(TS["alignment"], {"label": "x", "description": "y", "tokens": "a\nb"})
    (r,) = judge.run([task])
    assert (r.value, r.status, r.cached) == (4, "ok", False)
    assert r.expected == pytest.approx(0.6 * 5 + 0.3 * 4 + 0.1 * 1)
    body = srv.requests[0]
    assert body["temperature"] == 0 and body["logprobs"] is True and body["top_logprobs"] == 5
    assert body["messages"][0]["role"] == "system"


def test_429_with_retry_after_is_retried_by_the_sdk(serve):
    def resp(body, n):
        return ServerReply(status=429, headers={"retry-after": "0.05"}) if n == 0 else ServerReply("Rating: [[2]]")

    srv = serve(resp)
    judge = JudgeClient(model="m", base_url=srv.url, max_retries=3)
    (r,) = judge.run(_tasks(1))
    assert (r.value, r.status) == (2, "ok")
    assert judge.usage.retries == 1 and judge.usage.api_errors == 0
    assert srv.n_requests == 2


def test_retry_after_header_sets_the_wait(serve):
    # the SDK's own backoff would retry after <= 0.5 s; a server asking for 1.5 s gets 1.5 s
    srv = serve(lambda b, n: ServerReply(status=429, headers={"retry-after": "1.5"}) if n == 0 else ServerReply())
    (r,) = JudgeClient(model="m", base_url=srv.url, max_retries=1).run(_tasks(1))
    assert r.status == "ok" and srv.arrivals[1] - srv.arrivals[0] >= 1.4


def test_500s_then_success(serve):
    srv = serve(lambda b, n: ServerReply(status=500) if n < 2 else ServerReply("Rating: [[0]]"))
    judge = JudgeClient(model="m", base_url=srv.url, max_retries=3)
    (r,) = judge.run(_tasks(1))
    assert (r.value, r.status) == (0, "ok")  # a real zero, parsed
    assert judge.usage.retries == 2 and srv.n_requests == 3


def test_slow_response_times_out_and_the_retry_succeeds(serve):
    srv = serve(lambda b, n: ServerReply("Rating: [[1]]", delay=3.0 if n == 0 else 0.0))
    judge = JudgeClient(model="m", base_url=srv.url, max_retries=2, timeout=0.5)
    (r,) = judge.run(_tasks(1))
    assert (r.value, r.status) == (1, "ok")
    assert judge.usage.retries == 1 and srv.n_requests == 2


def test_persistent_failure_is_an_api_error_never_a_score_and_not_cached(serve, tmp_path):
    srv = serve(lambda b, n: ServerReply(status=500))
    judge = JudgeClient(model="m", base_url=srv.url, max_retries=1, cache_path=tmp_path / "c.sqlite")
    (r,) = judge.run(_tasks(1))
    assert r.value is None and r.status == "api_error"
    assert judge.usage.api_errors == 1 and len(judge.cache) == 0  # retried on the next run
    assert srv.n_requests == 2 and judge.usage.retries == 1


def test_bad_request_is_not_retried(serve):
    srv = serve(lambda b, n: ServerReply(status=400))
    judge = JudgeClient(model="m", base_url=srv.url, max_retries=3)
    (r,) = judge.run(_tasks(1))
    assert r.status == "api_error" and "400" in r.raw
    assert srv.n_requests == 1 and judge.usage.retries == 0


def test_empty_reply_gets_one_reask(serve):
    def resp(body, n):
        return ServerReply("Rating: [[2]]") if "exactly one line" in _last_user(body) and len(body["messages"]) == 3 \
            else ServerReply("")

    srv = serve(resp)
    judge = JudgeClient(model="m", base_url=srv.url)
    (r,) = judge.run(_tasks(1))
    assert (r.value, r.status) == (2, "reasked")
    assert judge.usage.reasks == 1 and judge.usage.parse_failures == 0
    follow = srv.requests[1]["messages"]
    assert [m["role"] for m in follow] == ["user", "assistant", "user"] and follow[1]["content"] == ""


def test_malformed_replies_are_counted_and_excluded_never_zero(serve, cards):
    def resp(body, n):
        text = body["messages"][1]["content"]  # the user message (the system text has an example)
        if "volcano" in text.lower():
            return ServerReply(["I would say fairly aligned.", "ALIGNMENT: 7"][min(n, 1)])  # garbage, then out of range
        return ServerReply("ALIGNMENT: 5" if "cycling" in text else "ALIGNMENT: 3")

    srv = serve(resp)
    judge = JudgeClient(model="m", base_url=srv.url)
    res = score_alignment(cards, [["bike"], ["bread"], ["lava"]], judge=judge)
    scores = [r.score for r in res.records]
    statuses = [r.status for r in res.records]
    assert scores == [5.0, 3.0, None] and statuses == ["ok", "ok", "parse_error"]
    assert res.summary.mean == pytest.approx(4.0)  # (5 + 3) / 2, not (5 + 3 + 0) / 3
    assert res.summary.n == 2 and res.summary.n_parse_failures == 1
    assert judge.usage.parse_failures == 1 and judge.usage.reasks == 1
    assert "| 2 | 4.000 | 1 | 0 |" in res.to_markdown()


def test_echoed_rubric_is_ambiguous_not_a_score(serve):
    srv = serve(lambda b, n: ServerReply("Rating: [[0]] or Rating: [[1]] or Rating: [[2]]"))
    (r,) = JudgeClient(model="m", base_url=srv.url).run(_tasks(1))
    assert r.value is None and r.status == "parse_error"


@pytest.mark.parametrize("body", [b"this is not json", b'["a list"]', b'{"choices": []}'])
def test_malformed_body_is_not_a_score(serve, body):
    srv = serve(lambda b, n: ServerReply(raw_body=body))
    (r,) = JudgeClient(model="m", base_url=srv.url, max_retries=0).run(_tasks(1))
    assert r.value is None and r.status == "api_error"


def test_second_identical_run_is_served_entirely_from_cache(serve, tmp_path):
    srv = serve(latency=0.01)
    path = tmp_path / "cache.sqlite"
    first = JudgeClient(model="m", base_url=srv.url, cache_path=path, concurrency=8).run(_tasks(30))
    assert srv.n_requests == 30 and not any(r.cached for r in first)
    again = JudgeClient(model="m", base_url=srv.url, cache_path=path, concurrency=8)
    second = again.run(_tasks(30))
    assert srv.n_requests == 30  # no new HTTP request
    assert all(r.cached for r in second) and again.usage.cache_hits == 30 and again.usage.requests == 0
    assert [r.value for r in second] == [r.value for r in first]


def test_cache_key_covers_model_sampling_and_template_version(serve, tmp_path):
    srv = serve()
    path = tmp_path / "c.sqlite"
    JudgeClient(model="m", base_url=srv.url, cache_path=path).run(_tasks(1))
    other_tpl = TS.override({"steer_quality": {"reask": "Just the rating line, please."}})
    variants = [JudgeClient(model="m2", base_url=srv.url, cache_path=path),
                JudgeClient(model="m", base_url=srv.url, cache_path=path, temperature=0.7),
                JudgeClient(model="m", base_url=srv.url, cache_path=path, top_logprobs=3, seed=1)]
    for j in variants:
        assert not j.run(_tasks(1))[0].cached
    j = JudgeClient(model="m", base_url=srv.url, cache_path=path)
    assert not j.run([JudgeTask(other_tpl["steer_quality"], {"continuation": "sample text number 0"})])[0].cached
    assert j.run(_tasks(1))[0].cached


def test_bad_credentials_stop_the_run_without_leaking_the_key(serve, monkeypatch):
    monkeypatch.setenv("MY_JUDGE_KEY", "sk-very-secret-value")
    srv = serve(lambda b, n: ServerReply(status=401))
    judge = JudgeClient(model="m", base_url=srv.url, api_key_env="MY_JUDGE_KEY")
    with pytest.raises(RuntimeError, match="MY_JUDGE_KEY") as info:
        judge.run(_tasks(3))
    assert "sk-very-secret" not in str(info.value) and "sk-very-secret" not in repr(judge)


def test_identical_tasks_in_one_run_are_called_once(serve):
    srv = serve()
    replies = JudgeClient(model="m", base_url=srv.url).run(_tasks(1) * 5)
    assert srv.n_requests == 1 and len(replies) == 5


def test_run_works_inside_a_running_event_loop(serve):
    import asyncio

    srv = serve()
    judge = JudgeClient(model="m", base_url=srv.url)

    async def inner():
        return judge.run(_tasks(2))  # e.g. from a notebook cell

    assert [r.value for r in asyncio.run(inner())] == [1, 1]


_CHILD = """
import sys
from interpscale.judges import JudgeClient, JudgeTask, TemplateSet
url, cache = sys.argv[1], sys.argv[2]
ts = TemplateSet()
tasks = [JudgeTask(ts["steer_quality"], {"continuation": f"resumable text {i}"}) for i in range(40)]
JudgeClient(model="m", base_url=url, cache_path=cache, concurrency=4).run(tasks)
"""


def test_killed_run_resumes_without_repeating_finished_calls(serve, tmp_path):
    srv = serve(latency=0.15)
    cache = tmp_path / "cache.sqlite"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, srv.url, str(cache)])
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if cache.exists():
                try:
                    with sqlite3.connect(cache) as db:
                        if db.execute("SELECT COUNT(*) FROM calls").fetchone()[0] >= 8:
                            break
                except sqlite3.OperationalError:
                    pass
            time.sleep(0.05)
        child.kill()  # SIGKILL: no cleanup, no flush
    finally:
        child.wait()
    with sqlite3.connect(cache) as db:
        finished = db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    assert 8 <= finished < 40, "the child must have been killed halfway"
    before = srv.n_requests
    tasks = [JudgeTask(TS["steer_quality"], {"continuation": f"resumable text {i}"}) for i in range(40)]
    judge = JudgeClient(model="m", base_url=srv.url, cache_path=cache, concurrency=8)
    replies = judge.run(tasks)
    assert all(r.value == 1 for r in replies)
    assert judge.usage.cache_hits == finished
    assert srv.n_requests - before == 40 - finished  # finished calls were not repeated
    texts = [_last_user(b) for b in srv.requests[before:]]
    assert len(set(texts)) == len(texts)


def test_batch_files_round_trip(serve, tmp_path):
    judge = JudgeClient(model="judge-m", base_url="http://127.0.0.1:9/v1", cache_path=tmp_path / "c.sqlite")
    tasks = _tasks(4)
    req = judge.write_batch(tasks, tmp_path / "requests.jsonl")
    lines = [json.loads(line) for line in req.read_text().splitlines()]
    assert len(lines) == 4
    assert all(line["method"] == "POST" and line["url"] == "/v1/chat/completions" for line in lines)
    assert all(line["body"]["model"] == "judge-m" and line["body"]["temperature"] == 0 for line in lines)
    assert len({line["custom_id"] for line in lines}) == 4
    # what the Batch service would return: one success, one garbage reply, one error, one missing
    out = []
    for i, line in enumerate(lines[:3]):
        text = default_responder(line["body"], 0).text if i == 0 else "no idea"
        row = {"id": f"batch_req_{i}", "custom_id": line["custom_id"], "error": None,
               "response": {"status_code": 200, "request_id": "r",
                            "body": {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
                                     "usage": {"prompt_tokens": 10, "completion_tokens": 3}}}}
        if i == 2:
            row["response"] = {"status_code": 500, "body": {}}
        out.append(row)
    (tmp_path / "out.jsonl").write_text("\n".join(json.dumps(r) for r in reversed(out)) + "\n")
    replies = judge.read_batch(tasks, tmp_path / "out.jsonl")
    assert [r.status for r in replies] == ["ok", "parse_error", "api_error", "api_error"]
    assert replies[0].value == 1 and replies[1].value is None
    # parsed lines are now cached: the next request file only holds the two failures
    again = judge.write_batch(tasks, tmp_path / "requests2.jsonl")
    assert len(again.read_text().splitlines()) == 2


def test_api_key_appears_in_no_file_the_tool_writes(serve, tmp_path, monkeypatch, cards):
    from interpscale.cli import main

    secret = "sk-interpscale-test-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    srv = serve()
    rows = [{"label": c.label, "description": c.description, "tokens": list(c.words)} for c in cards]
    inp = tmp_path / "rows.jsonl"
    inp.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "out"
    assert main(["judge", "alignment", "--input", str(inp), "--base-url", srv.url, "--model", "m",
                 "--out", str(out)]) == 0
    steer = tmp_path / "steer.jsonl"
    steer.write_text(json.dumps({"label": "volcanoes", "prompt": "p", "continuation": "lava", "condition": "steered"}))
    assert main(["judge", "steering", "--input", str(steer), "--base-url", srv.url, "--model", "m",
                 "--instruction-judge", "--out", str(out)]) == 0
    judge = JudgeClient(model="m", base_url=srv.url, cache_path=out / "judge_cache.sqlite")
    judge.write_batch(_tasks(3), out / "batch.jsonl")
    assert f"Bearer {secret}" in srv.auth_headers  # the key was used...
    written = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"alignment.json", "alignment.md", "steering.json", "steering.md",
                                         "judge_cache.sqlite", "batch.jsonl"}
    for p in written:  # ...and written nowhere (sqlite WAL/SHM files included)
        assert secret.encode() not in p.read_bytes(), p
        assert b"sk-interpscale" not in p.read_bytes(), p
    assert os.environ["OPENAI_API_KEY"] == secret


def test_the_split_client_mirrors_the_sdk_and_has_one_record_type_and_protocol(tmp_path):
    """Issue 30.7: the retry constants are the openai SDK's (_constants.py); one record type
    for a judged item; the four backends implement the Judge protocol; one builder (issue 34:
    the old aliases Reply and resolve_judge are gone after their release)."""
    import openai._constants as sdk

    import interpscale.judges as judges
    from interpscale.judges import Judge, JudgeRecord, LexicalJudge, build_judge, retry
    from interpscale.judges.batch import BatchReadJudge, BatchWriteJudge

    assert (retry.INITIAL_RETRY_DELAY, retry.MAX_RETRY_DELAY) == (sdk.INITIAL_RETRY_DELAY, sdk.MAX_RETRY_DELAY)
    assert not hasattr(judges, "Reply") and not hasattr(judges, "resolve_judge") and callable(build_judge)
    client = JudgeClient(model="m", base_url="http://127.0.0.1:9/v1")
    backends = [client, LexicalJudge(), BatchWriteJudge(client, tmp_path / "w.jsonl"),
                BatchReadJudge(client, tmp_path / "r.jsonl")]
    assert all(isinstance(b, Judge) for b in backends)
    assert not isinstance(object(), Judge)
    rec = JudgeRecord({"a": 1}, "raw", "ok")
    assert rec.score is None and rec.to_dict()["value"] == {"a": 1}
    assert JudgeRecord(4, "raw", "ok").to_dict()["score"] == 4.0
