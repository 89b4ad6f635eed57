"""A concept sweep trains on the annotated corpus: `concepts build` → `data prepare
--concepts` → a few tiny ar+concept runs (issue 28)."""

from __future__ import annotations

import json

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_ar_concept_sweep_on_the_annotated_corpus(built, tmp_path):
    from interpscale.data.prepare import prepare
    from interpscale.models import flops_per_token, params_nonembedding
    from interpscale.orchestration import RunSpec, Sweep

    out, _ = built
    n_concepts = len(json.loads((out / "concepts.json").read_text()))
    data = prepare(sorted((out / "labelled").glob("*.jsonl")), tmp_path / "prepared",
                   concepts=out / "concepts.json", vocab_size=128, val_fraction=0.1)
    seq, bt = 32, 4 * 32
    over = {"vocab_size": 128, "n_concepts": n_concepts}
    runs = []
    for steps in (8, 12):
        m = flops_per_token("ar+concept", "nano", seq, **over)
        runs.append(RunSpec(family="ar+concept", size="nano", slice_flops=m * steps * bt, flops=m * steps * bt,
                            params=params_nonembedding("ar+concept", "nano", **over), tokens=steps * bt,
                            seq_len=seq, batch_tokens=bt, flops_per_token=m, vocab_size=128, lr=3e-3,
                            log_every=4, eval_batches=2, data={"kind": "prepared", "path": str(data)},
                            model_overrides={"n_concepts": n_concepts}))
    sw = Sweep(runs, tmp_path / "sweep", executor="debug")
    sw.launch()
    table = sw.collect()
    assert set(table["family"]) == {"ar+concept"} and len(table["run_id"].unique()) == 2
    assert table["loss"].notna().all() and (table["loss"] > 0).all()
    assert table["concept_loss"].notna().any()  # the concept head was supervised by the annotated labels
