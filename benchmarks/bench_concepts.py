"""Concept annotation throughput and memory (issue 28).

Printed (ratios against a baseline measured in the same run):

1. the offline pipeline on the bundled generator's corpus (labels removed): seconds per
   stage and chunks/s of the whole build and of annotation alone, and the check (mean
   best-match F1, AMI) against the true labels;
2. peak RSS of annotating the 1x corpus and a 10x corpus (one process each, as the
   per-file tasks run): the ratio must stay within 1.25 (constant-memory streaming);
3. stage-1 tagging calls/s through ``tag_corpus`` against ``JudgeClient.run`` alone on the
   same prompts, both against the local test server (tests/judges/judge_server.py, loopback,
   ``--latency`` s per reply), each with a fresh cache.

    .venv/bin/python benchmarks/bench_concepts.py            # 400 docs, 10x = 4,000; 400 calls
    .venv/bin/python benchmarks/bench_concepts.py --quick    # 100 docs, 10x = 1,000; 80 calls
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "judges"))


def offline(work: Path, n_docs: int) -> Path:
    from interpscale.concepts import (annotate_corpus, build_library, check, chunk_corpus, tag_corpus,
                                      train_annotator, validate, write_synthetic)

    raw, truth = write_synthetic(work, n_docs, seed=0)
    out = work / "c"
    times = {}
    for name, fn in [("chunk", lambda: chunk_corpus([raw], out)), ("tag", lambda: tag_corpus(out)),
                     ("library", lambda: build_library(out)), ("train annotator", lambda: train_annotator(out)),
                     ("annotate", lambda: annotate_corpus(out)), ("validate", lambda: validate(out))]:
        t0 = time.perf_counter()
        fn()
        times[name] = time.perf_counter() - t0
    n = json.loads((out / "chunks/manifest.json").read_text())["totals"]["chunks"]
    res = check(out, [truth])
    print(f"offline pipeline, {n_docs} documents, {n} chunks")
    for k, v in times.items():
        print(f"  {k:<16} {v:7.2f} s")
    total = sum(times.values())
    print(f"  build: {n / total:8.1f} chunks/s   annotate alone: {n / times['annotate']:8.1f} chunks/s "
          f"({times['annotate'] / total:.2f} of the build)")
    print(f"  check: mean best F1 {res['mean_best_f1']:.3f}, AMI {res['ami']:.3f}; per concept: "
          + ", ".join(f"{k} {v['f1']:.2f}" for k, v in res["per_concept"].items()))
    return out


REPEATS = 3

# peak RSS from /proc/self/status VmHWM (per address space: it restarts at exec, while
# getrusage's ru_maxrss carries the parent's high-water mark from before the fork)
RSS = ("import json, sys, time; from interpscale.concepts.annotate import annotate_file, featurizer; "
       "hwm = lambda: int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]); "
       "featurizer().transform(['warm up']); base = hwm(); "
       "t = time.perf_counter(); r = annotate_file(*sys.argv[1:4]); r['s'] = time.perf_counter() - t; "
       "r['rss_kb'] = hwm(); r['base_kb'] = base; print(json.dumps(r))")


def rss(out: Path, work: Path, n_docs: int) -> float:
    """Peak RSS of annotating n_docs and 10 x n_docs documents, each in a fresh process."""
    from interpscale.concepts import write_synthetic

    rows = []
    for scale in (1, 10):
        src, _ = write_synthetic(work / f"x{scale}", n_docs * scale, seed=1)
        proc = subprocess.run([sys.executable, "-c", RSS, str(out / "annotator"), str(src), str(work / f"x{scale}.out")],
                              capture_output=True, text=True, check=True)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    for scale, r in zip((1, 10), rows):
        print(f"  annotate {scale:>2}x: {r['chunks']:7d} chunks in {r['s']:6.2f} s ({r['chunks'] / r['s']:8.1f} chunks/s), "
              f"peak RSS {r['rss_kb'] / 1024:7.1f} MiB (after imports {r['base_kb'] / 1024:7.1f} MiB)")
    ratio = rows[1]["rss_kb"] / rows[0]["rss_kb"]
    print(f"  RSS ratio 10x / 1x: {ratio:.3f} (must stay <= 1.25)")
    return ratio


def llm(out: Path, n_calls: int, latency: float, concurrency: int) -> None:
    from judge_server import LocalJudgeServer

    from interpscale.concepts.prompts import TAG, tag_values
    from interpscale.concepts.store import iter_chunks
    from interpscale.concepts.tag import tag_corpus
    from interpscale.judges import JudgeClient, JudgeTask

    texts = [r.text for r, _ in zip(iter_chunks(out), range(n_calls))]
    with LocalJudgeServer(latency=latency) as srv, tempfile.TemporaryDirectory() as tmp:
        warm = JudgeClient(model="m", base_url=srv.url, concurrency=concurrency, cache_path=Path(tmp) / "w.sqlite")
        warm.run([JudgeTask(TAG, tag_values(f"warm up {i}.", "prose")[0], parse_kwargs=tag_values("x", "prose")[1])
                  for i in range(concurrency)])  # imports, connections: not part of either rate
        tasks = []
        for t in texts:
            values, kw = tag_values(t, "prose")
            tasks.append(JudgeTask(TAG, values, parse_kwargs=kw))
        base, rate = 0.0, 0.0
        for rep in range(REPEATS):  # interleaved, best of each: the machine's load varies from second to second
            alone = JudgeClient(model="m", base_url=srv.url, concurrency=concurrency,
                                cache_path=Path(tmp) / f"alone{rep}.sqlite")
            t0 = time.perf_counter()
            alone.run(tasks)
            base = max(base, len(tasks) / (time.perf_counter() - t0))
            via = JudgeClient(model="m", base_url=srv.url, concurrency=concurrency,
                              cache_path=Path(tmp) / f"via{rep}.sqlite")
            t0 = time.perf_counter()
            tag_corpus(out, judge=via, n_sample=len(texts), seed=7)
            rate = max(rate, len(texts) / (time.perf_counter() - t0))
    print(f"stage-1 tagging through the client, {len(texts)} calls, {latency * 1000:.0f} ms per reply, "
          f"concurrency {concurrency}")
    print(f"  best of {REPEATS}: JudgeClient.run alone: {base:7.1f} calls/s   tag_corpus: {rate:7.1f} calls/s   ratio {rate / base:.3f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="100 documents and 80 calls")
    p.add_argument("--latency", type=float, default=0.05, help="seconds per test-server reply")
    p.add_argument("--concurrency", type=int, default=16)
    a = p.parse_args(argv)
    n_docs, n_calls = (100, 80) if a.quick else (400, 400)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        out = offline(work, n_docs)
        rss(out, work, n_docs)
        llm(out, n_calls, a.latency, a.concurrency)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
