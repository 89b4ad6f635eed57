"""The judge client against a server that misbehaves as real providers and local inference
servers do: malformed bodies of every shape, huge numbers and replies, refusals, retry
storms. Real HTTP on 127.0.0.1 through the real openai SDK (tests/judges/judge_server.py)."""

import json
import re
import sqlite3
import subprocess
import sys
import time

import pytest

from interpscale.judges import JudgeClient, JudgeTask, TemplateSet, score_alignment
from interpscale.judges.cache import JudgeCache
from interpscale.judges.replies import RAW_CAP
from judge_server import ServerReply

TS = TemplateSet()
OK = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Rating: [[2]]"}}


def _body(**kw):
    return json.dumps({"id": "x", "object": "chat.completion", "choices": [OK],
                       "usage": {"prompt_tokens": 7, "completion_tokens": 3}, **kw}).encode()


# every shape of 200 reply a misbehaving server has sent; each must end as this item's api_error
MALFORMED = {
    "not json": b"this is not json",
    "json list": b'["a list"]',
    "json string": b'"Rating: [[2]]"',
    "invalid utf-8": b'{"choices": [\xff\xfe]}',
    "empty body": b"",
    "no choices": b'{"id": "x"}',
    "choices empty": _body(choices=[]),
    "choices an object": _body(choices={"0": OK}),
    "choice a string": _body(choices=["Rating: [[2]]"]),
    "message a string": _body(choices=[{"index": 0, "message": "Rating: [[2]]"}]),
    "message missing": _body(choices=[{"index": 0, "text": "Rating: [[2]]"}]),
    "content a number": _body(choices=[{"index": 0, "message": {"role": "assistant", "content": 2}}]),
    "content a list of strings": _body(choices=[{"index": 0, "message": {"role": "assistant",
                                                                           "content": ["Rating: [[2]]"]}}]),
    "content part without text": _body(choices=[{"index": 0, "message": {"content": [{"type": "text"}]}}]),
    "refusal a number": _body(choices=[{"index": 0, "message": {"role": "assistant", "content": "x", "refusal": 1}}]),
    "usage a list": _body(usage=[7, 3]),
    "usage a string count": _body(usage={"prompt_tokens": "many", "completion_tokens": 3}),
    "usage negative": _body(usage={"prompt_tokens": -5, "completion_tokens": 3}),
    "usage float": _body(usage={"prompt_tokens": 7.5, "completion_tokens": 3}),
    "usage 1e400": b'{"choices": [' + json.dumps(OK).encode() + b'], "usage": {"prompt_tokens": 1e400}}',
    "usage huge integer": b'{"choices": [' + json.dumps(OK).encode() + b'], "usage": {"prompt_tokens": '
                          + b"9" * 5000 + b"}}",
    "usage 10**30": b'{"choices": [' + json.dumps(OK).encode() + b'], "usage": {"prompt_tokens": 1' + b"0" * 30 + b"}}",
    "deep nesting": b"[" * 200_000 + b"]" * 200_000,
    "logprobs a list": _body(choices=[{**OK, "logprobs": [1, 2]}]),
    "logprobs content a string": _body(choices=[{**OK, "logprobs": {"content": "abc"}}]),
    "logprob not a number": _body(choices=[{**OK, "logprobs": {"content": [
        {"token": "2", "logprob": 0, "top_logprobs": [{"token": "2", "logprob": "high"}]}]}}]),
    "token not a string": _body(choices=[{**OK, "logprobs": {"content": [{"token": 2, "logprob": 0}]}}]),
    "one megabyte of garbage": b"x" * 1_000_000,
}


def _task(i, tag="item"):
    return JudgeTask(TS["steer_quality"], {"continuation": f"{tag} {i} body"})


def _item(body):
    m = re.search(r"(item|good) (\d+) body", body["messages"][-1]["content"]) or \
        re.search(r"(item|good) (\d+) body", json.dumps(body["messages"]))
    return m.group(1), int(m.group(2))


def test_malformed_replies_are_per_item_api_errors_and_the_batch_survives(serve, tmp_path):
    names = list(MALFORMED)

    def resp(body, n):
        kind, i = _item(body)
        return ServerReply("Rating: [[2]]") if kind == "good" else ServerReply(raw_body=MALFORMED[names[i]])

    srv = serve(resp)
    path = tmp_path / "c.sqlite"
    judge = JudgeClient(model="m", base_url=srv.url, cache_path=path, concurrency=8, max_retries=2)
    tasks = [_task(i) for i in range(len(names))] + [_task(i, "good") for i in range(6)]
    replies = judge.run(tasks)
    bad, good = replies[: len(names)], replies[len(names):]
    assert [(r.value, r.status) for r in good] == [(2, "ok")] * 6  # the good items were not cancelled
    for name, r in zip(names, bad):
        assert (r.value, r.status, r.cached) == (None, "api_error", False), name
        assert r.raw.startswith("malformed reply"), (name, r.raw)
        assert len(r.raw) <= RAW_CAP + 40, name
    assert judge.usage.api_errors == judge.usage.malformed_replies == len(names)
    assert judge.usage.requests == srv.n_requests == len(names) + 6  # malformed replies are not retried
    assert judge.usage.retries == 0 and judge.usage.reasks == 0
    assert len(judge.cache) == 6  # malformed replies are not cached...
    fixed = JudgeClient(model="m", base_url=srv.url, cache_path=path)
    srv.responder = lambda b, n: ServerReply("Rating: [[1]]")
    again = fixed.run(tasks)  # ...so the next run asks again and gets the answers
    assert [r.value for r in again[: len(names)]] == [1] * len(names) and all(r.cached for r in again[len(names):])
    assert srv.n_requests == 2 * len(names) + 6


def test_lone_surrogates_and_nul_in_a_reply_are_stored_not_fatal(serve, tmp_path):
    srv = serve(lambda b, n: ServerReply(raw_body=b'{"choices": [{"message": {"content": "Rating: [[2]] \\ud800\\u0000"}}]}'))
    path = tmp_path / "c.sqlite"
    (r,) = JudgeClient(model="m", base_url=srv.url, cache_path=path).run([_task(0)])
    assert (r.value, r.status) == (2, "ok") and r.raw == "Rating: [[2]] \ufffd\x00"
    (again,) = JudgeClient(model="m", base_url=srv.url, cache_path=path).run([_task(0)])
    assert again.cached and again.raw == r.raw


def test_content_as_typed_parts_is_read_from_its_text_parts(serve):
    parts = [{"type": "thinking", "thinking": [{"type": "text", "text": "Rating: [[0]]?"}]},
             {"type": "text", "text": "Rating: "}, {"type": "text", "text": "[[2]]"}]
    srv = serve(lambda b, n: ServerReply(raw_body=json.dumps({"choices": [{"message": {"content": parts}}]}).encode()))
    (r,) = JudgeClient(model="m", base_url=srv.url).run([_task(0)])
    assert (r.value, r.status, r.raw) == (2, "ok", "Rating: [[2]]")


def test_a_body_too_large_to_be_a_reply_is_refused_while_reading(serve):
    from interpscale.judges.replies import MAX_BODY_BYTES

    srv = serve(lambda b, n: ServerReply(raw_body=b" " * (MAX_BODY_BYTES + 10_000)))
    judge = JudgeClient(model="m", base_url=srv.url)
    (r,) = judge.run([_task(0)])
    assert r.status == "api_error" and r.raw == f"malformed reply: reply body over {MAX_BODY_BYTES} bytes"


def test_malformed_usage_never_counts_tokens(serve):
    srv = serve(lambda b, n: ServerReply(raw_body=MALFORMED["usage 1e400"]))
    judge = JudgeClient(model="m", base_url=srv.url)
    (r,) = judge.run([_task(0)])
    assert r.status == "api_error" and judge.usage.prompt_tokens == 0


def test_missing_usage_and_null_content_are_not_malformed(serve):
    def resp(body, n):
        if len(body["messages"]) == 3:  # the re-ask
            return ServerReply(raw_body=json.dumps({"choices": [OK]}).encode())
        return ServerReply(raw_body=json.dumps({"choices": [{"index": 0, "message": {"content": None}}]}).encode())

    srv = serve(resp)
    judge = JudgeClient(model="m", base_url=srv.url)
    (r,) = judge.run([_task(0)])
    assert (r.value, r.status) == (2, "reasked")
    assert judge.usage.replies_without_usage == 2 and judge.usage.prompt_tokens == 0


@pytest.mark.parametrize("text", [
    "Rating: [[" + "9" * 5000 + "]]",
    "Rating: [[1]] no wait, Rating: [[2]]",
    "Rating: [[1]]. On reflection [[2]] fits better.",
    "Rating: [[1e400]]",
])
def test_odd_answers_are_parse_failures_not_crashes(serve, text):
    srv = serve(lambda b, n: ServerReply(text))
    judge = JudgeClient(model="m", base_url=srv.url)
    (r,) = judge.run([_task(0)])
    assert (r.value, r.status) == (None, "parse_error") and judge.usage.reasks == 1


@pytest.mark.parametrize("reply", [
    '{"A": 4, "a": 2}',  # case-variant keys
    '{"A": 4, "A": 4}',  # duplicate keys
    '{"A": 4, " a ": 4}',  # keys that differ only in spacing
    '{"A": 4}\nCorrection: {"A": 2}',  # a later correction
    '{"A": 4} {"A": 4, "B": 1}',  # a second, different answer
    '{"A": ' + "4" * 5000 + "}",  # a huge integer
    '{"A": 1e400}', '{"A": NaN}', '{"A": Infinity}',
    '{"A": 4, "B": 2}',  # a score for a candidate that was not offered
    '{"A": true}', '{"A": "4.5"}', '{"A": [4]}',
])
def test_relevance_json_follows_the_one_answer_rule(serve, cards, reply):
    srv = serve(lambda b, n: ServerReply(reply))
    judge = JudgeClient(model="m", base_url=srv.url)
    res = score_relevance_one(judge, cards[:1])
    assert [r.status for r in res.records[0]] == ["parse_error"] and res.summary.n == 0


def score_relevance_one(judge, cards):
    from interpscale.judges import score_relevance

    return score_relevance(["a chunk of text"], [cards], judge=judge)


def test_relevance_json_repeated_identically_is_one_answer(serve, cards):
    srv = serve(lambda b, n: ServerReply('{"A": 4, "B": 2}\n```json\n{"b": 2, "a": 4}\n```'))
    res = score_relevance_one(JudgeClient(model="m", base_url=srv.url), cards[:2])
    assert [r.score for r in res.records[0]] == [4.0, 2.0]


def test_refusals_are_their_own_status_cached_and_not_reasked(serve, tmp_path, cards):
    def resp(body, n):
        text = body["messages"][-1]["content"]
        if "volcano" in text.lower():
            return ServerReply(None, refusal="I can't help with that.")
        if "bread" in text.lower():
            return ServerReply("", finish_reason="content_filter")
        return ServerReply("ALIGNMENT: 5")

    srv = serve(resp)
    judge = JudgeClient(model="m", base_url=srv.url, cache_path=tmp_path / "c.sqlite")
    res = score_alignment(cards, [["bike"], ["bread"], ["lava"]], judge=judge)
    assert [r.status for r in res.records] == ["ok", "refused", "refused"]
    assert [r.score for r in res.records] == [5.0, None, None]
    assert res.records[2].raw == "I can't help with that."
    assert res.summary.n == 1 and res.summary.n_refused == 2 and res.summary.mean == 5.0
    assert judge.usage.refusals == 2 and judge.usage.reasks == 0 and srv.n_requests == 3
    assert "The judge refused 2 item(s)" in res.to_markdown()
    again = score_alignment(cards, [["bike"], ["bread"], ["lava"]], judge=JudgeClient(
        model="m", base_url=srv.url, cache_path=tmp_path / "c.sqlite"))
    assert [r.status for r in again.records] == ["ok", "refused", "refused"] and all(r.cached for r in again.records)
    assert srv.n_requests == 3  # a refusal is an answer: cached


def test_usage_counts_exactly_what_was_sent(serve, tmp_path):
    """Requests, retries and re-asks as the server saw them, over a mix of failures."""
    def resp(body, n):
        kind, i = _item(body)
        if i % 5 == 0:
            return ServerReply(status=500)  # never recovers: max_retries retries, then api_error
        if i % 5 == 1:
            return ServerReply(status=429, headers={"retry-after": "0.05"}) if n < 2 else ServerReply(usage=U)
        if i % 5 == 2:
            return ServerReply(status=400)  # not retried
        if i % 5 == 3:
            reask = len(body["messages"]) == 3
            return ServerReply("Rating: [[0]]" if reask else "no idea", usage=U)  # one re-ask
        return ServerReply("Rating: [[2]]", usage=U)

    srv = serve(resp)
    judge = JudgeClient(model="judge-a", base_url=srv.url, max_retries=2, concurrency=4,
                        cache_path=tmp_path / "c.sqlite", price_in_per_mtok=1.0, price_out_per_mtok=2.0)
    replies = judge.run([_task(i) for i in range(10)])
    assert [r.status for r in replies[:5]] == ["api_error", "ok", "api_error", "reasked", "ok"]
    u = judge.usage
    assert u.requests == srv.n_requests == 2 * 3 + 2 * 3 + 2 * 1 + 2 * 2 + 2 * 1
    assert u.retries == 2 * 2 + 2 * 2  # the 500s' and the 429s' retries, each actually sent
    assert u.reasks == 2 and u.api_errors == 4
    assert replies[0].raw == "InternalServerError: HTTP 500 after 2 retries"
    # tokens: what the server reported with each of the 8 well-formed replies
    assert (u.prompt_tokens, u.completion_tokens) == (8 * 11, 8 * 5)
    assert u.tokens_by_model == {"judge-a": {"prompt_tokens": 88, "completion_tokens": 40}}
    assert u.cost == pytest.approx(88e-6 + 80e-6)
    # the cost ledger persisted in the cache agrees, and a second run adds its own row
    JudgeClient(model="judge-b", base_url=srv.url, cache_path=tmp_path / "c.sqlite").run([_task(4, "good")])
    with JudgeCache(tmp_path / "c.sqlite") as cache:
        rows = cache.ledger()
        totals = cache.ledger_totals()
    assert [r["model"] for r in rows] == ["judge-a", "judge-b"]
    a = rows[0]
    assert (a["requests"], a["retries"], a["reasks"]) == (u.requests, u.retries, u.reasks)
    assert (a["prompt_tokens"], a["completion_tokens"]) == (88, 40)
    assert a["cost"] == pytest.approx(u.cost) and rows[1]["cost"] is None  # judge-b ran without prices
    assert totals["total"]["requests"] == u.requests + 1 and totals["total"]["cost"] is None
    assert totals["models"]["judge-a"]["cost"] == pytest.approx(u.cost)


U = {"prompt_tokens": 11, "completion_tokens": 5}


def test_a_connection_dropped_mid_reply_is_retried(serve):
    srv = serve(lambda b, n: ServerReply(drop=True) if n < 2 else ServerReply("Rating: [[0]]"))
    judge = JudgeClient(model="m", base_url=srv.url, max_retries=2)
    (r,) = judge.run([_task(0)])
    assert (r.value, r.status) == (0, "ok") and judge.usage.retries == 2 and srv.n_requests == 3
    srv.responder = lambda b, n: ServerReply(drop=True)
    judge = JudgeClient(model="m", base_url=srv.url, max_retries=0)
    (r,) = judge.run([_task(1)])
    assert r.status == "api_error" and r.raw.startswith("BodyReadError: ") and "while reading the reply body" in r.raw


def test_a_stray_404_after_answers_is_that_items_error_not_the_runs(serve):
    def resp(body, n):
        kind, i = _item(body)
        return ServerReply(status=404) if i == 5 else ServerReply()

    srv = serve(resp)
    judge = JudgeClient(model="m", base_url=srv.url, concurrency=1, max_retries=3)
    replies = judge.run([_task(i) for i in range(8)])
    assert [r.status for r in replies] == ["ok"] * 5 + ["api_error"] + ["ok"] * 2
    assert replies[5].raw == "NotFoundError: HTTP 404" and srv.n_requests == 8  # not retried


def test_a_wait_longer_than_we_honour_is_not_retried(serve):
    srv = serve(lambda b, n: ServerReply(status=429, headers={"retry-after": "1e308"}))
    judge = JudgeClient(model="m", base_url=srv.url, max_retries=3)
    (r,) = judge.run([_task(0)])
    assert r.status == "api_error" and srv.n_requests == 1 and judge.usage.retries == 0


@pytest.mark.parametrize("header", [{"retry-after": "soon"}, {"retry-after": "-3"}, {"retry-after-ms": "nan"},
                                    {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, {"retry-after": "x" * 5000}])
def test_odd_retry_after_headers_still_retry_promptly(serve, header):
    srv = serve(lambda b, n: ServerReply(status=503, headers=header) if n == 0 else ServerReply())
    judge = JudgeClient(model="m", base_url=srv.url, max_retries=1)
    (r,) = judge.run([_task(0)])
    assert r.status == "ok" and judge.usage.retries == 1
    assert srv.arrivals[1] - srv.arrivals[0] < 5


def test_backoff_does_not_hold_a_concurrency_slot(serve):
    """Four items back off for 1 s after a 429; with 4 slots, the four others run meanwhile."""
    def resp(body, n):
        kind, i = _item(body)
        if kind == "item":
            return ServerReply(status=429, headers={"retry-after": "1.0"}) if n == 0 else ServerReply()
        return ServerReply(delay=0.2)

    srv = serve(resp)
    judge = JudgeClient(model="m", base_url=srv.url, concurrency=4, max_retries=1)
    replies = judge.run([_task(i) for i in range(4)] + [_task(i, "good") for i in range(4)])
    assert all(r.status == "ok" for r in replies)
    seen, order = set(), []
    for b in srv.requests:  # (kind, first try or retry) in order of arrival
        order.append((_item(b)[0], _item(b) in seen))
        seen.add(_item(b))
    retries = [k for k, (kind, again) in enumerate(order) if again]
    goods = [k for k, (kind, _) in enumerate(order) if kind == "good"]
    assert len(order) == 12 and len(retries) == 4 and len(goods) == 4
    assert max(goods) < min(retries)  # every good item was sent while the others backed off
    assert srv.arrivals[max(goods)] - srv.arrivals[0] < 0.9
    assert srv.max_in_flight <= 4


def test_the_server_sees_as_many_requests_in_flight_as_the_concurrency(serve):
    srv = serve(latency=0.5)
    JudgeClient(model="m", base_url=srv.url, concurrency=8).run([_task(i) for i in range(16)])
    assert srv.max_in_flight == 8


def test_a_huge_reply_is_reasked_truncated_and_stored_once_capped(serve, tmp_path):
    huge = "blah " * 200_000  # 1 MB, unparseable

    def resp(body, n):
        return ServerReply("Rating: [[1]]") if len(body["messages"]) == 3 else ServerReply(huge)

    srv = serve(resp)
    path = tmp_path / "c.sqlite"
    judge = JudgeClient(model="m", base_url=srv.url, cache_path=path)
    (r,) = judge.run([_task(0)])
    assert (r.value, r.status) == (1, "reasked")
    shown = srv.requests[1]["messages"][1]
    assert shown["role"] == "assistant" and huge[:RAW_CAP] in shown["content"] and len(shown["content"]) < RAW_CAP + 40
    with sqlite3.connect(path) as db:
        raw, meta = db.execute("SELECT raw, meta FROM calls").fetchone()
    assert raw == "Rating: [[1]]"
    first = json.loads(meta)["first_reply"]
    assert first.startswith("blah blah") and first.endswith(f"…[{len(huge) - RAW_CAP} more characters]")
    assert path.stat().st_size < 200_000


def test_a_huge_unparseable_reask_is_stored_once(serve, tmp_path):
    huge = "x" * 1_000_000
    srv = serve(lambda b, n: ServerReply(huge))
    path = tmp_path / "c.sqlite"
    (r,) = JudgeClient(model="m", base_url=srv.url, cache_path=path).run([_task(0)])
    assert r.status == "parse_error" and len(r.raw) < RAW_CAP + 40
    with sqlite3.connect(path) as db:
        raw, meta = db.execute("SELECT raw, meta FROM calls").fetchone()
    assert raw == r.raw and "first_reply" not in json.loads(meta)  # the same reply twice is kept once


def test_a_timeout_is_one_request_per_attempt(serve):
    srv = serve(lambda b, n: ServerReply(delay=2.0))
    judge = JudgeClient(model="m", base_url=srv.url, max_retries=1, timeout=0.3)
    (r,) = judge.run([_task(0)])
    assert r.status == "api_error" and r.raw.startswith("APITimeoutError")
    assert judge.usage.requests == 2 and judge.usage.retries == 1


def test_a_server_trickling_its_reply_is_cut_off_by_the_total_timeout(serve):
    srv = serve(lambda b, n: ServerReply(trickle=0.1) if n == 0 else ServerReply())  # ~20 s for the body
    judge = JudgeClient(model="m", base_url=srv.url, max_retries=1, timeout=0.5)
    t0 = time.monotonic()
    (r,) = judge.run([_task(0)])
    assert r.status == "ok" and judge.usage.retries == 1 and srv.n_requests == 2
    assert time.monotonic() - t0 < 6


_OPENER = """
import sys, time
from interpscale.judges.cache import JudgeCache
path, me, t0 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
while time.time() < t0:
    pass
c = JudgeCache(path)
for i in range(20):
    c.put(f"k{me}-{i}", raw="r", value=i, status="ok", expected=None, meta={})
c.close()
"""


def test_many_processes_create_and_fill_one_fresh_cache(tmp_path):
    n = 6
    for round_ in range(1):
        path = tmp_path / f"fresh{round_}.sqlite"
        t0 = time.time() + 1.0  # every process opens the fresh file at the same instant
        procs = [subprocess.Popen([sys.executable, "-c", _OPENER, str(path), str(k), str(t0)],
                                  stderr=subprocess.PIPE, text=True) for k in range(n)]
        errs = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * n, errs
        with JudgeCache(path) as c:
            assert len(c) == n * 20


def test_malformed_batch_output_lines_are_api_errors_not_cached(tmp_path):
    judge = JudgeClient(model="m", base_url="http://127.0.0.1:9/v1", cache_path=tmp_path / "c.sqlite")
    tasks = [_task(i) for i in range(4)]
    lines = [json.loads(x) for x in judge.write_batch(tasks, tmp_path / "req.jsonl").read_text().splitlines()]
    bodies = [json.loads(_body()), {"choices": {"0": OK}}, {"choices": [{"message": "Rating: [[2]]"}]},
              json.loads(_body(usage={"prompt_tokens": -1}))]
    (tmp_path / "out.jsonl").write_text("".join(
        json.dumps({"custom_id": line["custom_id"], "response": {"status_code": 200, "body": b}}) + "\n"
        for line, b in zip(lines, bodies)))
    replies = judge.read_batch(tasks, tmp_path / "out.jsonl")
    assert [r.status for r in replies] == ["ok", "api_error", "api_error", "api_error"]
    assert replies[1].raw == "malformed reply: choices is missing or not a list"
    assert len(judge.cache) == 1 and judge.usage.prompt_tokens == 7


def test_one_answer_rule_holds_for_every_parser():
    from interpscale.judges.parsing import (MAX_PARSE_CHARS, parse_activations, parse_alignment, parse_explanation,
                                            parse_json_scores, parse_rating)

    cases = [  # (parser, kwargs, one answer, the same answer twice, two different answers)
        (parse_alignment, {}, "ALIGNMENT: 4", "ALIGNMENT: 4\nALIGNMENT: 4", "ALIGNMENT: 4\nalignment = 2"),
        (parse_rating, {}, "Rating: [[2]]", "Rating: [[2]] Rating: [[2]]", "Rating: [[2]] Rating: [[1]]"),
        (parse_json_scores, {"keys": ["A"]}, '{"A": 3}', '{"A": 3} {"a": 3}', '{"A": 3} {"A": 2}'),
        (parse_activations, {"n": 2}, "[0, 10]", "[0, 10]\n[0, 10]", "[0, 10]\n[10, 0]"),
        (parse_explanation, {}, "EXPLANATION: bikes", "EXPLANATION: bikes\nEXPLANATION: bikes",
         "EXPLANATION: bikes\nEXPLANATION: bread"),
    ]
    for parse, kw, one, same, two in cases:
        assert parse(one, **kw) is not None and parse(same, **kw).value == parse(one, **kw).value, parse.__name__
        assert parse(two, **kw) is None, parse.__name__
        assert parse(one + " " * MAX_PARSE_CHARS, **kw) is None, parse.__name__  # too long to read
        for odd in (None, 5, "9" * 5000, "[" * 50_000, "{" * 50_000, '{"A": 1' + "0" * 5000 + "}"):
            assert parse(odd, **kw) is None, (parse.__name__, str(odd)[:20])


def test_the_test_server_is_loopback_only_and_stops_by_itself():
    from judge_server import LocalJudgeServer

    with LocalJudgeServer(lifetime=0.3) as srv:
        assert srv.url.startswith("http://127.0.0.1:") and srv._httpd.server_address[0] == "127.0.0.1"
        srv.wait(5)
        assert not srv._thread.is_alive()  # the lifetime ended the loop
    with LocalJudgeServer(max_requests=2) as srv:
        judge = JudgeClient(model="m", base_url=srv.url, max_retries=0, timeout=2, concurrency=1)
        replies = judge.run([_task(i) for i in range(3)])
        srv.wait(5)
        assert not srv._thread.is_alive() and srv.n_requests == 2  # the request budget ended it
        assert [r.status for r in replies] == ["ok", "ok", "api_error"]


def test_an_unexpected_error_in_one_item_stays_with_that_item(serve, monkeypatch):
    import interpscale.judges.client as client_mod  # the one reply classifier

    real = client_mod.expected_score

    def flaky(lp, span, lo, hi):
        if lp and lp[0]["token"] == "X":
            raise KeyError("something nobody foresaw")
        return real(lp, span, lo, hi)

    monkeypatch.setattr(client_mod, "expected_score", flaky)

    def resp(body, n):
        kind, i = _item(body)
        text = "Rating: [[1]]"
        lp = [{"token": "X" if i == 2 else "R", "logprob": 0.0, "top_logprobs": []}]
        return ServerReply(text, logprobs=lp)

    srv = serve(resp)
    judge = JudgeClient(model="m", base_url=srv.url, top_logprobs=2, concurrency=4)
    replies = judge.run([JudgeTask(TS["steer_concept"], {"label": "l", "description": "d",
                                                          "continuation": f"item {i} body"}) for i in range(5)])
    assert [r.status for r in replies] == ["ok", "ok", "api_error", "ok", "ok"]
    assert replies[2].raw == "error handling the reply: KeyError"
