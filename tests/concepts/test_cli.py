"""`interpscale concepts build | check | <stage>` as a user runs them."""

from __future__ import annotations

import json

from interpscale.cli import main


def test_build_then_check_prints_json_last(synthetic, tmp_path, capsys):
    out = tmp_path / "c"
    assert main(["concepts", "build", *map(str, synthetic[0]), "--out", str(out), "--sample", "600",
                 "--n-validate", "50"]) == 0
    assert "concepts" in capsys.readouterr().out
    assert main(["concepts", "check", str(out), "--truth", *map(str, synthetic[1])]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"mean_best_f1", "ami"} <= set(last) and last["mean_best_f1"] >= 0.8


def test_stages_one_by_one(synthetic, tmp_path, capsys):
    out = str(tmp_path / "c")
    assert main(["concepts", "chunk", str(synthetic[0][0]), "--out", out]) == 0
    assert main(["concepts", "tag", out, "--sample", "500", "--seed", "1"]) == 0
    assert main(["concepts", "library", out, "--n-concepts", "16"]) == 0
    assert main(["concepts", "annotate", out]) == 0
    assert main(["concepts", "validate", out, "--n-validate", "20"]) == 0
    stages = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(stages) == {"tags", "concepts", "annotator"}
    assert json.loads((tmp_path / "c/tags.summary.json").read_text())["n_sample"] == 500


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["concepts", "tag", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert "run `interpscale concepts chunk` first" in err and "Traceback" not in err
    assert main(["concepts", "build", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o"),
                 "--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert "both --base-url and --model" in capsys.readouterr().err
