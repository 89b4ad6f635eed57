"""The dispatcher: verbosity anywhere, help, and lazy imports per subcommand."""

import subprocess
import sys

import pytest

from interpscale.cli import COMMANDS, main


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)


@pytest.mark.parametrize("argv", [["-v", "plan", "--preset", "demo-quick"], ["plan", "-v", "--preset", "demo-quick"]])
def test_verbose_before_or_after_the_subcommand(argv, capsys):
    assert main(argv) == 0
    assert "C_target" in capsys.readouterr().out


def test_unknown_subcommand_is_one_line_and_exit_2(capsys):
    assert main(["no-such-command"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid choice: 'no-such-command'" in err and "usage:" not in err, err


def test_fit_subcommand_never_imports_torch(tmp_path):
    # `interpscale fit` must stay usable on a machine where only the scaling stack is wanted
    code = "import sys, interpscale.cli as c; c.build_parser('fit'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_cli_main_is_the_only_exception_to_exit_code_mapping():
    """No command module turns an exception into a message or an exit status itself: no
    ``sys.exit``, and no ``except`` clause that returns a status or writes to stderr (a clause
    that re-raises as a UserError, or returns 0 for a control-flow exception, is fine)."""
    import ast
    from pathlib import Path

    import interpscale._commands as commands

    offenders = []
    for path in sorted(Path(commands.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "exit":
                offenders.append(f"{path.name}:{node.lineno}: sys.exit")
            if not isinstance(node, ast.ExceptHandler):
                continue
            for inner in (n for stmt in node.body for n in ast.walk(stmt)):
                if (isinstance(inner, ast.Return) and isinstance(inner.value, ast.Constant)
                        and type(inner.value.value) is int and inner.value.value != 0):
                    offenders.append(f"{path.name}:{inner.lineno}: except ... return <status>")
                if isinstance(inner, ast.Attribute) and inner.attr == "stderr":
                    offenders.append(f"{path.name}:{inner.lineno}: except ... writes to stderr")
    assert not offenders, offenders
    # and cli.main maps: bad input 2, failed work 1, Ctrl-C 130, a bug INTERNAL_ERROR (a ValueError is bad
    # input only when interpscale's own code raised it: tests/test_cli_errors.py, the numeric-bug test)
    from interpscale.cli import INTERNAL_ERROR, exit_code
    from interpscale.errors import ConfigError, FailedWork, UserError

    assert [exit_code(e) for e in (UserError("x"), ConfigError("x"), ValueError("x"), FileNotFoundError(2, "x"),
                                   FailedWork("x"), RuntimeError("x"), KeyboardInterrupt())] == [
        2, 2, INTERNAL_ERROR, 2, 1, INTERNAL_ERROR, 130]


def test_old_spellings_run_with_one_deprecation_line(tmp_path, capsys):
    """`fit RESULTS` is `fit families RESULTS`; a sweep without a verb is `sweep launch`."""
    from interpscale.analysis.example_data import example_results

    path = tmp_path / "r.csv"
    example_results().to_csv(path, index=False)
    argv = ["--out", str(tmp_path / "fits"), "--n-boot", "0", "--grid", "coarse", "--only-family", "ar", "--allow-partial"]
    assert main(["fit", "families", str(path), *argv]) == 0
    assert "deprecated" not in capsys.readouterr().err
    assert main(["fit", str(path), *argv]) == 0
    err = capsys.readouterr().err
    assert [ln for ln in err.splitlines() if "deprecated" in ln] == [
        "interpscale fit: deprecated spelling; write `interpscale fit families ...` (the form without `families` "
        "goes in the next release)"]
    assert main(["fit", "--plugin", "json", str(path), *argv]) == 0  # the command's own option before the table
    assert "deprecated spelling" in capsys.readouterr().err
    # the old launch spelling reaches `sweep launch`, which needs --preset
    assert main(["sweep", "--out", str(tmp_path / "sw")]) == 2
    err = capsys.readouterr().err
    assert "deprecated spelling; write `interpscale sweep launch ...`" in err and "--preset" in err


@pytest.mark.parametrize("command", [["plan"], ["sweep", "launch"]])
def test_plan_and_launch_need_a_preset_and_say_where_the_demo_is(command, capsys):
    assert main([*command, "--out", "x"] if command[0] == "sweep" else command) == 2
    assert "--preset" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    assert "interpscale demo" in capsys.readouterr().out.replace("\n", " ").replace("  ", " ")
