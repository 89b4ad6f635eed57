"""Suite-wide test settings (headless plotting, offline hubs), the reference-data fixture and
the skip of `slurm`-marked tests when no SLURM cluster answers."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one pytest worker per core (pytest-xdist): one intra-op thread each, or
    # two workers' torch/OpenMP pools oversubscribe the cores (jobs a test starts inherit it)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT / "tests" / "data"  # reference data, indexed in tests/data/README.md


def find_reference_data(name: str) -> Path:
    """``tests/data/NAME`` or ``tests/data/*/NAME``; a missing file is a failure, never a skip."""
    hits = [DATA_DIR / name] + sorted(DATA_DIR.glob(f"*/{name}"))
    for p in hits:
        if p.is_file():
            return p
    pytest.fail(f"reference data {name} is not in {DATA_DIR} (see tests/data/README.md)")


@pytest.fixture(autouse=True)
def _plugins_loaded_stay_with_their_test():
    """The plugin modules a test loads are forgotten after it -- ``plugins.LOADED`` (which ``plan``
    records in each run), their ``sys.modules`` entries and the families they registered -- so no
    later test on the same pytest worker sees them (a file plugin of the same name loaded again from
    elsewhere would otherwise find its family already registered)."""
    mod = sys.modules.get("interpscale.models.plugins")  # not imported here: `fit` tests run without torch
    before = list(mod.LOADED) if mod else []
    yield
    mod = sys.modules.get("interpscale.models.plugins")
    if mod is None or mod.LOADED == before:
        return
    new = {Path(m).stem if m.endswith(".py") else m for m in mod.LOADED if m not in before}
    mod.LOADED[:] = before
    families = sys.modules["interpscale.models.registry"].FAMILIES
    for name in list(families):
        if getattr(families[name].builder, "__module__", None) in new:
            families.pop(name)
    for m in new:
        sys.modules.pop(m, None)


@pytest.fixture(scope="session")
def reference_data():
    """``reference_data(name)`` -> path of a file under ``tests/data/`` (see its README)."""
    return find_reference_data


@pytest.fixture(scope="session")
def shared_data(reference_data):
    """Old name of :func:`reference_data`; it now looks only inside the repository."""
    return reference_data


def slurm_unavailable() -> str | None:
    """Why no SLURM cluster can run a job here (None when one can)."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "no SLURM client installed (run scripts/local-slurm.sh start)"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sinfo failed: {exc}"
    if out.returncode != 0:
        return f"no SLURM controller reachable: {out.stderr.strip()[:200]}"
    if not any(s.strip("*") in ("idle", "mixed", "allocated") for s in out.stdout.split()):
        return f"no usable SLURM node (states: {out.stdout.split()})"
    return None


def pytest_collection_modifyitems(config, items):
    """`@pytest.mark.slurm` tests run against the real cluster, or skip with the reason. Files holding a
    `@pytest.mark.slow` test are collected first (in their own order, each file's tests in theirs):
    ``--dist loadfile`` hands files out in collection order, so the longest start first and the run
    does not end waiting on one of them started last (longest-first scheduling)."""
    slow = {it.path for it in items if it.get_closest_marker("slow") is not None}
    items.sort(key=lambda it: it.path not in slow)  # stable: only moves the slow files to the front
    marked = [it for it in items if it.get_closest_marker("slurm") is not None]
    if marked:
        reason = slurm_unavailable()
        if reason is not None:
            for it in marked:
                it.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def compiled_matches_eager():
    """``check(loss_fn, batch, params, step)``: ``torch.compile(loss_fn, fullgraph=True)`` (CPU
    Inductor) gives the eager loss parts and gradients within 1e-5 at the same seed, and a
    second call reuses the graph. Returns (eager, compiled) LossOutputs."""
    import torch
    import torch._dynamo
    import torch._inductor.config as inductor_config

    def check(loss_fn, batch, params, step):
        def run(fn):
            torch.manual_seed(7)  # same masks, teacher forcing and dropout draws
            out = fn(batch, step)
            return out, torch.autograd.grad(out.total, params, allow_unused=True)

        torch._dynamo.reset()
        try:
            # fallback_random: Inductor draws random numbers with eager's generator, so both
            # runs see the same masks; error_on_recompile: a second call must reuse the graph
            with inductor_config.patch(fallback_random=True):
                compiled = torch.compile(loss_fn, fullgraph=True)
                ref, g_ref = run(loss_fn)
                got, g_got = run(compiled)
                with torch._dynamo.config.patch(error_on_recompile=True):
                    again, _ = run(compiled)
        finally:
            torch._dynamo.reset()
        assert set(got.parts) == set(ref.parts)
        for k in ref.parts:
            torch.testing.assert_close(got.parts[k], ref.parts[k], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(again.total, ref.total, rtol=1e-5, atol=1e-5)
        assert int(got.n_tokens) == int(ref.n_tokens)
        for a, b in zip(g_got, g_ref):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        return ref, got

    return check
