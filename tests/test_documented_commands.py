"""Every `interpscale ...` command shown in README.md and docs/*.md runs as written.

The commands run in a scratch directory on the outputs of the quick demo, which the first
documented `demo --quick` line builds. So that the whole module stays near a minute, a few
knobs that only change how long a command takes are set here (and only these):

- the quick demo runs the tiny preset tests/data/tiny-demo.toml (same pipeline, 12 runs);
  `sweep launch --preset demo-quick` uses it too, so it finds every run finished;
- a `demo` line without `--quick` (the full and zoo demos, ~10 minutes each) is checked by
  planning its preset, which validates the whole configuration;
- bootstrap counts are small (`--n-boot 10`) and the human-study model skips MCMC;
- `sweep` with a preset of your own (docs/data.md's `sweep.toml`, nano/micro models at
  1e15 FLOPs, or the repository's `configs/pydocs-adaptive.toml`, whose adaptive sweep
  tests/orchestration/test_adaptive.py runs) is checked by planning it; `--executor slurm` runs as `local` and `--slurm`
  options (a partition this machine lacks) are dropped.

The files the data examples read are made here: `corpus/` (JSONL documents of chunks
labelled with the concepts of docs/data.md's `concepts.json`, plain and gzipped),
`concepts.json` and `sweep.toml` copied from docs/data.md's own blocks, `books/*.txt.gz`,
and `gpt2/tokenizer.json` (a small BPE trained with `tokenizers`, standing in for GPT-2's).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from interpscale.cli import COMMANDS, main
from interpscale.models.checkpoint import list_checkpoints

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "tiny-demo.toml"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
SHELL = ("", "bash", "sh", "shell", "console")  # fences holding commands (```text holds output)


def documented_commands() -> list[tuple[str, str]]:
    """(file name, command) for every command of a shell block that starts with `interpscale `
    (a line ending in a backslash continues on the next)."""
    out = []
    for path in DOCS:
        for info, block in FENCE.findall(path.read_text()):
            if info.strip() not in SHELL:
                continue
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = line.strip()
                if line.startswith("interpscale "):
                    out.append((path.name, re.split(r"\s+#", line, maxsplit=1)[0].strip()))
    return out


def doc_block(doc: str, lang: str, after: str) -> str:
    """The first ```lang block of docs/``doc`` after the text ``after``."""
    text = (ROOT / "docs" / doc).read_text()
    return next(b for info, b in FENCE.findall(text.split(after, 1)[1]) if info.strip() == lang)


COMMANDS_IN_DOCS = documented_commands()
pytestmark = pytest.mark.slow  # the quick demo, then every documented command on its outputs


def test_the_docs_show_every_subcommand():
    shown = {shlex.split(cmd)[1] for _, cmd in COMMANDS_IN_DOCS}
    assert set(COMMANDS) <= shown, f"subcommands missing from README/docs: {set(COMMANDS) - shown}"
    assert not any(re.search(r"\[|\||\.\.\.", cmd) for _, cmd in COMMANDS_IN_DOCS), \
        "a documented command holds a [choice], an a|b alternative or '...': write a runnable line"


def _speed(argv: list[str]) -> list[str]:
    """The test-only knobs listed in the module docstring."""
    cmd = argv[0]
    if cmd == "demo" and "--quick" in argv:
        argv = [a for a in argv if a != "--quick"] + ["--preset", str(TINY)]
        if "--out" not in argv:
            argv += ["--out", "runs/demo-quick"]
    elif cmd == "demo":
        preset = argv[argv.index("--preset") + 1] if "--preset" in argv else "demo"
        argv = ["plan", "--preset", preset, "--flops-per-s", "1e12"]
    elif cmd == "sweep" and "gated.toml" in argv:  # docs/own-model.md's tiny sweep runs, in this process
        argv = argv + ["--executor", "debug"]
    elif cmd == "sweep" and "--preset" in argv and argv[argv.index("--preset") + 1].endswith(".toml"):
        preset = argv[argv.index("--preset") + 1]  # a repository file (configs/...) or one made here
        preset = preset if Path(preset).exists() or not (ROOT / preset).exists() else str(ROOT / preset)
        argv = ["plan", "--preset", preset, "--flops-per-s", "1e12"]
    if "--executor" in argv and argv[argv.index("--executor") + 1] == "slurm":
        argv[argv.index("--executor") + 1] = "local"
    while "--slurm" in argv:
        i = argv.index("--slurm")
        del argv[i : i + 2]
    argv = [str(TINY) if a == "demo-quick" else a for a in argv]
    if cmd in ("fit", "figures", "report") and "--n-boot" not in argv and "chinchilla" not in argv:
        argv += ["--n-boot", "10"]
    if cmd == "fit" and "chinchilla" in argv:
        argv += ["--n-boot", "10"]
    if cmd == "human-study":
        argv += ["--no-bayes", "--n-boot", "20"]
    return argv


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A scratch directory whose runs/demo-quick/ the documented quick-demo line builds."""
    d = tmp_path_factory.mktemp("documented")
    return d


def _substitute(argv: list[str], d: Path) -> list[str]:
    runs = sorted((d / "runs/demo-quick/sweep/runs").glob("ar_concept-*"))
    run = runs[-1] if runs else d / "no-run"
    ckpts = list_checkpoints(run / "checkpoints")  # safetensors directories (old .pt files too)
    forecasts = (d / "runs/forecasts.jsonl").read_text().splitlines() if (d / "runs/forecasts.jsonl").exists() else []
    table = {"RUN_DIR": str(run), "CHECKPOINT": str(ckpts[-1] if ckpts else run / "no-checkpoint"),
             "FORECAST_ID": json.loads(forecasts[-1])["id"] if forecasts else "no-forecast"}
    return [table.get(a, a) for a in argv]


def _corpus(d: Path) -> None:
    """The inputs docs/data.md and the README's data section name (see the module docstring)."""
    import gzip
    import json
    import random

    if (d / "sweep.toml").exists():
        return
    cards = json.loads(doc_block("data.md", "json", "`concepts.json` (optional"))
    (d / "concepts.json").write_text(json.dumps(cards))
    rng = random.Random(0)
    (d / "corpus").mkdir()
    for part in range(2):
        docs = []
        for _ in range(400):  # enough documents for docs/data.md's 1% validation split
            chunks = []
            for _ in range(rng.randint(1, 3)):
                picked = rng.sample(cards, rng.randint(1, 2))
                words = [w for c in picked for w in c["words"]]
                text = " ".join(rng.choice(words + ["the", "a", "and", "of"]) for _ in range(12)).capitalize() + "."
                chunks.append({"text": text, "concepts": [c["label"] for c in picked]})
            docs.append(json.dumps({"chunks": chunks}))
        body = "\n".join(docs) + "\n"
        (d / "corpus" / f"part-{part:03d}.jsonl").write_text(body)
        with gzip.open(d / "corpus" / f"part-{part:03d}.jsonl.gz", "wt") as f:
            f.write(body)
    (d / "books").mkdir()
    for i in range(2):
        with gzip.open(d / "books" / f"book-{i}.txt.gz", "wt") as f:
            f.write("\n\n".join(f"Chapter {k}. The ship left the harbor at dawn; the crew sang." for k in range(40)))
    (d / "code").mkdir()
    for i in range(40):  # docs/data.md's source-code example: blank lines inside each file
        (d / "code" / f"mod{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n\n\nclass C{i}:\n    pass\n")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(["The ship left the harbor at dawn; the crew sang."] * 20,
                            trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    (d / "gpt2").mkdir()
    tok.save(str(d / "gpt2" / "tokenizer.json"))
    (d / "sweep.toml").write_text(doc_block("data.md", "toml", "point a sweep at it"))
    (d / "annotated.toml").write_text(doc_block("concepts.md", "toml", "`annotated.toml`"))


def _ratings(d: Path) -> None:
    if not (d / "ratings.csv").exists():
        from interpscale.analysis.human_study import simulate_study

        simulate_study(seed=0).ratings.to_csv(d / "ratings.csv", index=False)


@pytest.mark.parametrize("doc,command", COMMANDS_IN_DOCS, ids=[c for _, c in COMMANDS_IN_DOCS])
def test_documented_command_runs(doc, command, workdir, monkeypatch, capsys):
    monkeypatch.chdir(workdir)
    argv = shlex.split(command)[1:]
    if argv[0] != "demo" and not (workdir / "runs/demo-quick/results.parquet").exists():
        # the demo's outputs first, through the documented quick-demo line
        quick = next(c for _, c in COMMANDS_IN_DOCS if c.startswith("interpscale demo --quick"))
        assert main(_speed(shlex.split(quick)[1:])) == 0
    if "ratings.csv" in argv:
        _ratings(workdir)
    if argv[0] in ("data", "concepts") or "sweep.toml" in argv or "annotated.toml" in argv:
        _corpus(workdir)
    if "gated.toml" in argv:  # docs/own-model.md: the example plugin and its preset in the working directory
        for name in ("gated_gpt.py", "gated.toml"):
            (workdir / name).write_text((ROOT / "examples" / "gated_gpt" / name).read_text())
    argv = _speed(_substitute(argv, workdir))
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code == 0, f"{doc}: `{command}` exited {code} (ran as {argv}):\n{err[-2000:]}"
