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


def test_unknown_subcommand_is_an_argparse_error():
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2


def test_fit_subcommand_never_imports_torch(tmp_path):
    # `interpscale fit` must stay usable on a machine where only the scaling stack is wanted
    code = "import sys, interpscale.cli as c; c.build_parser('fit'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
