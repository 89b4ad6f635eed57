"""Imports follow the dependency direction drawn in docs/architecture.md.

Walks the AST of every module under src/interpscale (imports inside functions included),
maps each module to its layer and fails on an import that no documented arrow allows. The
arrows are read from the fenced block under "## Layers and the dependency direction" in
docs/architecture.md, so the document and the code cannot drift apart.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "interpscale"
DOC = ROOT / "docs" / "architecture.md"

BOTTOM = {"_atomic", "_jsonl", "_registry", "errors", "executors", "paper", "results_table"}  # importable by all; import only each other
LAYER_OF = {"cli": "cli", "_commands": "cli"}  # top-level module / subpackage -> layer (default: itself)
# Known arrows against the direction, each with the change that removes it. An entry only
# applies while its module exists; delete it once the move lands.
EXCEPTIONS: dict[str, str] = {}
# Files that still name a path outside the repository, each with the change that fixes it
# (made on another branch at the same time); delete an entry once that change is merged.
OUTSIDE_PATH_PENDING: dict[str, str] = {}


def documented_arrows(text: str) -> dict[str, set[str]]:
    section = text.split("## Layers and the dependency direction", 1)[1]
    block = re.search(r"```\n(.*?)```", section, re.S).group(1)
    arrows: dict[str, set[str]] = {}
    for line in block.splitlines():
        chain = [p.strip() for p in line.split("→") if p.strip()]
        for a, b in zip(chain, chain[1:]):
            arrows.setdefault(a, set()).add(b)
            arrows.setdefault(b, set())
    return arrows


def closure(arrows: dict[str, set[str]]) -> dict[str, set[str]]:
    out = {}
    for start in arrows:
        seen, todo = set(), [start]
        while todo:
            for nxt in arrows[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        out[start] = seen
    return out


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> str:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "interpscale"
    return LAYER_OF.get(top, top)


def imports(path: Path, src: Path = SRC) -> list[tuple[int, str]]:
    """(line, imported interpscale module) for every import in ``path``."""
    mod = module_name(path, src)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "interpscale":  # from interpscale import paper
                out += [(node.lineno, f"interpscale.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, target))
    return [(line, t) for line, t in out if t == "interpscale" or t.startswith("interpscale.")]


def violations(arrows: dict[str, set[str]], root: Path = SRC) -> list[str]:
    allowed = closure(arrows)
    bad = []
    for path in sorted(root.rglob("*.py")):
        mod = module_name(path, root)
        if mod in EXCEPTIONS:
            continue
        src = layer(mod)
        for line, target in imports(path, root):
            dst = layer(target)
            if dst == src or dst == "interpscale":
                continue
            where = f"{path.relative_to(root.parent)}:{line}"
            if src in BOTTOM and dst in BOTTOM:
                continue  # bottom modules may use each other (no cycles: Python would fail to import)
            if src in BOTTOM:
                bad.append(f"{where}: bottom module {src} imports {target}")
            elif dst in BOTTOM:
                continue
            elif src not in allowed:
                bad.append(f"{where}: {src} is not a layer in docs/architecture.md (imports {target})")
            elif dst not in allowed[src]:
                bad.append(f"{where}: {src} imports {target} ({dst}), against the documented direction")
    return bad


def test_documented_direction_is_the_agreed_one():
    arrows = documented_arrows(DOC.read_text())
    assert arrows == {
        "cli": {"pipeline", "concepts"}, "pipeline": {"orchestration", "analysis"}, "orchestration": {"metrics"},
        "metrics": {"judges", "data"}, "data": {"models"}, "concepts": {"data", "judges"},
        "analysis": {"scaling"}, "judges": set(), "models": set(), "scaling": set(),
    }
    for name in BOTTOM:
        assert f"`{name}`" in DOC.read_text(), f"bottom module {name} is not listed in docs/architecture.md"


def test_every_subpackage_is_a_documented_layer_or_bottom_module():
    arrows = documented_arrows(DOC.read_text())
    tops = {p.stem if p.is_file() else p.name for p in SRC.iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    unknown = {t for t in tops if LAYER_OF.get(t, t) not in arrows and t not in BOTTOM}
    assert not unknown, f"place these in docs/architecture.md (a layer or a bottom module): {sorted(unknown)}"


def test_imports_follow_the_documented_direction():
    bad = violations(documented_arrows(DOC.read_text()))
    assert not bad, "imports against docs/architecture.md:\n" + "\n".join(bad)


def test_the_walker_catches_an_arrow_against_the_direction(tmp_path):
    """The check can fail: a models module importing judges inside a function, a relative
    import from scaling into models and a bottom module importing a layer are all caught."""
    pkg = tmp_path / "interpscale"
    for sub in ("models", "judges", "scaling"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "models" / "probe.py").write_text("from interpscale import paper\n\ndef f():\n"
                                             "    from interpscale.judges import x\n    return x\n")
    (pkg / "scaling" / "fit.py").write_text("from ..models import probe\nfrom . import x\n")
    (pkg / "paper.py").write_text("import interpscale.models\n")
    bad = violations(documented_arrows(DOC.read_text()), pkg)
    assert bad == ["interpscale/models/probe.py:4: models imports interpscale.judges (judges), against the documented direction",
                   "interpscale/paper.py:1: bottom module paper imports interpscale.models",
                   "interpscale/scaling/fit.py:1: scaling imports interpscale.models (models), against the documented direction"]


@pytest.mark.parametrize("text", ["../shared", "/work/shared"])
def test_nothing_points_outside_the_repository(text):
    hits = []
    for base in ("src", "tests", "docs", "benchmarks", "configs", "scripts"):
        for path in (ROOT / base).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".md", ".toml", ".txt", ".sh", ".cfg", ".ipynb", ".yaml"}:
                rel = str(path.relative_to(ROOT))
                if path.resolve() == Path(__file__).resolve() or rel in OUTSIDE_PATH_PENDING:
                    continue
                if text in path.read_text(errors="ignore"):
                    hits.append(str(path.relative_to(ROOT)))
    for top in ("README.md", "CONTRIBUTING.md", "Makefile", "pyproject.toml"):
        if text in (ROOT / top).read_text():
            hits.append(top)
    assert not hits, f"{text!r} (a path outside the repository) in: {hits}"
