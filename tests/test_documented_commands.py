"""Every `interpscale ...` command shown in README.md and docs/*.md runs as written.

The commands run in a scratch directory on the outputs of the quick demo, which the first
documented `demo --quick` line builds. So that the whole module stays near a minute, a few
knobs that only change how long a command takes are set here (and only these):

- the quick demo runs the tiny preset tests/data/tiny-demo.toml (same pipeline, 12 runs);
  `sweep launch --preset demo-quick` uses it too, so it finds every run finished;
- a `demo` line without `--quick` (the full and zoo demos, ~10 minutes each) is checked by
  planning its preset, which validates the whole configuration;
- bootstrap counts are small (`--n-boot 10`) and the human-study model skips MCMC.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from interpscale.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "tiny-demo.toml"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)


def documented_commands() -> list[tuple[str, str]]:
    """(file name, command) for every line of a fenced block that starts with `interpscale `."""
    out = []
    for path in DOCS:
        for block in FENCE.findall(path.read_text()):
            for line in block.splitlines():
                line = line.strip()
                if line.startswith("interpscale "):
                    out.append((path.name, re.split(r"\s+#", line, maxsplit=1)[0].strip()))
    return out


COMMANDS_IN_DOCS = documented_commands()


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
    ckpts = sorted((run / "checkpoints").glob("*.pt"))
    table = {"RUN_DIR": str(run), "CHECKPOINT": str(ckpts[-1] if ckpts else run / "no.pt")}
    return [table.get(a, a) for a in argv]


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
    argv = _speed(_substitute(argv, workdir))
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code == 0, f"{doc}: `{command}` exited {code} (ran as {argv}):\n{err[-2000:]}"
