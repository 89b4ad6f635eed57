"""The real lm-evaluation-harness on our registered models and the bundled offline tasks."""

from __future__ import annotations

import json
import os

import pytest

lm_eval = pytest.importorskip("lm_eval")

from interpscale.metrics import mmlu_soft_score, run_lm_eval  # noqa: E402
from interpscale.metrics.lm_eval_adapter import TASKS_DIR, find_tokenizer, task_manager  # noqa: E402
from interpscale.models import save_checkpoint  # noqa: E402

ALL = ["interpscale_sounds", "interpscale_sounds_gen", "interpscale_mmlu_mini", "interpscale_text_ppl"]


def _run_dir(tmp_path, model, tok, name):
    run = tmp_path / name
    ck = save_checkpoint(model, run / "checkpoints" / "step_000300.pt", extra={"step": 300})
    tok.save(str(run / "tokenizer.json"))
    return run, ck


def test_simple_evaluate_with_registered_ar_model_beats_chance(tmp_path, trained_ar, sounds_tok):
    _, ck = _run_dir(tmp_path, trained_ar, sounds_tok, "ar_run")
    assert os.environ.get("HF_DATASETS_OFFLINE") == "1"
    res = lm_eval.simple_evaluate(
        model="interpscale-ar", model_args=f"pretrained={ck},batch_size=8",
        tasks=["interpscale_sounds"], task_manager=task_manager(),
        bootstrap_iters=0, log_samples=False,
    )
    acc = res["results"]["interpscale_sounds"]["acc,none"]
    assert acc >= 0.75  # chance is 0.25 (four choices)


def test_run_lm_eval_writes_results_for_every_output_type(tmp_path, trained_ar, sounds_tok):
    run, ck = _run_dir(tmp_path, trained_ar, sounds_tok, "ar_run")
    out = tmp_path / "eval"
    res = run_lm_eval(ck, ",".join(ALL), out_dir=out)
    assert set(res) == set(ALL)
    assert res["interpscale_sounds_gen"]["exact_match,first_word"] >= 0.75  # greedy "meow" etc.
    # the harness's App. J soft score equals our own soft-MMLU scorer (same prompt, exact AR)
    ours = mmlu_soft_score(trained_ar, sounds_tok, TASKS_DIR / "data" / "mmlu_mini.jsonl")
    assert res["interpscale_mmlu_mini"]["soft_score,none"] == pytest.approx(ours.soft_score, rel=1e-5)
    assert res["interpscale_mmlu_mini"]["acc,none"] == pytest.approx(ours.accuracy)
    assert res["interpscale_text_ppl"]["bits_per_byte,none"] > 0
    saved = json.loads((out / "lm_eval_results.json").read_text())
    assert saved["results"] == res and saved["model"] == "interpscale-ar"


def test_diffusion_model_through_the_harness(tmp_path, trained_cdlm, sounds_tok):
    _, ck = _run_dir(tmp_path, trained_cdlm, sounds_tok, "cdlm_run")
    res = lm_eval.simple_evaluate(
        model="interpscale-diffusion", model_args=f"pretrained={ck},n_samples=4,seed=1",
        tasks=ALL, task_manager=task_manager(),
        limit=6, bootstrap_iters=0, log_samples=False,
    )["results"]
    assert 0 <= res["interpscale_sounds"]["acc,none"] <= 1
    assert 0 <= res["interpscale_sounds_gen"]["exact_match,first_word"] <= 1
    assert res["interpscale_text_ppl"]["word_perplexity,none"] > 1


def test_adapter_errors(tmp_path, trained_cdlm, sounds_tok):
    from interpscale.metrics.lm_eval_adapter import InterpscaleAR

    _, ck = _run_dir(tmp_path, trained_cdlm, sounds_tok, "cdlm_run")
    with pytest.raises(ValueError, match="interpscale-diffusion"):
        InterpscaleAR(pretrained=str(ck))
    with pytest.raises(ValueError, match="n_sample"):
        lm_eval.api.registry.get_model("interpscale-diffusion").create_from_arg_string(f"pretrained={ck},n_sample=4")
    with pytest.raises(ValueError, match="bundled offline tasks"):
        run_lm_eval(ck, "no_such_task", out_dir=None, allow_builtin=False)
    bare = tmp_path / "bare" / "model.pt"
    save_checkpoint(trained_cdlm, bare)
    with pytest.raises(ValueError, match="tokenizer"):
        find_tokenizer(bare)
