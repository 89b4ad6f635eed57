"""Stage 3: the nnPU risk and its gradient, the PU thresholds, and one task per file
through interpscale.executors giving the same labels as the inline loop."""

from __future__ import annotations

import json

import numpy as np

from interpscale.concepts.annotate import logistic_loss, nnpu_step, pu_thresholds


def test_nnpu_risk_matches_its_definition_and_gradient():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(40, 3))
    y = (rng.random((40, 3)) < 0.3).astype(float)
    prior = np.array([0.3, 0.2, 0.5])
    risk, grad = nnpu_step(z, y, prior)
    # Kiryo et al. (2017): pi E_P[l(z,+1)] + max(0, E_U[l(z,-1)] - pi E_P[l(z,-1)]), summed over concepts
    want = 0.0
    for k in range(3):
        p = y[:, k] > 0
        neg = logistic_loss(-z[:, k]).mean() - prior[k] * logistic_loss(-z[p, k]).mean()
        want += prior[k] * logistic_loss(z[p, k]).mean() + max(0.0, neg)
    assert np.isclose(risk, want)
    eps = 1e-6
    for i, k in [(0, 0), (5, 1), (17, 2), (33, 0)]:
        dz = np.zeros_like(z)
        dz[i, k] = eps
        num = (nnpu_step(z + dz, y, prior)[0] - nnpu_step(z - dz, y, prior)[0]) / (2 * eps)
        assert np.isclose(grad[i, k], num, rtol=1e-4, atol=1e-8)


def test_the_negative_part_is_clipped_at_zero():
    # positives scored high, the rest low: E_U[l(z,-1)] - pi E_P[l(z,-1)] < 0 (the unbiased PU risk
    # would go negative there and reward overfitting); nnPU keeps only the positive part
    z = np.array([[8.0], [8.0], [-3.0], [-3.0]])
    y = np.array([[1.0], [1.0], [0.0], [0.0]])
    risk, grad = nnpu_step(z, y, np.array([0.9]))
    assert np.isclose(risk, 0.9 * logistic_loss(np.array([8.0])).mean())
    assert grad[2, 0] == 0 and grad[3, 0] == 0  # unlabeled rows are not pushed further down


def test_pu_thresholds_maximise_recall_squared_over_positive_rate():
    z = np.array([[3.0], [2.5], [2.0], [0.1], [0.0], [-1.0], [-2.0], [-3.0]])
    y = np.array([[1], [1], [1], [0], [0], [0], [0], [0]], dtype=float)
    th = pu_thresholds(z, y, min_pos=2)
    assert th[0] == 2.0  # recall 1 at the smallest rate
    assert pu_thresholds(z, y, min_pos=5)[0] == 0.0  # too few held-out positives: score 0 (p = 1/2)


def test_one_task_per_file_through_the_launcher_matches_inline(built, tmp_path):
    import shutil

    from interpscale.concepts import annotate_corpus

    out, _ = built
    copy = tmp_path / "c"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("labelled", "validation"))
    lines = (copy / "chunks/00000.jsonl").read_text().splitlines(keepends=True)  # split into two files
    (copy / "chunks/00000.jsonl").write_text("".join(lines[:100]))
    (copy / "chunks/00001.jsonl").write_text("".join(lines[100:]))
    man = json.loads((copy / "chunks/manifest.json").read_text())
    man["files"] = [dict(man["files"][0], output="00000.jsonl"), dict(man["files"][0], output="00001.jsonl")]
    (copy / "chunks/manifest.json").write_text(json.dumps(man))
    res = annotate_corpus(copy, executor="local", max_parallel=2)
    assert [r["file"] for r in res] == ["00000.jsonl", "00001.jsonl"] and res[0]["docs"] == 100
    got = "".join((copy / "labelled" / f).read_text() for f in ("00000.jsonl", "00001.jsonl"))
    assert got == (out / "labelled/00000.jsonl").read_text()


def test_a_rerun_skips_files_this_annotator_already_labelled(built, tmp_path):
    import shutil

    from interpscale.concepts import annotate_corpus, train_annotator
    from interpscale.concepts.annotate import AnnotatorOptions

    out, _ = built
    copy = tmp_path / "c"
    shutil.copytree(out, copy)
    labelled = copy / "labelled/00000.jsonl"
    first = annotate_corpus(copy)
    stamp = labelled.stat().st_mtime_ns
    assert annotate_corpus(copy) == first and labelled.stat().st_mtime_ns == stamp  # skipped: nothing rewritten
    train_annotator(copy, AnnotatorOptions(max_concepts=1))  # a new annotator: the file is labelled again
    again = annotate_corpus(copy)
    assert labelled.stat().st_mtime_ns != stamp and again[0]["labels"] == again[0]["chunks"]
