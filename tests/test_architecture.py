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

BOTTOM = {"_atomic", "_jsonl", "_markdown", "_registry", "_toml", "errors", "executors", "paper", "results_table"}  # importable by all; import only each other
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
        "cli": {"pipeline", "concepts", "design"}, "pipeline": {"orchestration", "analysis", "design"},
        "design": {"orchestration", "analysis"}, "orchestration": {"metrics"},
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


# ---- facts defined once (issue 30.2) ------------------------------------------------------
def _modules(root: Path = SRC):
    for path in sorted(root.rglob("*.py")):
        yield module_name(path, root), path, ast.parse(path.read_text(), str(path))


def _literal_strings(node: ast.AST, tables: set[int] = frozenset()) -> set[str]:
    """The string constants a literal collection lists (a dict: its keys, when it is a
    module-level table or its values are constants; a dict of computed values is a result)."""
    if isinstance(node, ast.Dict) and id(node) not in tables and \
            not all(isinstance(v, ast.Constant) for v in node.values):
        return set()
    elts = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", [])
    return {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}


def fact_copies(root: Path = SRC) -> dict[str, list[str]]:
    """Where each fact is written out, by the mark it leaves in the code."""
    from interpscale import paper

    table23 = {v for row in paper.TABLE23.values() for v in row[2:]}
    metrics = set(paper.INTERP_METRICS)
    special_keys = {"pad", "eos", "eoc", "mask"}
    retry = {"INITIAL_RETRY_DELAY", "MAX_RETRY_DELAY", "MAX_RETRY_AFTER", "DEFAULT_MAX_RETRIES",  # judges.retry
             "INITIAL_BACKOFF_S", "MAX_BACKOFF_S", "MAX_RETRY_AFTER_S", "MAX_RETRIES"}  # (their names before)
    found: dict[str, list[str]] = {k: [] for k in ("table23", "attention_flops", "metrics", "slice_tolerance",
                                                    "special_ids", "retry")}
    for mod, path, tree in _modules(root):
        where = str(path.relative_to(root.parent))
        exported = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)}
        tables = {id(n.value) for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))}
        for node in ast.walk(tree):
            if id(node) in exported:
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, int) and node.value in table23:
                found["table23"].append(f"{where}:{node.lineno}")
            elif isinstance(node, (ast.FunctionDef, ast.Lambda)) and "attention" in getattr(node, "name", "") \
                    and "flops" in node.name:
                found["attention_flops"].append(f"{where}:{node.lineno} def {node.name}")
            elif isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) and len(_literal_strings(node, tables) & metrics) >= 2:
                found["metrics"].append(f"{where}:{node.lineno}")
            elif isinstance(node, ast.Dict) and _literal_strings(node) >= special_keys:
                found["special_ids"].append(f"{where}:{node.lineno}")
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
                if "TOLERANCE" in name and isinstance(node.value, ast.Constant):
                    found["slice_tolerance"].append(f"{where}:{node.lineno} {name}")
                if name in ("PAD_ID", "EOS_ID", "EOC_ID", "MASK_ID") and isinstance(node.value, ast.Constant):
                    found["special_ids"].append(f"{where}:{node.lineno} {name}")
                if name in retry and mod.count(".") >= 1:
                    found["retry"].append(f"{where}:{node.lineno} {name}")
            elif isinstance(node, ast.arguments):
                named = node.args[-len(node.defaults):] if node.defaults else []
                for arg, default in [*zip(named, node.defaults), *zip(node.kwonlyargs, node.kw_defaults)]:
                    if arg.arg == "tolerance" and isinstance(default, ast.Constant) and default.value is not None:
                        found["slice_tolerance"].append(f"{where}:{default.lineno} tolerance={default.value}")
        text = path.read_text()
        for m in re.finditer(r"12(?:\.0)?\s*\*\s*[\w.]*(?:n_layers|\bL)\b", text):
            found["attention_flops"].append(f"{where}:{text[:m.start()].count(chr(10)) + 1} {m.group(0)}")
    return found


# each fact -> the one module allowed to write it out
FACT_HOME = {"table23": "interpscale/paper.py", "attention_flops": "interpscale/paper.py",
             "metrics": "interpscale/paper.py", "slice_tolerance": "interpscale/paper.py",
             "special_ids": "interpscale/models/types.py", "retry": None}


def test_each_fact_is_written_out_once():
    """Table 23's counts, Eq. 23's attention term, the interpretability metric table, the
    slice tolerance and the special ids live in one module each; the judge retry constants
    in one module (whichever it is)."""
    found = fact_copies()
    for fact, home in FACT_HOME.items():
        hits = found[fact]
        if home is None:
            files = {h.split(":")[0] for h in hits}
            assert len(files) <= 1, f"{fact} defined in several modules: {hits}"
            continue
        assert any(h.startswith(home) for h in hits), f"{fact}: nothing found in {home} (the check is blind)"
        strays = [h for h in hits if not h.startswith(home)]
        assert not strays, f"{fact} written out outside {home}: {strays}"


def test_the_fact_check_sees_copies(tmp_path):
    pkg = tmp_path / "interpscale"
    (pkg / "models").mkdir(parents=True)
    (pkg / "models" / "copy.py").write_text(
        "P = 86_500_000\nTOLERANCE = 0.15\nM = ('concept_loss', 'concept_contribution')\n"
        "def attention_flops(L, d, n):\n    return 12.0 * L * d * n\nIDS = {'pad': 0, 'eos': 1, 'eoc': 2, 'mask': 3}\n"
        "def f(rows, tolerance=0.15):\n    return rows\n")
    found = fact_copies(pkg)
    assert all(found[k] for k in ("table23", "attention_flops", "metrics", "slice_tolerance", "special_ids"))
    assert len(found["attention_flops"]) == 2 and len(found["slice_tolerance"]) == 2


# ---- private names ------------------------------------------------------------------------
# private imports another area still has to remove: "file:line" prefix -> the owner who fixes it
PRIVATE_PENDING: dict[str, str] = {}


def private_imports(root: Path = SRC) -> list[str]:
    """``from X import _name`` of another module, and a private submodule (``pkg._mod``)
    imported from outside its package. Bottom modules (``interpscale._atomic`` ...) are public."""
    bad = []
    for mod, path, tree in _modules(root):
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("interpscale"):
                continue
            where = f"{path.relative_to(root.parent)}:{node.lineno}"
            bad += [f"{where}: from {target} import {a.name}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__") and target != "interpscale"]
            parts = target.split(".")
            for i in range(2, len(parts)):
                owner = ".".join(parts[:i])
                if parts[i].startswith("_") and not parts[i].startswith("__") and \
                        not (package + ".").startswith(owner + "."):
                    bad.append(f"{where}: private module {target} imported from {package}")
    return bad


def test_no_module_imports_another_modules_private_name():
    bad = [b for b in private_imports() if not any(b.startswith(p) for p in PRIVATE_PENDING)]
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


def test_the_private_import_check_can_fail(tmp_path):
    pkg = tmp_path / "interpscale"
    for sub in ("a", "b"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "a" / "_impl.py").write_text("X = 1\n_y = 2\n")
    (pkg / "a" / "ok.py").write_text("from interpscale.a._impl import X\nfrom interpscale import _atomic\n")
    (pkg / "b" / "bad.py").write_text("from interpscale.a._impl import X\nfrom interpscale.a.ok import _y\n")
    assert private_imports(pkg) == ["interpscale/b/bad.py:1: private module interpscale.a._impl imported from interpscale.b",
                                    "interpscale/b/bad.py:2: from interpscale.a.ok import _y"]


MAX_FUNCTION_LINES = 80  # CONTRIBUTING: functions fit on a screen; docs/architecture.md lists any exception
LONG_FUNCTION_EXCEPTIONS: dict[str, str] = {}  # "path:function" -> why (also stated in docs/architecture.md)


def too_long(spans, limit: int, exceptions: dict[str, str]) -> list[str]:
    """The (key, lines) spans over ``limit`` that ``exceptions`` does not name, as "key (n lines)"."""
    return [f"{key} ({n} lines)" for key, n in spans if n > limit and key not in exceptions]


def function_spans(root: Path):
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{path.relative_to(root.parent)}:{node.name}", node.end_lineno - node.lineno + 1


def long_functions(root: Path = SRC, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    return too_long(function_spans(root), limit, LONG_FUNCTION_EXCEPTIONS)


def test_no_function_is_over_80_lines():
    bad = long_functions()
    assert not bad, "functions over 80 lines (split them, or say why in docs/architecture.md):\n" + "\n".join(bad)


def test_the_function_length_check_can_fail(tmp_path):
    pkg = tmp_path / "interpscale"
    pkg.mkdir()
    (pkg / "long.py").write_text("def f():\n" + "    x = 1\n" * 81)
    (pkg / "short.py").write_text("def g():\n" + "    x = 1\n" * 79)
    assert long_functions(pkg) == ["interpscale/long.py:f (82 lines)"]


MAX_MODULE_LINES = 900  # rooms by concept: a module may be long when it is one idea (issue 34); this catches a warren's opposite
LONG_MODULE_EXCEPTIONS: dict[str, str] = {}  # "path" -> why (also stated in docs/architecture.md)


def long_modules(root: Path = SRC, limit: int = MAX_MODULE_LINES) -> list[str]:
    spans = ((str(p.relative_to(root.parent)), len(p.read_text().splitlines())) for p in sorted(root.rglob("*.py")))
    return too_long(spans, limit, LONG_MODULE_EXCEPTIONS)


def test_no_module_is_over_900_lines():
    bad = long_modules()
    assert not bad, "modules over 900 lines (split them by concept, or say why in docs/architecture.md):\n" + "\n".join(bad)


def test_the_module_length_check_can_fail(tmp_path):
    pkg = tmp_path / "interpscale"
    pkg.mkdir()
    (pkg / "long.py").write_text("x = 1\n" * 901)
    (pkg / "short.py").write_text("x = 1\n" * 900)
    assert long_modules(pkg) == ["interpscale/long.py (901 lines)"]


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    """module -> the package modules it imports (inside functions too; `from pkg import submodule` is the submodule)."""
    mods = {module_name(p, root): p for p in root.rglob("*.py")}
    graph = {}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        out = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                out |= {f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target for a in node.names}
        graph[mod] = {t for t in out if t in mods and t != mod}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        comp.append(member)
                        if member == node:
                            break
                    if len(comp) > 1:
                        cycles.append(sorted(comp))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return cycles


def test_no_import_cycle_among_modules():
    cycles = import_cycles(import_graph())
    assert not cycles, "modules that import each other (directly or in a ring):\n" + "\n".join(map(" <-> ".join, cycles))


def test_the_cycle_check_can_fail(tmp_path):
    pkg = tmp_path / "interpscale"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("def f():\n    from interpscale.a import y\n")
    (pkg / "a" / "y.py").write_text("from . import z\n")
    (pkg / "a" / "z.py").write_text("import interpscale.a.x\n")
    (pkg / "b.py").write_text("from interpscale.a import x\n")
    assert import_cycles(import_graph(pkg)) == [["interpscale.a.x", "interpscale.a.y", "interpscale.a.z"]]
