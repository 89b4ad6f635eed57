"""Issue 26's acceptance: your own architecture in the sweep, from a module outside the package.

examples/gated_gpt is pip-installed (its pyproject declares the entry point
``interpscale.families``), then every step runs in a fresh ``interpscale`` process with the
environment as the install left it -- no PYTHONPATH, no sitecustomize, no --plugin: the
local executor's job processes, ``train``, ``evaluate``, ``fit`` and ``report`` all find
``gated-gpt`` through the entry point.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gated_gpt"


def _run(*args: str, cwd: Path, timeout: int = 600) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env |= {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "interpscale.cli", *args], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, f"interpscale {' '.join(args)} exited {out.returncode}:\n{out.stderr[-3000:]}"
    return out.stdout + out.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """examples/gated_gpt installed into this interpreter's environment, uninstalled after."""
    build = tmp_path_factory.mktemp("gated-src")
    shutil.copytree(EXAMPLE, build / "gated_gpt")  # build outside the repository (no build/ left behind)
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q",
           str(build / "gated_gpt")]
    subprocess.run(pip, check=True, capture_output=True, timeout=300)
    try:
        yield
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", "gated-gpt"], capture_output=True,
                       timeout=300)


@pytest.mark.filterwarnings("ignore")
def test_plugin_family_swept_next_to_ar_then_train_evaluate_fit_report(installed, tmp_path):
    preset = tmp_path / "gated.toml"
    shutil.copy(EXAMPLE / "gated.toml", preset)
    plan_out = _run("plan", "--preset", str(preset), cwd=tmp_path)
    assert "measured" in plan_out and "analytic" in plan_out  # gated-gpt measured on meta, ar by Eq. 23

    _run("sweep", "launch", "--preset", str(preset), "--out", "sweep", cwd=tmp_path)
    runs = sorted((tmp_path / "sweep" / "runs").iterdir())
    specs = {r.name: json.loads((r / "spec.json").read_text()) for r in runs}
    assert {s["family"] for s in specs.values()} == {"ar", "gated-gpt"} and len(runs) == 12
    for r in runs:  # every run trained in the local executor's job processes
        assert json.loads((r / "status.json").read_text())["state"] == "done", r.name
    gated = next(r for r in runs if specs[r.name]["family"] == "gated-gpt")
    assert specs[gated.name]["model_overrides"]["gate"] == "headwise"  # [model.gated-gpt] reached the run

    # a fresh process trains a copy of a gated run from its spec, another evaluates it
    again = tmp_path / "again"
    _run("train", "--spec", str(gated / "spec.json"), str(again), cwd=tmp_path)
    assert json.loads((again / "status.json").read_text())["state"] == "done"
    _run("evaluate", str(again), cwd=tmp_path)
    assert any(again.glob("results*"))

    _run("sweep", "collect", "sweep", cwd=tmp_path)
    _run("fit", "families", "sweep/results.csv", "--out", "fits", "--n-boot", "10", "--allow-partial", cwd=tmp_path)
    fitted = "".join(p.read_text() for p in (tmp_path / "fits").glob("*.json"))
    assert '"gated-gpt"' in fitted and '"ar"' in fitted
    _run("report", "sweep/results.csv", "--out", "report", "--n-boot", "10", "--no-figures", cwd=tmp_path)
    assert "gated-gpt" in (tmp_path / "report" / "report.md").read_text()


def test_a_plugin_checkpoint_reloads_through_its_builder_in_a_fresh_process(tmp_path):
    """Saved where the plugin was named by file (``--plugin path.py``); a process that was told
    nothing imports it from the checkpoint and rebuilds the model with the same arguments."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    save = (f"from interpscale.models import load_plugins, build_model, save_checkpoint, DataFields\n"
            f"load_plugins({str(EXAMPLE / 'gated_gpt.py')!r})\n"
            f"m = build_model('gated-gpt', 'nano', data=DataFields(vocab_size=96), gate='elementwise')\n"
            f"save_checkpoint(m, {str(tmp_path / 'g.pt')!r})\n")
    load = (f"import torch\nfrom interpscale.models import load_checkpoint\n"
            f"m, _ = load_checkpoint({str(tmp_path / 'g.pt')!r})\n"
            f"print(type(m).__name__, m.config.gate, m.config.vocab_size, m.embed.weight.shape[0])\n")
    subprocess.run([sys.executable, "-c", save], cwd=tmp_path, env=env, check=True, timeout=300)
    out = subprocess.run([sys.executable, "-c", load], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["GatedGPT", "elementwise", "96", "96"]


def test_preset_plugins_are_recorded_in_plugin_runs_and_loaded_with_the_spec(tmp_path, capsys):
    """``[plan] plugins`` reaches the runs of the plugin family only (built-in runs keep their
    ids), and a process that loads such a spec can look the family up; a plugin that does not
    import is a named bad-input error (exit 2)."""
    from interpscale.cli import main
    from interpscale.orchestration import PlanOptions, plan

    plugin = str(EXAMPLE / "gated_gpt.py")
    preset = tmp_path / "p.toml"
    preset.write_text((EXAMPLE / "gated.toml").read_text().replace(
        "[plan]\n", f"[plan]\nplugins = [{plugin!r}]\n".replace("'", '"'), 1))
    p = plan(preset, PlanOptions(flops_per_s=1e12))
    by_family = {r.family: r.plugins for r in p.runs}
    assert by_family == {"gated-gpt": (plugin,), "ar": ()}
    run = next(r for r in p.runs if r.family == "gated-gpt")
    (tmp_path / "spec.json").write_text(run.to_json())
    check = ("from interpscale.orchestration.spec import RunSpec\nfrom interpscale.models import price\n"
             f"print(price(RunSpec.load({str(tmp_path / 'spec.json')!r}).family, 'nano', 32).how)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "measured", out.stderr[-2000:]
    assert main(["plan", "--plugin", "no_such_plugin_mod", "--preset", str(preset)]) == 2
    assert "plugin module 'no_such_plugin_mod' does not import" in capsys.readouterr().err
