"""Issue 43 item 3: an export the ecosystem's own CLIs run. ``interpscale export`` of an ``hf:llama``
checkpoint holds a complete Hugging Face tokenizer (``AutoTokenizer`` knows its special tokens and
round-trips the corpus), the real ``lm_eval --model hf`` CLI runs on it offline with a bundled task
and gives our adapter's numbers, and the export's files and the bundled tasks are the ones
docs/models.md lists. Before: the export held no tokenizer, and ``lm_eval`` failed on
``No module named 'accelerate'``, then on ``decode(None)`` of the prefix token (no EOS/BOS)."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from interpscale import cli
from interpscale._jsonl import iter_jsonl
from interpscale.data.tokenizer import encode_texts, load_tokenizer, train_tokenizer
from interpscale.models import DataFields, build_model, save_checkpoint
from interpscale.models.checkpoint import save_pretrained_dir

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "models.md"
TASKS = ROOT / "src" / "interpscale" / "metrics" / "tasks"
CORPUS = [row["text"] for _, row in iter_jsonl(TASKS / "data" / "text_ppl.jsonl")] + [
    "Tabs\tand  double spaces, digits 0123 and punctuation (;:!?) survive.\nA second line.",
    "Unicode too: café, naïve, 10 °C, — and ✓.",
]


def _doc_rows(marker: str) -> list[list[str]]:
    """The table rows (cells, backticks dropped) between <!-- marker --> and <!-- /marker -->."""
    block = DOC.read_text().split(f"<!-- {marker} -->", 1)[1].split(f"<!-- /{marker} -->", 1)[0]
    rows = [[c.strip().replace("`", "") for c in line.strip().strip("|").split("|")]
            for line in block.splitlines() if line.startswith("|")]
    return rows[2:]  # header and rule


def _run(tmp: Path, family: str) -> Path:
    """RUN_DIR/checkpoints/final of a seeded nano ``family`` model + RUN_DIR/tokenizer.json (byte-level BPE)."""
    run = tmp / f"run-{family.replace(':', '_')}"
    tok = train_tokenizer(CORPUS * 4, vocab_size=320)
    run.mkdir(parents=True)
    tok.save(str(run / "tokenizer.json"))
    torch.manual_seed(0)
    model = build_model(family, "nano", data=DataFields(vocab_size=tok.get_vocab_size()))
    return save_pretrained_dir(model, run / "checkpoints" / "final", extra={"step": 0})


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """An exported hf:llama nano checkpoint (the CLI: ``interpscale export CKPT --out DIR``)."""
    tmp = tmp_path_factory.mktemp("export")
    ckpt = _run(tmp, "hf:llama")
    assert cli.main(["export", str(ckpt), "--out", str(tmp / "out")]) == 0
    return tmp / "out"


def test_the_export_holds_the_files_the_docs_list(export, tmp_path):
    rows = {r[0]: r[1] for r in _doc_rows("export-files")}
    hf_only = {f for f, holds in rows.items() if holds.startswith("hf: families only")}
    assert hf_only == {"config.json", "generation_config.json"}
    assert {p.name for p in export.iterdir()} == set(rows)
    ar = tmp_path / "ar-export"
    assert cli.main(["export", str(_run(tmp_path, "ar")), "--out", str(ar)]) == 0
    assert {p.name for p in ar.iterdir()} == set(rows) - hf_only


def test_autotokenizer_knows_the_special_tokens_and_round_trips_the_corpus(export):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(export))
    cfg = json.loads((export / "checkpoint.json").read_text())["config"]
    assert (hf.eos_token, hf.bos_token, hf.pad_token, hf.mask_token) == ("[EOS]", "[EOS]", "[PAD]", "[MASK]")
    assert (hf.eos_token_id, hf.pad_token_id, hf.mask_token_id) == (cfg["eos_id"], cfg["pad_id"], cfg["mask_id"])
    assert "[EOC]" in hf.all_special_tokens and hf.model_max_length == cfg["max_seq_len"]
    ours = encode_texts(load_tokenizer(export / "tokenizer.json", add_specials=False), CORPUS)
    for text, ids in zip(CORPUS, ours):
        got = hf(text)["input_ids"]
        assert got == ids  # the ids the model was trained on, no BOS/EOS added
        assert hf.decode(got) == text


def test_the_lm_eval_cli_runs_on_the_export_offline_and_agrees_with_our_adapter(export, tmp_path):
    """``lm_eval --model hf`` (the real CLI, a subprocess, offline) on a bundled task, against
    ``run_lm_eval`` on the same export."""
    from interpscale.metrics.lm_eval_adapter import run_lm_eval

    exe = Path(sys.executable).with_name("lm_eval")
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "lm_eval"]
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd + ["--model", "hf", "--model_args", f"pretrained={export},dtype=float32",
                                 "--tasks", "interpscale_text_ppl", "--include_path", str(TASKS), "--limit", "2",
                                 "--device", "cpu", "--output_path", str(tmp_path / "out")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (found,) = (tmp_path / "out").rglob("results_*.json")
    theirs = json.loads(found.read_text())["results"]["interpscale_text_ppl"]
    ours = run_lm_eval(export, "interpscale_text_ppl", out_dir=None, limit=2, bootstrap_iters=0,
                       allow_builtin=False)["interpscale_text_ppl"]
    assert theirs["bits_per_byte,none"] > 0
    assert theirs["bits_per_byte,none"] == pytest.approx(ours["bits_per_byte,none"], rel=1e-4)


class _Records(logging.Handler):
    """The messages logged to the logger it is added to (cli.main's once-filter sits on the root's handlers)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_an_export_without_its_run_tokenizer_says_so_and_takes_one_given(tmp_path):
    ckpt = _run(tmp_path, "hf:llama")
    lone = tmp_path / "elsewhere" / "model.pt"
    lone.parent.mkdir()
    from interpscale.models import load_checkpoint

    save_checkpoint(load_checkpoint(ckpt)[0], lone)
    seen = _Records()
    logging.getLogger("interpscale._commands.export").addHandler(seen)
    try:
        assert cli.main(["export", str(lone), "--out", str(tmp_path / "a")]) == 0
    finally:
        logging.getLogger("interpscale._commands.export").removeHandler(seen)
    assert not (tmp_path / "a" / "tokenizer.json").exists()
    assert [m for m in seen.messages if "no tokenizer.json" in m and "--tokenizer PATH" in m]
    tok = ckpt.parent.parent / "tokenizer.json"
    assert cli.main(["export", str(lone), "--out", str(tmp_path / "b"), "--tokenizer", str(tok)]) == 0
    assert (tmp_path / "b" / "tokenizer_config.json").is_file()
    big = train_tokenizer(CORPUS * 4, vocab_size=400)  # more tokens than the model's vocabulary
    big.save(str(tmp_path / "big.json"))
    assert cli.main(["export", str(lone), "--out", str(tmp_path / "c"), "--tokenizer", str(tmp_path / "big.json")]) == 2
    assert not (tmp_path / "c").exists()


def test_the_docs_list_the_bundled_tasks():
    rows = _doc_rows("bundled-tasks")
    yamls = {}
    for y in TASKS.glob("*.yaml"):
        text = y.read_text()
        data = re.search(r"test: data/(\S+)", text).group(1)
        yamls[re.search(r"^task: (\S+)", text, re.M).group(1)] = (re.search(r"^output_type: (\S+)", text, re.M).group(1), data)
    assert {r[0] for r in rows} == set(yamls)
    for task, out_type, data, _ in rows:
        assert out_type.split()[0] == yamls[task][0]
        name, n = re.search(r"(\S+\.jsonl) \((\d+)\)", data).groups()
        assert name == yamls[task][1] and int(n) == sum(1 for _ in iter_jsonl(TASKS / "data" / name))
