"""Plan-time data checks, the default vocabulary and the runtime estimate (issue 29.1, 29.2, 29.4)."""

import logging
import math
from pathlib import Path

import pytest

from interpscale.orchestration import PlanOptions, plan

REALTEXT = Path(__file__).resolve().parents[1] / "data" / "realtext"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The real-text fixture prepared once: a 300-token BPE, its 8 concept cards."""
    from interpscale.data.prepare import prepare

    out = tmp_path_factory.mktemp("realtext") / "data"
    return prepare([str(REALTEXT / "python-docs.jsonl")], out, fmt="jsonl", concepts=REALTEXT / "concepts.json",
                   vocab_size=300, val_fraction=0.1)


def _preset(tmp_path: Path, data: str, model: str = "", train: str = "") -> str:
    p = tmp_path / "p.toml"
    p.write_text('[plan]\nfamilies = ["ar", "ar+concept"]\nsizes = ["nano"]\nseq_len = 32\nbatch_tokens = 256\n'
                 f'slices = [2e9]\n[model]\n{model}\n[train]\n{train}\n[data]\n{data}\n')
    return str(p)


def test_plan_reads_and_checks_prepared_data(tmp_path, prepared, caplog):
    from interpscale.data.loaders import describe
    from interpscale.models.config import make_config

    info = describe(prepared)
    assert info.n_concepts == 8
    data = f'kind = "prepared"\npath = "{prepared}"'
    with caplog.at_level(logging.WARNING):
        p = plan(_preset(tmp_path, data), PlanOptions(flops_per_s=1e10))
    assert "does not state its concept count" not in caplog.text
    concept = p.table[p.table.family == "ar+concept"].iloc[0]
    assert concept.n_concepts == 8  # priced at the data's count, read from meta.json
    assert {r.vocab_size for r in p.runs} == {info.vocab_size}  # no vocabulary given: the data's
    assert concept.M_head == 6 * make_config("ar+concept", "nano").d_model * info.vocab_size
    with pytest.raises(ValueError, match=r"\[model\] n_concepts = 5 but the prepared data \(meta.json\) has 8"):
        plan(_preset(tmp_path, data, model="n_concepts = 5"), PlanOptions(flops_per_s=1e10))
    with pytest.raises(ValueError, match=rf"vocab_size = 100 but the tokenizer .* has {info.vocab_size} tokens"):
        plan(_preset(tmp_path, data, model="vocab_size = 100", train="vocab_size = 100"),
             PlanOptions(flops_per_s=1e10))


def test_default_vocabulary_follows_the_largest_planned_model(tmp_path):
    from interpscale.models import params_nonembedding
    from interpscale.models.config import make_config
    from interpscale.orchestration.planner import VOCAB_RANGE

    p = plan(_preset(tmp_path, 'kind = "synthetic"\nn_concepts = 4'), PlanOptions(flops_per_s=1e10))
    (v,) = {r.vocab_size for r in p.runs}
    ratio = max(params_nonembedding(f, "nano") / make_config(f, "nano").d_model for f in ("ar", "ar+concept"))
    # the largest power of two whose embedding (V·d) is no bigger than the non-embedding part
    assert v == max(VOCAB_RANGE[0], min(VOCAB_RANGE[1], 2 ** int(math.log2(ratio))))
    assert v <= ratio < 2 * v or v in VOCAB_RANGE
    assert all(p.table.M_head == 6 * make_config("ar", "nano").d_model * v)  # priced as trained


def test_cpu_calibration_is_a_cached_median_with_its_spread():
    from interpscale.orchestration.runtime import CALIBRATION_BURSTS, cpu_calibration

    a = cpu_calibration(1)
    assert a.flops > 0 and a.spread >= 0 and a.repeats == CALIBRATION_BURSTS and a.threads == 1
    assert cpu_calibration(1) is a  # one measurement per process and thread count


def test_runtime_estimate_prices_the_whole_run_and_the_sweep(tmp_path):
    from interpscale.orchestration import runtime
    from interpscale.orchestration.spec import segments

    p = plan(_preset(tmp_path, 'kind = "synthetic"\nn_concepts = 4\nn_docs = 200', train="reservoir = 1"),
             PlanOptions(flops_per_s=1e10))
    ok = p.table[p.table.status == "ok"]
    assert (ok.est_runtime_s == (ok.M + ok.M_head) * ok.D / 1e10).all()  # the main run's steps, by FLOPs
    for r in p.runs:
        row = ok[(ok.family == r.family)].iloc[0]
        step = (row.M + row.M_head) * r.batch_tokens / 1e10
        n_train = sum(s.length for s in segments(r))  # + the reservoir's anneal branch (App. I)
        n_eval = 4  # stable and annealed checkpoints at the reservoir step and at the end
        assert n_train > r.steps
        assert p.estimate["runs"][r.run_id] == pytest.approx(
            step * (n_train + n_eval * r.eval_batches * runtime.EVAL_STEP_FRACTION) + runtime.RUN_FIXED_S)
    # two runs, one job each, two at a time ([launch] max_parallel's default, as the sweep runs them):
    # prepare + the longer of the two jobs (its run and its start-up)
    loads = [s + runtime.JOB_START_S for s in p.estimate["runs"].values()]
    assert p.estimate["max_parallel"] == 2
    assert p.estimate["wall_s"] == pytest.approx(200 * runtime.PREPARE_S_PER_DOC + max(sum(loads) / 2, max(loads)))
    assert "estimated sweep wall time" in p.summary()
    line = runtime.estimate_report(p.estimate, 2 * p.estimate["wall_s"])
    assert "measured/estimated 2.00" in line


def test_cpu_plan_times_the_planned_steps(tmp_path):
    p = plan(_preset(tmp_path, 'kind = "synthetic"\nn_concepts = 4'), PlanOptions(device="cpu"))
    assert p.device["how"].startswith("cpu, training steps timed on 1 thread")
    ok = p.table[p.table.status == "ok"]
    assert (ok.est_runtime_s > 0).all() and (ok.est_run_s > ok.est_runtime_s).all()
    assert p.estimate["max_spread"] >= 0 and "spread up to" in p.summary()
