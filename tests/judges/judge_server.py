"""A small scripted OpenAI-compatible chat server on 127.0.0.1 (stdlib only), for tests
and benchmarks: the real ``openai`` client talks real HTTP to it.

A ``responder(body, attempt) -> ServerReply`` decides each chat answer (``embedder``, each
``/embeddings`` answer); ``attempt`` counts
earlier requests with the same messages, so "429 first, then 200" or "garbage first,
valid on the re-ask" are one-liners. ``raw_body`` sends any bytes as the reply body, so a
test can send every malformed shape a real provider or local inference server has sent.

The server listens on the loopback interface only and stops by itself: its request loop
ends after ``lifetime`` seconds or ``max_requests`` requests, whichever comes first.
It records every request body, arrival time and the largest number of requests it was
handling at once (``max_in_flight``).
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional

HOST = "127.0.0.1"  # loopback only


@dataclass
class ServerReply:
    text: Optional[str] = "Rating: [[1]]"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    logprobs: Optional[list[dict[str, Any]]] = None  # choices[0].logprobs.content
    raw_body: Optional[bytes] = None  # sent verbatim (malformed-body tests)
    usage: Any = "auto"  # "auto": counted from the texts; anything else is sent as is
    refusal: Optional[str] = None  # message.refusal (OpenAI's refusal field)
    finish_reason: str = "stop"
    trickle: float = 0.0  # seconds between body bytes (a server that never finishes replying)
    drop: bool = False  # send half the body, then close the connection


Responder = Callable[[dict, int], ServerReply]


def default_responder(body: dict, attempt: int) -> ServerReply:
    """A well-behaved judge: a valid reply in whatever format the prompt asks for
    (concept tags and cards too, deterministic in the prompt)."""
    text = "\n".join(str(m.get("content") or "") for m in body.get("messages", []) if isinstance(m, dict))
    if "ALIGNMENT:" in text:
        return ServerReply("ALIGNMENT: 4")
    if "EXPLANATION:" in text:
        return ServerReply("EXPLANATION: the token 'the'")
    m = re.search(r"Tokens \((\d+) in total\)", text)
    if m:
        return ServerReply(json.dumps([0] * int(m.group(1))))
    if "=== PASSAGE ===" in text:
        return ServerReply(tag_reply(text))
    if "These tags were grouped together" in text:
        return ServerReply(card_reply(text))
    letters = re.findall(r"^([A-Z])\. ", text, flags=re.MULTILINE)
    if letters:
        return ServerReply(json.dumps({k: 3 for k in letters}))
    return ServerReply("Rating: [[1]]")


_STOP = frozenset("the a an and of to in is it with near while then so again for on at by as or be".split())


def tag_reply(prompt: str) -> str:
    """Deterministic structured tags: the passage's most frequent content words spread over
    the keys the prompt asks for (broad = frequent first), as the JSON object it wants."""
    keys = json.loads(re.search(r"keys are exactly (\[[^\]]*\])", prompt).group(1))
    passage = prompt.split("=== PASSAGE ===", 1)[1].rsplit("Reply with one JSON object", 1)[0]
    words = [w for w in re.findall(r"[a-z][a-z'-]+", passage.lower()) if w not in _STOP]
    ranked = sorted(set(words), key=lambda w: (-words.count(w), w)) or ["text"]
    ranked = (ranked * (1 + 2 * len(keys) // len(ranked)))[: max(2 * len(keys), min(len(ranked), 12))]
    return json.dumps({k: ranked[i:: len(keys)] for i, k in enumerate(keys)})


def card_reply(prompt: str) -> str:
    """Deterministic semantic card from the first listed tags."""
    tags = re.findall(r"^- (.+)$", prompt, flags=re.MULTILINE) or ["misc"]
    return json.dumps({"name": " ".join(tags[:2]), "description": f"Passages about {', '.join(tags[:3])}."})


EMBED_DIM = 16


def embedding(text: str, dim: int = EMBED_DIM) -> list[float]:
    """A deterministic unit vector per text (seeded by its hash)."""
    import hashlib
    import random

    rng = random.Random(int(hashlib.sha256(text.encode()).hexdigest()[:16], 16))
    v = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    n = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / n for x in v]


def default_embedder(body: dict, attempt: int) -> ServerReply:
    """A well-behaved ``/embeddings`` endpoint: one deterministic vector per input."""
    inputs = body.get("input")
    inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
    data = [{"object": "embedding", "index": i, "embedding": embedding(str(t))} for i, t in enumerate(inputs)]
    n = sum(len(str(t)) for t in inputs) // 4
    return ServerReply(raw_body=json.dumps({"object": "list", "data": data, "model": body.get("model", "local"),
                                            "usage": {"prompt_tokens": n, "total_tokens": n}}).encode())


def misbehaving(responder: Responder, fractions: dict[str, float], delay: float = 0.3) -> Responder:
    """``responder``, except that a reproducible share of prompts (by hash of the messages up
    to the first user message, so a re-ask misbehaves like its question) gets, on every
    attempt, a ``garbled`` text, a ``refused`` reply, a ``malformed`` body, or (``slow``) the
    right answer after ``delay`` s. ``kind_of(body)`` tells which."""
    import hashlib

    def kind_of(body: dict) -> str:
        msgs = list(body.get("messages") or [])
        first = next((i for i, m in enumerate(msgs) if isinstance(m, dict) and m.get("role") == "user"), len(msgs))
        h = int(hashlib.sha256(json.dumps(msgs[: first + 1], sort_keys=True).encode()).hexdigest()[:8], 16) % 1000
        edge = 0.0
        for kind, frac in fractions.items():
            edge += frac * 1000
            if h < edge:
                return kind
        return "ok"

    def respond(body: dict, attempt: int) -> ServerReply:
        kind = kind_of(body)
        if kind == "garbled":
            return ServerReply("{{ not json at all ]]")
        if kind == "refused":
            return ServerReply(None, refusal="I can't help with that.")
        if kind == "malformed":
            return ServerReply(raw_body=b'{"choices": "nope"')
        good = responder(body, attempt)
        if kind == "slow":
            good.delay += delay
        return good

    respond.kind_of = kind_of  # type: ignore[attr-defined]
    return respond


def throttled(responder: Responder, fraction: float, wait: float = 0.3) -> Responder:
    """``responder``, except that the first request of a ``fraction`` of the distinct
    message lists (chosen by hash, so reproducibly) gets a 429 asking to wait ``wait`` s."""
    import hashlib

    def respond(body: dict, attempt: int) -> ServerReply:
        h = int(hashlib.sha256(json.dumps(body.get("messages"), sort_keys=True).encode()).hexdigest()[:8], 16)
        if attempt == 0 and h % 1000 < fraction * 1000:
            return ServerReply(status=429, headers={"retry-after": str(wait)})
        return responder(body, attempt)

    return respond


def digit_logprobs(text: str, probs: dict[int, float]) -> list[dict[str, Any]]:
    """Per-character tokens for ``text``; the last digit token carries ``probs`` as its
    top_logprobs (so a server can return an expected score)."""
    last = max(i for i, ch in enumerate(text) if ch.isdigit())
    toks = []
    for i, ch in enumerate(text):
        top = [{"token": str(k), "logprob": math.log(p), "bytes": None} for k, p in probs.items()] if i == last else []
        toks.append({"token": ch, "logprob": 0.0, "bytes": None, "top_logprobs": top})
    return toks


class LocalJudgeServer:
    """``with LocalJudgeServer(responder, latency=0.1) as srv: JudgeClient(base_url=srv.url, ...)``."""

    def __init__(self, responder: Responder | None = None, *, latency: float = 0.0, lifetime: float = 300.0,
                 max_requests: int = 100_000, embedder: Responder | None = None):
        self.responder = responder or default_responder
        self.embedder = embedder or default_embedder  # answers POST .../embeddings
        self.latency = latency
        self.lifetime, self.max_requests = lifetime, max_requests
        self.requests: list[dict] = []
        self.arrivals: list[float] = []  # time.monotonic() of each request
        self.auth_headers: set[str] = set()
        self.in_flight = 0
        self.max_in_flight = 0
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._deadline = math.inf
        self._httpd: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://{HOST}:{self._httpd.server_address[1]}/v1"

    @property
    def n_requests(self) -> int:
        with self._lock:
            return len(self.requests)

    def reset_peak(self) -> None:
        with self._lock:
            self.max_in_flight = self.in_flight

    def _attempt(self, body: dict) -> int:
        key = json.dumps(body.get("messages", body.get("input")), sort_keys=True)
        with self._lock:
            self.requests.append(body)
            self.arrivals.append(time.monotonic())
            n = self._seen.get(key, 0)
            self._seen[key] = n + 1
        return n

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def start(self) -> "LocalJudgeServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def setup(self) -> None:
                super().setup()  # no Nagle: headers and body go out as separate writes
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self) -> None:
                if not server._serving():  # past the lifetime or the request budget: hang up
                    self.close_connection = True
                    return
                server._enter()
                try:
                    self._answer()
                finally:
                    server._leave()

            def _answer(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(n) or b"{}")
                except json.JSONDecodeError:
                    body = {}
                if not isinstance(body, dict):
                    body = {}
                with server._lock:
                    server.auth_headers.add(self.headers.get("Authorization") or "")
                answer = server.embedder if self.path.rstrip("/").endswith("/embeddings") else server.responder
                reply = answer(body, server._attempt(body))
                time.sleep(server.latency + reply.delay)
                if reply.raw_body is not None:
                    payload = reply.raw_body
                elif reply.status != 200:
                    payload = json.dumps({"error": {"message": f"scripted {reply.status}", "type": "scripted"}}).encode()
                else:
                    payload = json.dumps(_completion(body, reply)).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    if reply.drop:
                        self.wfile.write(payload[: len(payload) // 2])
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                    elif reply.trickle:
                        for i in range(len(payload)):  # bounded: one byte per step
                            self.wfile.write(payload[i: i + 1])
                            self.wfile.flush()
                            time.sleep(reply.trickle)
                    else:
                        self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # client gave up (timeout test)
                    pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # the stdlib default (5) drops connections under bursts
            daemon_threads = True
            timeout = 0.05  # handle_request() returns after this long without a connection

        self._deadline = time.monotonic() + self.lifetime
        self._httpd = Server((HOST, 0), Handler)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        return self

    def _serving(self) -> bool:
        return not self._stop.is_set() and time.monotonic() < self._deadline and self.n_requests < self.max_requests

    def _serve(self) -> None:
        """Bounded request loop: ends on stop(), after ``lifetime`` s or ``max_requests``
        (connections kept alive are hung up on at the same moment, see do_POST)."""
        httpd = self._httpd
        assert httpd is not None
        while self._serving():
            httpd.handle_request()

    def wait(self, timeout: float | None = None) -> None:
        """Block until the request loop has ended by itself (lifetime or request budget)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
        if self._httpd is not None:
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "LocalJudgeServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _completion(body: dict, reply: ServerReply) -> dict[str, Any]:
    prompt_chars = sum(len(str(m.get("content") or "")) for m in body.get("messages", []) if isinstance(m, dict))
    out_tokens = len((reply.text or "").split())
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.refusal is not None:
        message["refusal"] = reply.refusal
    choice: dict[str, Any] = {"index": 0, "finish_reason": reply.finish_reason, "message": message}
    if reply.logprobs is not None and body.get("logprobs"):
        choice["logprobs"] = {"content": reply.logprobs}
    usage = reply.usage if reply.usage != "auto" else {
        "prompt_tokens": prompt_chars // 4, "completion_tokens": out_tokens, "total_tokens": prompt_chars // 4 + out_tokens}
    return {"id": "chatcmpl-local", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "local"), "choices": [choice], "usage": usage}


def main(argv: list[str] | None = None) -> int:
    """``python tests/judges/judge_server.py --latency 0.1 --lifetime 600``: serve the
    default responder until the lifetime ends (or the process is terminated); the first
    stdout line is the base URL, and the largest number of requests handled at once is
    printed as ``max_in_flight N`` after each ``peak`` line read from stdin."""
    import argparse
    import sys

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--latency", type=float, default=0.0, help="seconds added to every reply")
    p.add_argument("--lifetime", type=float, default=600.0, help="seconds after which the server stops by itself")
    p.add_argument("--throttle", type=float, default=0.0,
                   help="fraction of distinct requests answered 429 (retry-after 0.3 s) the first time")
    a = p.parse_args(argv)
    responder = throttled(default_responder, a.throttle) if a.throttle > 0 else default_responder
    srv = LocalJudgeServer(responder, latency=a.latency, lifetime=a.lifetime).start()
    sys.stdout.write(srv.url + "\n")
    sys.stdout.flush()
    try:
        for line in sys.stdin:  # ends when the parent closes stdin
            if line.strip() == "peak":
                sys.stdout.write(f"max_in_flight {srv.max_in_flight}\n")
                sys.stdout.flush()
                srv.reset_peak()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
