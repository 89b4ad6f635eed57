"""Data preparation at scale, as ratios against baselines run in the same process (issue 21).

- throughput: ``prepare`` (read JSONL, split by hash, encode, write shards, finalize) on a
  concept-labelled JSONL vs the ``tokenizers`` batch encoder alone (``encode_batch`` and
  ``encode_batch_fast``, multi-threaded) on the same chunk texts already in memory; target
  >= 0.7x; also against ``encode_batch`` called on ~256 KiB groups (the batching prepare
  uses), and the same corpus as several files prepared by ``workers`` processes;
- memory: peak RSS of ``prepare`` and of reading batches, each in its own subprocess, for
  a corpus and one 10x larger; target <= 1.25x (also shown net of the import-only RSS);
- legacy: the old in-memory path (read all, pack in memory) on the small corpus, RSS per token;
- disk: bytes per token of tokens + chunk index + CSR labels at 33,732 concepts and
  10 labels per ~150-token chunk; target <= 8.

``python benchmarks/bench_data.py [--docs 4000]`` (the small corpus has --docs documents).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _write_corpus(path: Path, n_docs: int, copies: int, seed: int = 0) -> None:
    from interpscale.data import CorpusConfig, generate_documents

    concepts, docs = generate_documents(CorpusConfig(n_concepts=32, n_docs=n_docs, seed=seed))
    with open(path, "w") as f:
        for c in range(copies):  # copies differ by a tag so each document hashes anew
            for d, doc in enumerate(docs):
                chunks = [{"text": (f"copy {c} doc {d} " if j == 0 else "") + text,
                           "concepts": [concepts[k].label for k in labs]} for j, (text, labs) in enumerate(doc)]
                f.write(json.dumps({"chunks": chunks}) + "\n")


def _hwm_mib() -> float:
    """Peak resident set (VmHWM) of this process, MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(argv: list[str]) -> None:
    """Subprocess body: one measured action, then print its peak RSS (MiB) as JSON: the
    whole process's, and the peak reached after the imports (the peak is reset there)."""
    import interpscale.data  # noqa: F401  (torch & co: the same in every child)
    import interpscale.orchestration  # noqa: F401
    import tokenizers  # noqa: F401

    after_import = _hwm_mib()
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: reset VmHWM to the current RSS
        resettable = True
    except OSError:
        resettable = False
    what = argv[0]
    if what == "import":
        pass
    elif what == "prepare":
        from interpscale.data import prepare

        prepare(argv[1], argv[2], tokenizer=argv[3], val_fraction=0.05)
    elif what == "batches":
        from interpscale.data import open_data

        data = open_data(argv[1], seq_len=256)
        for step in range(0, 4000, 20):
            data.train.batch(step, 16, seed=0)
    elif what == "legacy":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "datapkg"))
        from reference_packing import load_source, pack, split_docs  # the in-memory packing, kept as a reference

        from interpscale.data import load_tokenizer

        cards, docs = load_source({"kind": "jsonl", "path": argv[1]})
        train, _ = split_docs(docs, 0.05, 0)
        packed = pack(train, load_tokenizer(argv[2]), len(cards), 256)
        print(json.dumps({"tokens": int(packed.tokens.size)}))
    peak = _hwm_mib()
    print(json.dumps({"rss_mib": max(peak, after_import), "work_mib": peak if resettable else float("nan")}))


def _run_child(*args: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env,
                         check=True).stdout
    res: dict = {}
    for line in out.splitlines():
        res.update(json.loads(line))
    return res


def _texts(path: Path) -> list[str]:
    out = []
    with open(path) as f:
        for line in f:
            out += [c["text"] for c in json.loads(line)["chunks"]]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--child", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.child:
        return _child(args.child)
    from interpscale.data import prepare, train_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        small, large = tmp / "small.jsonl", tmp / "large.jsonl"
        _write_corpus(small, args.docs, 1)
        _write_corpus(large, args.docs, 10)
        texts = _texts(large)  # throughput on the larger corpus (fixed costs amortised)
        n_split = 2 * (os.cpu_count() or 2)  # the same corpus as several input files, for --workers
        lines = large.read_text().splitlines(keepends=True)
        split_files = []
        for k in range(n_split):
            split_files.append(tmp / f"split{k}.jsonl")
            split_files[-1].write_text("".join(lines[k::n_split]))
        tok = train_tokenizer(texts[:20000], 4096)
        tok.save(str(tmp / "tok.json"))
        mb = small.stat().st_size / 2**20
        print(f"corpus: {mb:.1f} MiB JSONL, 10x: {large.stat().st_size / 2**20:.1f} MiB ({len(texts):,} chunks); "
              f"byte-level BPE, {tok.get_vocab_size()} tokens; cores: {os.cpu_count()}")

        # -- throughput, interleaved repeats, best of each ----------------------------------------
        workers = os.cpu_count() or 2
        best = {"encode_batch": 1e9, "encode_batch_fast": 1e9, "encode_batch 256KiB": 1e9, "prepare": 1e9,
                f"prepare {workers} workers": 1e9}
        groups, cur, size = [], [], 0  # the batching prepare uses (~256 KiB of text per call)
        for t in texts:
            cur.append(t)
            size += len(t)
            if size >= 1 << 18:
                groups.append(cur)
                cur, size = [], 0
        groups.append(cur)
        n_tok = 0
        for r in range(args.repeats):
            t0 = time.perf_counter()
            enc = tok.encode_batch(texts, add_special_tokens=False)
            best["encode_batch"] = min(best["encode_batch"], time.perf_counter() - t0)
            n_tok = sum(len(e.ids) for e in enc)
            del enc
            t0 = time.perf_counter()
            tok.encode_batch_fast(texts, add_special_tokens=False)
            best["encode_batch_fast"] = min(best["encode_batch_fast"], time.perf_counter() - t0)
            t0 = time.perf_counter()
            for g in groups:
                tok.encode_batch(g, add_special_tokens=False)
            best["encode_batch 256KiB"] = min(best["encode_batch 256KiB"], time.perf_counter() - t0)
            t0 = time.perf_counter()
            out = prepare(large, tmp / f"p{r}", tokenizer=tmp / "tok.json", val_fraction=0.05)
            best["prepare"] = min(best["prepare"], time.perf_counter() - t0)
            t0 = time.perf_counter()
            prepare(split_files, tmp / f"w{r}", tokenizer=tmp / "tok.json", val_fraction=0.05, workers=workers)
            best[f"prepare {workers} workers"] = min(best[f"prepare {workers} workers"], time.perf_counter() - t0)
        meta = json.loads((out / "meta.json").read_text())
        stream = sum(s["tokens"] for s in meta["splits"].values())
        print(f"throughput ({n_tok:,} text tokens, {stream:,} in the stream with [EOC]/[EOS]):")
        for k, v in best.items():
            print(f"  {k:18s} {v:6.2f} s  {n_tok / v / 1e3:8.0f} k tok/s")
        print(f"  prepare / encode_batch      = {best['encode_batch'] / best['prepare']:.2f}x  (target >= 0.7)")
        print(f"  prepare / encode_batch_fast = {best['encode_batch_fast'] / best['prepare']:.2f}x")
        print(f"  prepare / encode_batch in 256 KiB calls = {best['encode_batch 256KiB'] / best['prepare']:.2f}x")
        w = best[f"prepare {workers} workers"]
        print(f"  prepare of {n_split} files, {workers} worker processes / encode_batch = "
              f"{best['encode_batch'] / w:.2f}x, / encode_batch_fast = {best['encode_batch_fast'] / w:.2f}x")

        # -- memory, one subprocess per measurement -------------------------------------------------
        base = _run_child("import")
        ps = _run_child("prepare", str(small), str(tmp / "ms"), str(tmp / "tok.json"))
        pl = _run_child("prepare", str(large), str(tmp / "ml"), str(tmp / "tok.json"))
        bs = _run_child("batches", str(tmp / "ms"))
        bl = _run_child("batches", str(tmp / "ml"))
        n_small = json.loads((tmp / "ms" / "meta.json").read_text())["splits"]["train"]["tokens"]
        n_large = json.loads((tmp / "ml" / "meta.json").read_text())["splits"]["train"]["tokens"]
        b0 = base["work_mib"]
        print(f"peak RSS, MiB (whole process | peak after the imports; an import-only process: "
              f"{base['rss_mib']:.0f} | {b0:.0f}); train tokens {n_small:,} vs {n_large:,}:")
        for name, a, b in (("prepare", ps, pl), ("batches", bs, bl)):
            print(f"  {name:8s} {a['rss_mib']:5.0f} | {a['work_mib']:5.0f}  vs 10x  {b['rss_mib']:5.0f} | "
                  f"{b['work_mib']:5.0f}:  {b['rss_mib'] / a['rss_mib']:.2f}x | {b['work_mib'] / a['work_mib']:.2f}x"
                  + ("  (target <= 1.25)" if name == "prepare" else ""))
        leg = _run_child("legacy", str(small), str(tmp / "tok.json"))
        print(f"  legacy in-memory pack of the small corpus: {leg['rss_mib']:.0f} | {leg['work_mib']:.0f} MiB: "
              f"{(leg['work_mib'] - b0) * 2**20 / leg['tokens']:.0f} bytes/token above the import-only peak; "
              f"prepare: {(ps['work_mib'] - b0) * 2**20 / n_small:.0f}, "
              f"10x: {(pl['work_mib'] - b0) * 2**20 / n_large:.0f}")

        # -- disk bytes per token at the paper's concept count --------------------------------------
        rng = np.random.default_rng(0)
        words = [w for t in texts[:2000] for w in t.split()]
        n_conc = 33_732
        cards = [{"label": f"c{i}", "description": "", "words": []} for i in range(n_conc)]
        (tmp / "cards.json").write_text(json.dumps(cards))
        with open(tmp / "dense.jsonl", "w") as f:
            for d in range(400):
                chunks = [{"text": " ".join(rng.choice(words, 110)),
                           "concepts": [f"c{i}" for i in rng.choice(n_conc, 10, replace=False)]} for _ in range(5)]
                f.write(json.dumps({"chunks": chunks}) + "\n")
        out = prepare(tmp / "dense.jsonl", tmp / "dense", tokenizer=tmp / "tok.json", concepts=tmp / "cards.json",
                      val_fraction=0.05)
        meta = json.loads((out / "meta.json").read_text())
        tr = meta["splits"]["train"]
        size = sum((out / f"train.{f}").stat().st_size
                   for f in ("tokens.bin", "chunk_end.npy", "label_offsets.npy", "label_ids.npy"))
        print(f"disk: {n_conc:,} concepts, {tr['labels'] / tr['chunks']:.0f} labels per "
              f"{tr['tokens'] / tr['chunks']:.0f}-token chunk: {size / tr['tokens']:.2f} bytes/token "
              f"(target <= 8; dense bool labels would be "
              f"{n_conc / (tr['tokens'] / tr['chunks']):.0f})")


if __name__ == "__main__":
    main()
