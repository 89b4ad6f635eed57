"""`interpscale judge` on user errors and total failures: a clear message naming the file
and line or the failure, no traceback, and an exit status that says what happened."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from interpscale.cli import main
from interpscale.judges import LexicalJudge, build_judge, default_cache_path
from judge_server import ServerReply

ROOT = Path(__file__).resolve().parents[2]


def _rows(tmp_path, cards):
    p = tmp_path / "rows.jsonl"
    p.write_text("".join(json.dumps({"label": c.label, "description": c.description, "tokens": list(c.words)}) + "\n"
                         for c in cards))
    return p


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_endpoint_exits_1_naming_the_failure_without_a_traceback(tmp_path, cards):
    url = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "interpscale.cli", "judge", "alignment", "--input",
                        str(_rows(tmp_path, cards)), "--base-url", url, "--model", "m", "--max-retries", "1",
                        "--out", str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    assert "3 of 3 judge scores failed: 3 api_error (APIConnectionError after 1 retries x3)" in p.stderr
    assert "no item could be scored" in p.stderr
    res = json.loads((out / "alignment.json").read_text())  # what was found is still written
    assert [r["status"] for r in res["records"]] == ["api_error"] * 3
    assert res["usage"]["requests"] == 6 and res["usage"]["retries"] == 3


def test_every_item_unparseable_exits_1(serve, tmp_path, cards, capsys):
    srv = serve(lambda b, n: ServerReply("I refuse to use the format."))
    code = main(["judge", "alignment", "--input", str(_rows(tmp_path, cards)), "--base-url", srv.url,
                 "--model", "m", "--cache", str(tmp_path / "c.sqlite")])
    err = capsys.readouterr().err
    assert code == 1 and "3 of 3 judge scores failed: 3 parse_error" in err


def test_some_failures_exit_0_and_are_counted(serve, tmp_path, cards, capsys):
    srv = serve(lambda b, n: ServerReply(raw_body=b"{}") if "volcano" in json.dumps(b).lower()
                else ServerReply("ALIGNMENT: 4"))
    code = main(["judge", "alignment", "--input", str(_rows(tmp_path, cards)), "--base-url", srv.url,
                 "--model", "m", "--cache", str(tmp_path / "c.sqlite"), "--price-in", "1", "--price-out", "1"])
    err = capsys.readouterr().err
    assert code == 0
    assert "1 of 3 judge scores failed: 1 api_error (malformed reply: choices is missing or not a list x1)" in err
    assert "judge ledger (" in err and "3 requests" in err


def test_a_refusing_endpoint_exits_2_without_a_traceback(serve, tmp_path, cards, capsys):
    srv = serve(lambda b, n: ServerReply(status=401))
    code = main(["judge", "alignment", "--input", str(_rows(tmp_path, cards)), "--base-url", srv.url,
                 "--model", "m", "--cache", str(tmp_path / "c.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and "refused the request (AuthenticationError: HTTP 401)" in err and "OPENAI_API_KEY" in err


@pytest.mark.parametrize("kind,text,message", [
    ("alignment", '{"label": "a", "tokens": ["x"]}\n\n{"label": "b", "tokens": ["y"]\n',
     "line 3 is not valid JSON"),
    ("alignment", '{"label": "a", "tokens": ["x"]}\n["label", "b"]\n', "line 2 is a JSON list, expected an object"),
    ("alignment", '{"label": "a", "tokens": ["x"]}\n{"label": "", "tokens": ["y"]}\n',
     "line 2: 'label' must be a non-empty string"),
    ("alignment", '{"label": "a", "tokens": "x y"}\n', "line 1: 'tokens' must be a non-empty list of strings"),
    ("alignment", "\n\n", "no rows (the file is empty)"),
    ("relevance", '{"text": "t", "candidates": [{"label": "a"}, "b"]}\n',
     "line 1, candidate 2: a concept must be an object"),
    ("relevance", '{"text": "t", "candidates": []}\n', "line 1: 'candidates' must be a list of 1-26 concepts"),
    ("steering", '{"label": "a", "prompt": "p", "continuation": "c", "condition": "steered"}\n'
                 '{"label": "a", "prompt": "p", "continuation": "c", "condition": "boosted"}\n',
     "line 2: 'condition' must be one of unsteered, prompting, steered"),
    ("steering", '{"label": "a", "prompt": "p", "continuation": "c"}\n', "line 1: lacks condition"),
    ("steering", '{"label": "a", "prompt": "p", "continuation": "c", "condition": "steered", "strength": "hi"}\n',
     "line 1: 'strength' must be a finite number"),
])
def test_bad_input_files_name_file_and_line(tmp_path, capsys, kind, text, message):
    p = tmp_path / "in.jsonl"
    p.write_text(text)
    assert main(["judge", kind, "--input", str(p)]) == 2
    err = capsys.readouterr().err
    assert f"interpscale judge {kind}: {p}: {message}" in err, err


def test_missing_input_file_and_bad_settings(tmp_path, capsys):
    assert main(["judge", "alignment", "--input", str(tmp_path / "nope.jsonl")]) == 2
    assert f"{tmp_path / 'nope.jsonl'}: no such file" in capsys.readouterr().err
    p = tmp_path / "in.jsonl"
    p.write_text('{"label": "a", "tokens": ["x"]}\n')
    assert main(["judge", "alignment", "--input", str(p), "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                 "--concurrency", "0", "--cache", str(tmp_path / "c.sqlite")]) == 2
    assert "--concurrency: must be a whole number >= 1, got 0" in capsys.readouterr().err
    assert main(["judge", "alignment", "--input", str(p), "--batch-write", str(tmp_path / "b.jsonl")]) == 2
    assert "Batch API files need a judge model name" in capsys.readouterr().err


def test_bad_template_file_and_missing_checkpoint(tmp_path, capsys):
    p = tmp_path / "in.jsonl"
    p.write_text('{"label": "a", "tokens": ["x"]}\n')
    bad = tmp_path / "t.toml"
    bad.write_text("not toml [[[")
    assert main(["judge", "alignment", "--input", str(p), "--templates", str(bad)]) == 2
    assert f"template file {bad}: Expected '='" in capsys.readouterr().err
    bad.write_text("[alignment]\nbogus = 1\n")
    assert main(["judge", "alignment", "--input", str(p), "--templates", str(bad)]) == 2
    assert f"template file {bad}: template override 'alignment': unknown keys ['bogus']" in capsys.readouterr().err
    assert main(["judge", "steering", "--checkpoint", str(tmp_path / "step_1.pt")]) == 2
    assert f"{tmp_path / 'step_1.pt'}: no such checkpoint (a checkpoints/<name> directory or an old .pt file)" in capsys.readouterr().err


def test_a_cache_path_that_is_not_a_database(tmp_path, capsys):
    p = tmp_path / "in.jsonl"
    p.write_text('{"label": "a", "tokens": ["x"]}\n')
    junk = tmp_path / "junk.sqlite"
    junk.write_text("this is not sqlite " * 100)
    for cache in (junk, tmp_path):
        assert main(["judge", "alignment", "--input", str(p), "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                     "--cache", str(cache)]) == 2
        assert f"judge cache {cache}: cannot use it as an sqlite database" in capsys.readouterr().err


def test_build_judge_policy(tmp_path, monkeypatch):
    monkeypatch.delenv("INTERPSCALE_JUDGE_BASE_URL", raising=False)
    monkeypatch.delenv("INTERPSCALE_JUDGE_MODEL", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_path(tmp_path / "out") == tmp_path / "out" / "judge_cache.sqlite"
    assert default_cache_path() == tmp_path / "xdg" / "interpscale" / "judge_cache.sqlite"
    assert isinstance(build_judge(), LexicalJudge)
    j = build_judge(base_url="http://127.0.0.1:9/v1", model="m", out_dir=tmp_path / "out", concurrency=3)
    assert j.cache.path == tmp_path / "out" / "judge_cache.sqlite" and j.concurrency == 3
    w = build_judge(model="m", batch_write=tmp_path / "req.jsonl", cache_path=tmp_path / "c.sqlite")
    assert w.client.base_url == "batch://offline" and w.path == tmp_path / "req.jsonl"
    with pytest.raises(ValueError, match="both base_url and model"):
        build_judge(base_url="http://127.0.0.1:9/v1")
