"""Judge client throughput against the local OpenAI-compatible server (100 ms per call).

Prints calls/s sequentially (concurrency 1, the baseline) and at concurrency 32 with the
ratio between them, and the time of a fully cached rerun of 1,000 calls. The server runs
in its own process (as a real endpoint would), the client is the real openai SDK.
Targets (issue 6): >= 50 calls/s at concurrency 32, ratio >= 20x, cached 1,000 < 1 s.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from interpscale.judges import JudgeClient, JudgeTask, TemplateSet

LATENCY = 0.1


def tasks(tag: str, n: int) -> list[JudgeTask]:
    tpl = TemplateSet()["steer_quality"]
    return [JudgeTask(tpl, {"continuation": f"{tag} continuation number {i} about nothing much"}) for i in range(n)]


def timed(url: str, cache: Path, ts: list[JudgeTask], concurrency: int) -> tuple[float, JudgeClient]:
    judge = JudgeClient(model="bench", base_url=url, cache_path=cache, concurrency=concurrency)
    t0 = time.perf_counter()
    replies = judge.run(ts)
    dt = time.perf_counter() - t0
    assert all(r.value == 1 for r in replies), "server replies did not parse"
    return dt, judge


def main() -> int:
    server = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parents[1] / "tests" / "judges" / "judge_server.py"),
                               "--latency", str(LATENCY)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as d:
            cache = Path(d) / "cache.sqlite"
            timed(url, cache, tasks("warm-up", 4), 4)  # imports, first connection
            n_seq, n_conc = 30, 1000
            t_seq, _ = timed(url, cache, tasks("sequential", n_seq), 1)
            t_conc, judge = timed(url, cache, tasks("concurrent", n_conc), 32)
            seq_rate, conc_rate = n_seq / t_seq, n_conc / t_conc
            t_cached, again = timed(url, cache, tasks("concurrent", n_conc), 32)
            assert again.usage.cache_hits == n_conc and again.usage.requests == 0
        print(f"server latency per call      : {LATENCY * 1000:.0f} ms")
        print(f"sequential (concurrency 1)   : {seq_rate:7.1f} calls/s  ({n_seq} calls in {t_seq:.2f} s)")
        print(f"concurrency 32               : {conc_rate:7.1f} calls/s  ({n_conc} calls in {t_conc:.2f} s, "
              f"{judge.usage.retries} SDK retries)")
        print(f"ratio concurrent/sequential  : {conc_rate / seq_rate:7.1f}x   (target >= 20x; >= 50 calls/s)")
        print(f"fully cached rerun, {n_conc} calls: {t_cached:.3f} s  (target < 1 s; "
              f"{n_conc / t_cached:,.0f} calls/s, {t_conc / t_cached:.0f}x faster than calling)")
    finally:
        server.terminate()
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
