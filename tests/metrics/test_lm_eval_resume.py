"""Resumable lm-eval (issue 35): a run killed mid-task restarts from the harness request cache in
its output directory without recomputing the requests it had answered; a changed checkpoint
starts afresh."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("lm_eval")

from interpscale.metrics.lm_eval_adapter import _InterpscaleLM, run_lm_eval  # noqa: E402
from interpscale.models import save_checkpoint  # noqa: E402

TASK = "interpscale_sounds"  # 24 questions x 4 choices = 96 log-likelihood requests, 2 chunks at batch 1
CHILD = """
import os, signal, sys, time
import torch
torch.set_num_threads(1)
from interpscale.metrics.lm_eval_adapter import _InterpscaleLM, run_lm_eval
ll, calls = _InterpscaleLM._ll, []
def ll_then_die(self, reqs):  # SIGKILL while the second chunk is being scored
    calls.append(len(reqs))
    if len(calls) == 2:
        time.sleep(1.0)  # the cache's commit thread has written the first chunk
        os.kill(os.getpid(), signal.SIGKILL)
    return ll(self, reqs)
_InterpscaleLM._ll = ll_then_die
run_lm_eval(sys.argv[1], "interpscale_sounds", out_dir=sys.argv[2], batch_size=1, bootstrap_iters=0)
"""


def _counting(monkeypatch) -> list[int]:
    seen: list[int] = []
    ll = _InterpscaleLM._ll

    def counted(self, reqs):
        seen.append(len(reqs))
        return ll(self, reqs)

    monkeypatch.setattr(_InterpscaleLM, "_ll", counted)
    return seen


@pytest.mark.slow  # a child process killed mid-task plus three harness runs: ~60 s of CPU
def test_killed_lm_eval_resumes_without_recomputing_answered_requests(tmp_path, trained_ar, sounds_tok, monkeypatch):
    run = tmp_path / "run"
    ck = save_checkpoint(trained_ar, run / "checkpoints" / "step_000300.pt")
    sounds_tok.save(str(run / "tokenizer.json"))
    out = tmp_path / "eval"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ck), str(out)], capture_output=True, text=True,
                          timeout=600, env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert not (out / "lm_eval_results.json").exists()
    seen = _counting(monkeypatch)
    resumed = run_lm_eval(ck, TASK, out_dir=out, batch_size=1, bootstrap_iters=0)
    assert sum(seen) == 96 - 64  # only the chunk the kill cut short
    seen.clear()
    fresh = run_lm_eval(ck, TASK, out_dir=tmp_path / "fresh", batch_size=1, bootstrap_iters=0, resume=False)
    assert sum(seen) == 96 and fresh == resumed
    # a rewritten checkpoint (another signature) never reads the old answers
    save_checkpoint(trained_ar, ck)
    seen.clear()
    run_lm_eval(ck, TASK, out_dir=out, batch_size=1, bootstrap_iters=0)
    assert sum(seen) == 96
    assert len(list((out / "lm_eval_cache").glob("requests-*"))) == 1
