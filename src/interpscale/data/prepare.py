"""Streaming data preparation, the driver of ``request`` -> ``parts`` (tokenizer, one task per
input file) -> ``finalize``, each step resumable and atomic (``docs/data.md``, "What `data
prepare` does"); tasks run in this process or as jobs of ``interpscale.executors``.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from interpscale.data.corpus import corpus_config, make_concepts, read_concepts, write_concepts
from interpscale.data.finalize import finalize
from interpscale.data.parts import build_tokenizer, part_done, tokenize_part
from interpscale.data.request import locked, make_request, read_request, start
from interpscale.errors import UserError
from interpscale.executors import EXECUTORS, JobsFailed, make_executor

MODES = ("inline", *EXECUTORS)  # where the tasks run: this process, or one of the launcher's executors

__all__ = ["MODES", "make_request", "prepare"]


def prepare(sources, out: str | os.PathLike, *, executor: str = "inline", slurm: dict | None = None,
            max_parallel: int = 2, workers: int = 1, progress: bool = False, **options: Any) -> Path:
    """Prepare ``sources`` into the data directory ``out`` and return it (``options``: see
    ``make_request``); a rerun after a crash or a kill resumes, keeping finished parts.
    ``inline`` works in this process (``workers`` processes, each with a single-threaded encoder);
    ``local`` / ``slurm`` run one submitit task per input file, at most ``max_parallel`` at once."""
    if executor not in MODES:
        raise UserError(f"unknown executor {executor!r}; expected one of {MODES}")
    out = Path(out)
    req = make_request(sources, **options)
    with locked(out):
        if start(out, req):
            return out
        req = read_request(out)
        if req["fixed_concepts"] and not (out / "concepts.json").exists():
            _write_fixed_concepts(out, req)
        n = len(req["inputs"])
        if executor == "inline":
            build_tokenizer(out)
            _inline_parts(out, n, workers, progress)
            finalize(out)
        else:
            _as_jobs(out, n, executor, slurm or {}, max_parallel)
    return out


def _write_fixed_concepts(out: Path, req: dict) -> None:
    if req["concepts"]:
        cards = read_concepts(req["concepts"])  # checked by make_request
    else:
        cfg = corpus_config(req["inputs"][0])
        cards = make_concepts(cfg.n_concepts, entities_per_concept=cfg.entities_per_concept, seed=cfg.seed)
    write_concepts(cards, out / "concepts.json")


def _single_threaded_encoder() -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the workers are the parallelism


def _inline_parts(out: Path, n: int, workers: int, progress: bool) -> None:
    from tqdm.auto import tqdm

    errors: dict[int, BaseException] = {}
    with tqdm(total=n, desc="prepare", disable=not progress or n < 2) as bar:
        if workers <= 1 or n < 2:
            for i in range(n):
                tokenize_part(out, i)
                bar.update(1)
            return
        ctx = multiprocessing.get_context("fork")  # workers start in milliseconds, nothing re-imported
        with ProcessPoolExecutor(min(workers, n), mp_context=ctx, initializer=_single_threaded_encoder) as pool:
            futures = {pool.submit(tokenize_part, str(out), i): i for i in range(n)}
            for f in as_completed(futures):
                if f.exception() is not None:  # the other files go on; their parts are kept
                    errors[futures[f]] = f.exception()
                bar.update(1)
    if errors:
        raise errors[min(errors)]


def _as_jobs(out: Path, n: int, executor: str, slurm: dict, max_parallel: int) -> None:
    """Step 3 as jobs, one task per input file.  On SLURM steps 2 and 4 (the tokenizer, the
    finalization) are jobs too, so nothing heavy runs on the login node; ``local`` and
    ``debug`` run them in this process."""
    launcher = make_executor(executor, out / ".submitit", name="data-prepare", slurm=slurm,
                             max_parallel=max_parallel)
    here = executor != "slurm"

    def wait(jobs, what: str) -> None:
        try:
            launcher.wait(jobs)
        except JobsFailed as exc:  # the finished parts are kept; every failure is reported
            raise UserError(f"{what} failed (finished parts are kept; rerun to resume):\n{exc}") from None

    with launcher:
        build_tokenizer(out) if here else wait([launcher.submit(build_tokenizer, str(out))], "tokenizer job")
        req = read_request(out)
        todo = [i for i in range(n) if not part_done(out, i, req)]
        if todo:
            wait(launcher.map(tokenize_part, [str(out)] * len(todo), todo), f"{len(todo)} tokenization task(s)")
        finalize(out) if here else wait([launcher.submit(finalize, str(out))], "finalization job")
    shutil.rmtree(out / ".submitit", ignore_errors=True)
