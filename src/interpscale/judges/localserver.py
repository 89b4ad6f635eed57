"""A small scripted OpenAI-compatible chat server on 127.0.0.1 (stdlib only).

Used by the tests and benchmarks (and handy for dry runs): the real ``openai`` client
talks real HTTP to it. A ``responder(body, attempt) -> ServerReply`` decides each answer;
``attempt`` counts earlier requests with the same messages, so "429 first, then 200" or
"garbage first, valid on the re-ask" are one-liners. The default responder answers every
judge template in its expected format.
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


@dataclass
class ServerReply:
    text: Optional[str] = "Rating: [[1]]"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    logprobs: Optional[list[dict[str, Any]]] = None  # choices[0].logprobs.content
    raw_body: Optional[bytes] = None  # sent verbatim (malformed-body tests)


Responder = Callable[[dict, int], ServerReply]


def default_responder(body: dict, attempt: int) -> ServerReply:
    """A well-behaved judge: a valid reply in whatever format the prompt asks for."""
    text = "\n".join(str(m.get("content") or "") for m in body.get("messages", []))
    if "ALIGNMENT:" in text:
        return ServerReply("ALIGNMENT: 4")
    if "EXPLANATION:" in text:
        return ServerReply("EXPLANATION: the token 'the'")
    m = re.search(r"Tokens \((\d+) in total\)", text)
    if m:
        return ServerReply(json.dumps([0] * int(m.group(1))))
    letters = re.findall(r"^([A-Z])\. ", text, flags=re.MULTILINE)
    if letters:
        return ServerReply(json.dumps({k: 3 for k in letters}))
    return ServerReply("Rating: [[1]]")


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

    def __init__(self, responder: Responder | None = None, *, latency: float = 0.0):
        self.responder = responder or default_responder
        self.latency = latency
        self.requests: list[dict] = []
        self.arrivals: list[float] = []  # time.monotonic() of each request
        self.auth_headers: set[str] = set()
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()
        self._httpd: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def n_requests(self) -> int:
        with self._lock:
            return len(self.requests)

    def _attempt(self, body: dict) -> int:
        key = json.dumps(body.get("messages"), sort_keys=True)
        with self._lock:
            self.requests.append(body)
            self.arrivals.append(time.monotonic())
            n = self._seen.get(key, 0)
            self._seen[key] = n + 1
        return n

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
                n = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(n) or b"{}")
                except json.JSONDecodeError:
                    body = {}
                with server._lock:
                    server.auth_headers.add(self.headers.get("Authorization") or "")
                reply = server.responder(body, server._attempt(body))
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
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # client gave up (timeout test)
                    pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # the stdlib default (5) drops connections under bursts
            daemon_threads = True

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "LocalJudgeServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _completion(body: dict, reply: ServerReply) -> dict[str, Any]:
    prompt_chars = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
    out_tokens = len((reply.text or "").split())
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": reply.text}}
    if reply.logprobs is not None and body.get("logprobs"):
        choice["logprobs"] = {"content": reply.logprobs}
    return {"id": "chatcmpl-local", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "local"), "choices": [choice],
            "usage": {"prompt_tokens": prompt_chars // 4, "completion_tokens": out_tokens,
                      "total_tokens": prompt_chars // 4 + out_tokens}}


def main(argv: list[str] | None = None) -> int:
    """``python -m interpscale.judges.localserver --latency 0.1``: serve the default
    responder until killed; the first stdout line is the base URL."""
    import argparse
    import sys

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--latency", type=float, default=0.0, help="seconds added to every reply")
    a = p.parse_args(argv)
    srv = LocalJudgeServer(latency=a.latency).start()
    sys.stdout.write(srv.url + "\n")
    sys.stdout.flush()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
