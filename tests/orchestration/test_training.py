"""Training loop: recipe, checkpoints, bit-exact resume after SIGKILL, evaluation, bad input."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from interpscale.models import load_checkpoint
from interpscale.models.checkpoint import list_checkpoints, weights_file
from interpscale.orchestration import Trainer, evaluate_run, read_results, train_run
from interpscale.orchestration.checkpointer import completed_states
from interpscale.orchestration.rundir import read_status
from interpscale.orchestration.trainer import param_groups



def _final(run_dir: Path) -> dict[str, torch.Tensor]:
    ck = [p for p in list_checkpoints(run_dir / "checkpoints") if p.name.startswith("anneal")][-1]
    return load_checkpoint(ck)[0].state_dict()


def test_run_writes_layout_and_anneals_each_reservoir_checkpoint(tmp_path, make_spec):
    spec = make_spec("cdlm+concept", steps=25, reservoir=1)
    d = tmp_path / "runs" / spec.run_id
    status = train_run(spec, d, progress=False)
    assert status["state"] == "done"
    for name in ("spec.json", "tokenizer.json", "concepts.json", "status.json", "metrics.jsonl"):
        assert (d / name).exists(), name
    names = [p.name for p in list_checkpoints(d / "checkpoints")]
    # stable 0..20, main anneal 20->25; reservoir at 10 annealed independently 10->13 (App. I)
    assert names == ["anneal0000010_step0000013", "anneal0000020_step0000025",
                     "stable_step0000010", "stable_step0000020"]
    _, extra = load_checkpoint(d / "checkpoints" / "anneal0000020_step0000025")
    assert extra["annealed"] is True and extra["step"] == 25 and extra["tokens"] == 25 * spec.batch_tokens
    lines = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    anneal = [r for r in lines if r["segment"] == "anneal@20"]
    assert anneal and anneal[-1]["lr"] < spec.lr / 4  # linear decay towards zero
    assert {"lm", "concept"} <= set(lines[0])  # loss parts logged
    assert json.loads((d / "concepts.json").read_text())[0]["label"] == "astronomy"
    # running again is a no-op
    before = weights_file(d / "checkpoints" / "stable_step0000020").stat().st_mtime_ns
    assert train_run(spec, d, progress=False)["state"] == "done"
    assert weights_file(d / "checkpoints" / "stable_step0000020").stat().st_mtime_ns == before


def test_weight_decay_excludes_embeddings_and_norms():
    from interpscale.models import build_model

    m = build_model("ar", "nano", vocab_size=64)
    decay, no_decay = param_groups(m, 0.1)
    emb = {id(mod.weight) for mod in m.modules() if isinstance(mod, torch.nn.Embedding)}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert emb and not emb & {id(p) for p in decay["params"]}
    assert all(p.ndim >= 2 for p in decay["params"])
    names = {id(p): n for n, p in m.named_parameters()}
    assert not any("norm" in names[id(p)] for p in decay["params"])


def test_interrupted_run_resumes_bit_exactly(tmp_path, make_spec):
    spec = make_spec("cdlm", steps=30)
    ref = tmp_path / "ref"
    train_run(spec, ref, data_root=tmp_path / "_data", progress=False)
    cut = tmp_path / "cut"
    Trainer(spec, cut, data_root=tmp_path / "_data", progress=False).run(stop_at_step=13)
    assert read_status(cut)["state"] == "running"
    train_run(spec, cut, data_root=tmp_path / "_data", progress=False)
    assert read_status(cut)["resumed_at"] == [13]
    a, b = _final(ref), _final(cut)
    assert all(torch.equal(a[k], b[k]) for k in a)


_CHILD = """
import sys, torch
torch.set_num_threads(1)
from interpscale.orchestration import RunSpec, Trainer
spec = RunSpec.load(sys.argv[1])
Trainer(spec, sys.argv[2], data_root=sys.argv[3], progress=False, save_every_steps=3).run()
"""


def test_sigkill_mid_training_then_relaunch_gives_identical_params(tmp_path, make_spec):
    spec = make_spec("ar+concept", steps=400)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.to_json())
    data = tmp_path / "_data"
    ref = tmp_path / "ref"
    train_run(spec, ref, data_root=data, progress=False)
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(spec_file), str(killed), str(data)])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        st = killed / "status.json"
        if completed_states(killed / "state") and st.exists() and "segments_done" not in json.loads(
                st.read_text()):
            lines = (killed / "metrics.jsonl").read_text().splitlines() if (killed / "metrics.jsonl").exists() else []
            if len(lines) >= 4:  # >= 20 steps in, well before the end of the stable phase
                break
        time.sleep(0.05)
    assert proc.poll() is None, "child finished before it could be killed; make the run longer"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert read_status(killed)["state"] == "running"
    train_run(spec, killed, data_root=data, progress=False)
    status = read_status(killed)
    assert status["state"] == "done" and status["resumed_at"][0] > 0
    a, b = _final(ref), _final(killed)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_evaluate_run_rows_and_resume(tmp_path, make_spec):
    spec = make_spec("ar+concept", steps=15)
    d = tmp_path / spec.run_id
    train_run(spec, d, progress=False)
    df = evaluate_run(d)
    assert len(df) == 2 and set(df.annealed) == {True, False}
    row = df[df.annealed].iloc[0]
    assert row.estimator == "ar_ce" and row.family == "ar+concept" and row.step == 15
    assert row.tokens == 15 * spec.batch_tokens and row.flops == pytest.approx(spec.flops)
    assert 0 < row.loss < 10 and row.loss_se >= 0
    assert {"concept_loss", "concept_independence", "concept_contribution"} <= set(df.columns)
    assert df.concept_loss.notna().all()
    assert (d / "results.csv").exists()
    mtime = (d / "results.parquet").stat().st_mtime_ns
    assert len(evaluate_run(d)) == 2 and (d / "results.parquet").stat().st_mtime_ns == mtime  # nothing redone
    # a corrupt checkpoint: clear error naming the file, evaluated rows kept
    (d / "checkpoints" / "stable_step0000099.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="stable_step0000099.pt is corrupt"):
        evaluate_run(d)
    assert len(read_results(d / "results.parquet")) == 2


def test_diffusion_evaluates_with_elbo(tmp_path, make_spec):
    spec = make_spec("cdlm", steps=10)
    d = tmp_path / spec.run_id
    train_run(spec, d, progress=False)
    df = evaluate_run(d)
    assert set(df.estimator) == {"mdlm_elbo"} and df.loss.notna().all()


def test_bad_input_errors(tmp_path, make_spec):
    spec = make_spec("ar", steps=10)
    # corrupt resume state: clear error, the file is left for inspection
    d = tmp_path / "run"
    Trainer(spec, d, progress=False).run(stop_at_step=4)
    state, _ = completed_states(d / "state")[-1]  # the resume state (a DCP directory): its shards corrupted
    shards = [p for p in state.rglob("*") if p.is_file() and p.suffix == ".distcp"]
    assert shards, sorted(state.rglob("*"))
    for p in shards:
        p.write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match=f"cannot resume from .*{state.name}"):
        train_run(spec, d, progress=False)
    assert all(p.read_bytes() == b"\x00garbage" for p in shards)
    assert (d / "spec.json").exists() and not (d / "checkpoints").exists()  # stopped before any checkpoint
    # an unwritable output directory (a path under a regular file)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PermissionError, match="not writable"):
        train_run(spec, blocker / "run", progress=False)
    # a directory holding another run
    with pytest.raises(ValueError, match="already holds a different run"):
        train_run(make_spec("ar", steps=12), d, progress=False)
    # a micro-batch that does not divide this rank's rows (4 rows x 32 tokens)
    with pytest.raises(ValueError, match="micro_batch_tokens=96 must be a multiple of seq_len=32 and divide"):
        Trainer(spec, d, progress=False, micro_batch_tokens=96)
    with pytest.raises(ValueError, match="unknown parallelism 'tp'"):
        Trainer(spec, d, progress=False, parallel="tp")
    # model/data disagreement
    with pytest.raises(ValueError, match="n_concepts"):
        train_run(make_spec("ar", steps=10, model_overrides={"n_concepts": 9}), tmp_path / "r2", progress=False)


def test_a_run_is_never_trained_by_two_processes_at_once(tmp_path, make_spec):
    import fcntl

    spec = make_spec("ar", steps=6)
    d = tmp_path / "run"
    d.mkdir()
    with open(d / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(RuntimeError, match="being trained by another process"):
            train_run(spec, d, progress=False)
    assert train_run(spec, d, progress=False)["state"] == "done"


def test_gradient_accumulation_matches_the_whole_batch_and_logs_throughput(tmp_path, make_spec):
    """4 micro-batches of one row reproduce the 4-row step; metrics.jsonl carries wall time,
    tokens/s and memory (no MFU on CPU); TensorBoard event files hold the same scalars."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    spec = make_spec("ar", steps=10)
    whole, micro = tmp_path / "whole", tmp_path / "micro"
    train_run(spec, whole, data_root=tmp_path / "_data", progress=False)
    train_run(spec, micro, data_root=tmp_path / "_data", progress=False, micro_batch_tokens=spec.seq_len)
    a, b = _final(whole), _final(micro)
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    assert 0 < diff < 1e-5  # same update up to float summation order (not bit-identical: 4 backward passes)
    assert read_status(micro)["micro_batches"] == 4 and read_status(whole)["micro_batches"] == 1
    recs = [json.loads(x) for x in (micro / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if r["segment"] == "stable"] == [5, 8]
    for r in recs:
        assert r["tokens_per_s"] > 0 and r["wall_s"] > 0 and 0 <= r["data_wait_frac"] <= 1
        assert r["peak_rss_gib"] > 0.05 and "mfu" not in r
        assert r["tokens"] == r["step"] * spec.batch_tokens
    whole_recs = [json.loads(x) for x in (whole / "metrics.jsonl").read_text().splitlines()]
    assert abs(recs[0]["loss"] - whole_recs[0]["loss"]) < 1e-5  # window-mean loss, same either way
    (event_dir,) = {p.parent for p in (micro / "tb").rglob("events.out.tfevents.*")}
    ea = EventAccumulator(str(event_dir))
    ea.Reload()
    assert {"stable/loss", "stable/tokens_per_s", "anneal@8/lr"} <= set(ea.Tags()["scalars"])
    assert [e.step for e in ea.Scalars("stable/loss")] == [5, 8]
    assert ea.Scalars("stable/loss")[0].value == pytest.approx(recs[0]["loss"], rel=1e-6)


def test_mfu_uses_the_gpu_table():
    from interpscale.orchestration.runtime import gpu_peak_flops
    from interpscale.orchestration.observe import StepMeter

    assert gpu_peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu_peak_flops("NVIDIA H100 PCIe") == 756e12
    assert gpu_peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert gpu_peak_flops("NVIDIA L40S") == 362e12 and gpu_peak_flops("NVIDIA L4") == 121e12
    assert gpu_peak_flops("Tesla K80") is None
    m = StepMeter(torch.device("cpu"), tokens_per_step=1000, flops_per_token=6e9, world=8)
    m.peak = 989e12  # as on an 8 x H100 job
    m.add({"loss": torch.tensor(2.0)})
    m.add({"loss": torch.tensor(4.0)})
    m.t0 -= 1.0  # two steps over ~1 s
    rec = m.record()
    assert rec["loss"] == 3.0
    # MFU = M x tokens/s / (peak x GPUs) (Eq. 23 FLOPs achieved over the table peak)
    assert rec["mfu"] == pytest.approx(6e9 * rec["tokens_per_s"] / (989e12 * 8))
    assert 1500 < rec["tokens_per_s"] <= 2000


def test_micro_batches_split_rows_and_trim_chunk_labels():
    from interpscale.models.types import Batch
    from interpscale.orchestration.parallel import split, step_seed

    ids = torch.tensor([[0, 0, 1, 1], [0, -1, -1, -1], [0, 1, 2, 2], [-1, -1, -1, -1]])
    labels = torch.arange(4 * 3 * 2, dtype=torch.float32).view(4, 3, 2)
    b = Batch(torch.arange(16).view(4, 4), ids, labels, torch.ones(4, 4, dtype=torch.bool))
    first, second = split(b, 2)  # strided: micro-batch i = rows i::2, what rank i of 2 would hold
    assert torch.equal(first.tokens, b.tokens[0::2]) and torch.equal(second.valid, b.valid[1::2])
    assert first.chunk_labels.shape == (2, 3, 2) and torch.equal(first.chunk_labels, labels[0::2, :3])
    assert second.chunk_labels.shape == (2, 1, 2) and torch.equal(second.chunk_labels, labels[1::2, :1])
    with pytest.raises(ValueError, match="4 rows do not split into 3"):
        split(b, 3)
    assert step_seed(0, 5, 0, 0) == step_seed(0, 5, 0, 0)
    assert len({step_seed(0, 5, r, m) for r in range(2) for m in range(2)} | {step_seed(0, 6, 0, 0)}) == 5


def test_resume_with_micro_batches_is_bit_exact(tmp_path, make_spec):
    spec = make_spec("cdlm+concept", steps=12)
    kw = dict(data_root=tmp_path / "_data", progress=False, micro_batch_tokens=2 * spec.seq_len)
    train_run(spec, tmp_path / "ref", **kw)
    Trainer(spec, tmp_path / "cut", **kw).run(stop_at_step=5)
    train_run(spec, tmp_path / "cut", **kw)
    assert read_status(tmp_path / "cut")["resumed_at"] == [5]
    a, b = _final(tmp_path / "ref"), _final(tmp_path / "cut")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_compiled_trainer_matches_eager_and_stays_compiled_across_runs(tmp_path, make_spec):
    """The GPU default (``torch.compile`` of the loss) on CPU: a compiled run ends where the eager
    run ends, and a job that trains several sizes in one process compiles each run instead of
    silently falling back to eager at Dynamo's per-function recompile limit."""
    import logging

    import torch._dynamo

    spec = make_spec("ar", steps=8)  # no random draws: Inductor's RNG stream differs from eager's
    eager, compiled = tmp_path / "eager", tmp_path / "compiled"
    train_run(spec, eager, data_root=tmp_path / "_data", progress=False, tensorboard=False)
    train_run(spec, compiled, data_root=tmp_path / "_data", progress=False, tensorboard=False, compile=True)
    a, b = _final(eager), _final(compiled)
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-4

    hits = []

    class Hits(logging.Handler):
        def emit(self, record):
            if "recompile_limit" in record.getMessage():
                hits.append(record)

    handler = Hits()
    logging.getLogger("torch._dynamo").addHandler(handler)
    try:
        with torch._dynamo.config.patch(recompile_limit=2):  # 8 by default; 2 makes 3 sizes enough
            for d in (16, 24, 32):
                s = make_spec("ar", steps=3, model_overrides={"n_concepts": 6, "d_model": d})
                train_run(s, tmp_path / f"d{d}", data_root=tmp_path / "_data", progress=False, tensorboard=False,
                          compile=True)
    finally:
        logging.getLogger("torch._dynamo").removeHandler(handler)
    assert not hits, hits[0].getMessage()
