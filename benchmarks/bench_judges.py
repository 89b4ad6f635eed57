"""Judge client throughput against the local OpenAI-compatible test server (100 ms per call).

The server (tests/judges/judge_server.py, loopback only) runs in its own process as a
real endpoint would, and reports the largest number of requests it handled at once; the
client is the real openai SDK. Printed, each against the sequential baseline measured in
the same process:

- calls/s at concurrency 1 (baseline), 16 and 64, with the server's max in-flight;
- the same at concurrency 16 and 64 when 20 % of first requests get a 429 asking for a
  0.3 s wait (backoff happens outside the concurrency slot, so the server should still
  see the full concurrency in flight);
- a fully cached rerun of the 1,000-call set.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from interpscale.judges import JudgeClient, JudgeTask, TemplateSet

LATENCY = 0.1
SERVER = Path(__file__).resolve().parents[1] / "tests" / "judges" / "judge_server.py"


class Server:
    def __init__(self, throttle: float = 0.0):
        self.proc = subprocess.Popen([sys.executable, str(SERVER), "--latency", str(LATENCY), "--lifetime", "900",
                                      "--throttle", str(throttle)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.url = self.proc.stdout.readline().strip()

    def peak(self) -> int:
        """Largest number of requests in flight since the last call."""
        self.proc.stdin.write("peak\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline().split()[1])

    def close(self) -> None:
        self.proc.stdin.close()  # the server stops when its stdin closes
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait()


def tasks(tag: str, n: int) -> list[JudgeTask]:
    tpl = TemplateSet()["steer_quality"]
    return [JudgeTask(tpl, {"continuation": f"{tag} continuation number {i} about nothing much"}) for i in range(n)]


def timed(url: str, cache: Path, ts: list[JudgeTask], concurrency: int) -> tuple[float, JudgeClient]:
    judge = JudgeClient(model="bench", base_url=url, cache_path=cache, concurrency=concurrency, max_retries=4)
    t0 = time.perf_counter()
    replies = judge.run(ts)
    dt = time.perf_counter() - t0
    assert all(r.value == 1 for r in replies), "server replies did not parse"
    return dt, judge


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        cache = Path(d) / "cache.sqlite"
        rows = []
        srv = Server()
        try:
            timed(srv.url, cache, tasks("warm-up", 4), 4)  # imports, first connection
            srv.peak()
            n_seq = 30
            t_seq, _ = timed(srv.url, cache, tasks("sequential", n_seq), 1)
            seq_rate = n_seq / t_seq
            rows.append(("sequential (baseline)", 1, n_seq, seq_rate, srv.peak(), 0))
            for conc, n in ((16, 400), (64, 1000)):
                t, judge = timed(srv.url, cache, tasks(f"c{conc}", n), conc)
                rows.append(("plain", conc, n, n / t, srv.peak(), judge.usage.retries))
            t_cached, again = timed(srv.url, cache, tasks("c64", 1000), 64)
            assert again.usage.cache_hits == 1000 and again.usage.requests == 0
        finally:
            srv.close()
        srv = Server(throttle=0.2)
        try:
            timed(srv.url, cache, tasks("warm-up-2", 4), 4)
            srv.peak()
            for conc, n in ((16, 400), (64, 1000)):
                t, judge = timed(srv.url, cache, tasks(f"t{conc}", n), conc)
                rows.append(("20% 429 first", conc, n, n / t, srv.peak(), judge.usage.retries))
        finally:
            srv.close()
    print(f"server latency per call: {LATENCY * 1000:.0f} ms; ideal rate = concurrency / latency")
    print(f"{'scenario':22s} {'conc':>4s} {'calls':>5s} {'calls/s':>8s} {'vs seq':>7s} {'max in flight':>13s} "
          f"{'retries':>7s}")
    for name, conc, n, rate, peak, retries in rows:
        print(f"{name:22s} {conc:4d} {n:5d} {rate:8.1f} {rate / seq_rate:6.1f}x {peak:13d} {retries:7d}")
    print(f"fully cached rerun, 1000 calls: {t_cached:.3f} s ({1000 / t_cached:,.0f} calls/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
