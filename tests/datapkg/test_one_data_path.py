"""Issue 30's "one way" for data, checked on the source: the special tokens and their default
ids are stated once (models/types.py), one tokenizer loader reads tokenizer files
(data/tokenizer.py), one function turns a [data] table into a CorpusConfig (data/corpus.py)."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "interpscale"
SPECIAL = {"[PAD]", "[EOS]", "[EOC]", "[MASK]"}


def _facts(tree: ast.AST) -> set[str]:
    """Which of the data facts a module's code (not its docstrings or messages) states."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in SPECIAL:
            found.add("special tokens")
        elif isinstance(node, ast.Dict) and {getattr(k, "value", None) for k in node.keys} >= {"pad", "eos", "eoc",
                                                                                            "mask"}:
            found.add("special ids")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "from_file" \
                and getattr(node.func.value, "id", "") == "Tokenizer":
            found.add("tokenizer loader")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "CorpusConfig" \
                and any(k.arg is None for k in node.keywords):
            found.add("corpus config conversion")
    return found


def test_data_facts_are_stated_once():
    where: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for fact in _facts(ast.parse(path.read_text())):
            where.setdefault(fact, []).append(str(path.relative_to(SRC)))
    # models/checkpoint.py reads a run's tokenizer.json as written (no specials added) to put it in an
    # export: models may not import data (docs/architecture.md), so it cannot call data.load_tokenizer
    assert where == {"special tokens": ["models/types.py"], "special ids": ["models/types.py"],
                     "tokenizer loader": ["data/tokenizer.py", "models/checkpoint.py"],
                     "corpus config conversion": ["data/corpus.py"]}


def test_the_check_can_fail():
    copy = ast.parse('from tokenizers import Tokenizer\nIDS = {"pad": 0, "eos": 1, "eoc": 2, "mask": 3}\n'
                     'tok = Tokenizer.from_file("t.json")\ncfg = CorpusConfig(**fields)\nEOC = "[EOC]"\n')
    assert _facts(copy) == {"special tokens", "special ids", "tokenizer loader", "corpus config conversion"}
    assert _facts(ast.parse('"""Our [PAD] token."""\nx = 1\n')) == set()
