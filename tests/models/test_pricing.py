"""Measured pricing (models.pricing): Eq. 23/24 recovered from the module on the meta device,
one meta build per size for a family without formulas, and the plan table saying which."""

from __future__ import annotations

import pytest

from interpscale.models import FAMILIES, flops_per_token, params_nonembedding, register_family
from interpscale.models.pricing import BUILDS, price
from interpscale.models.protocol import DataFields


@pytest.mark.parametrize("family,size", [("ar", "85M"), ("cdlm", "85M"), ("ar+concept", "85M"),
                                         ("cdlm+concept", "85M"), ("ar", "1.5B"), ("cdlm", "1.5B")])
def test_measured_equals_eq23_24(family, size):
    """Counted matmul FLOPs (+ Eq. 23's attention term, - the LM head) = the analytic count
    within 1% at Table 23's sizes, built on the meta device. (+Concept: the stable phase runs
    Eq. 24 - 6dn + 6Rm -- top-k known embeddings, dense U -- which cancel at 85M; docs/own-model.md.)"""
    seq_len = 256
    data = DataFields(vocab_size=1024)
    m = price(family, size, seq_len, data=data, measure=True)
    assert m.how == "measured" and m.params == params_nonembedding(family, size, data=data)
    assert m.flops_per_token == pytest.approx(flops_per_token(family, size, seq_len, data=data), rel=0.01)


def test_a_formula_less_family_is_priced_on_the_meta_device_once_per_size():
    """A 16-row plan (4 sizes x 4 slices) of a family without formulas builds each size once,
    every build on the meta device, and the table says "measured" (ar's rows "analytic")."""
    from interpscale.models.zoo.gpt2 import GPTLM
    from interpscale.models.zoo import zoo_config
    from interpscale.orchestration import PlanOptions, Preset, plan

    devices = []

    def build(size, *, data=DataFields(), **overrides):
        cfg = zoo_config("crate-gpt", size, data=data, **overrides)
        cfg.family = "_formula_less"
        model = GPTLM(cfg)
        devices.append(next(model.parameters()).device.type)
        return model

    register_family("_formula_less", build, overwrite=True)
    try:
        before = BUILDS["count"]
        tree = Preset.load(Preset(), families=["_formula_less", "ar"], sizes=["nano", "micro", "tiny", "mini"],
                           slices=[4e9, 8e9, 1.6e10, 3.2e10], seq_len=32, batch_tokens=256, tolerance=0.5,
                           vocab_size=256)
        p = plan(tree, PlanOptions(flops_per_s=1e12, strict=False, all_sizes=True))
        rows = p.table[p.table["family"] == "_formula_less"]
        assert len(rows) == 16 and set(rows["pricing"]) == {"measured"}
        assert set(p.table.loc[p.table["family"] == "ar", "pricing"]) == {"analytic"}
        assert BUILDS["count"] - before == 4 and devices == ["meta"] * 4
        # the measured price is GPT-2's own count (6P + 12·L·d·N) within the norms' share
        for size in ("mini",):  # biases and norms (no matmul FLOPs) are <1% of P from d = 128
            got = price("_formula_less", size, 32, data=DataFields(vocab_size=256))
            want = flops_per_token("crate-gpt", size, 32, data=DataFields(vocab_size=256))
            assert got.how == "measured" and got.flops_per_token == pytest.approx(want, rel=0.02)
            assert got.params == params_nonembedding("crate-gpt", size, data=DataFields(vocab_size=256))
    finally:
        FAMILIES.pop("_formula_less")


def test_unknown_family_says_where_it_looked_and_how_to_register():
    from interpscale.errors import UserError
    from interpscale.models import get_family

    with pytest.raises(UserError, match=r"unknown family 'gated-gtp'.*interpscale\.families.*--plugin MODULE"):
        get_family("gated-gtp")


def test_model_knobs_are_checked_per_family():
    from interpscale.errors import UserError
    from interpscale.models.registry import check_model_table, family_overrides

    table = {"vocab_size": 256, "mlp_ratio": 3.0, "mxd": {"k": 8}}
    check_model_table(table, ["ar", "mxd"])
    assert family_overrides(table, "mxd") == {"vocab_size": 256, "k": 8}  # mlp_ratio is not an mxd field
    assert family_overrides(table, "ar") == {"vocab_size": 256, "mlp_ratio": 3.0}
    with pytest.raises(UserError, match=r"\[model\.mxd\]: unknown key 'kk' \(did you mean 'k'\?\)"):
        check_model_table({"mxd": {"kk": 8}}, ["mxd"])
    with pytest.raises(UserError, match=r"unknown key 'gate'.*\[model\.<family>\]"):
        check_model_table({"gate": "headwise"}, ["ar", "mxd"])


def test_per_family_knobs_reach_their_family_only(tmp_path):
    """docs/zoo.md's `[model.mxd] k = 8` (or a shared `[model] k = 8`, which only mxd's config
    has): planned and priced for mxd alone, the LM head read off each family's own config; a
    key no planned family has is refused with a close match."""
    from interpscale.errors import ConfigError
    from interpscale.orchestration import PlanOptions, Preset, plan

    base = ('[plan]\nfamilies = ["ar", "mxd"]\nsizes = ["nano", "micro"]\nseq_len = 32\nbatch_tokens = 256\n'
            'slices = [2e9]\ntolerance = 0.5\n[train]\nvocab_size = 256\n[model]\nvocab_size = 256\n')
    own, shared, bad = tmp_path / "own.toml", tmp_path / "shared.toml", tmp_path / "bad.toml"
    own.write_text(base + "[model.mxd]\nk = 8\n")
    shared.write_text(base + "k = 8\n")
    bad.write_text(base + "kk = 8\n")
    for preset in (own, shared):
        p = plan(preset, PlanOptions(flops_per_s=1e12, strict=False))
        by_family = {r.family: r.model_overrides for r in p.runs}
        assert by_family["mxd"]["k"] == 8 and "k" not in by_family["ar"]
        assert set(p.table["M_head"]) == {6.0 * 32 * 256, 6.0 * 64 * 256}  # 6·d·V, d of nano and micro
    with pytest.raises(ConfigError, match=r"unknown key 'kk' \(did you mean 'k'\?\).*\[model\.<family>\]"):
        plan(bad, PlanOptions(flops_per_s=1e12, strict=False))


def test_no_import_cycle_in_models():
    """Issue 34: pricing, protocol and registry imported each other in a circle. Every import
    among ``interpscale.models`` modules (module level or inside a function; ``from
    interpscale.models import X`` is the submodule X where X is one, else the package) forms a DAG."""
    import ast
    from pathlib import Path

    import interpscale.models as pkg

    root = Path(pkg.__file__).parent
    names = {".".join(("interpscale", "models", *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
             for p in root.rglob("*.py")}
    graph = {}
    for p in root.rglob("*.py"):
        name = ".".join(("interpscale", "models", *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
        deps = set()
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("interpscale.models"):
                subs = {f"{node.module}.{a.name}" for a in node.names} & names
                deps |= subs if len(subs) == len(node.names) else subs | {node.module}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in names}
        graph[name] = deps - {name}

    state: dict[str, int] = {}

    def visit(n, path):
        state[n] = 1
        for d in graph.get(n, ()):
            assert state.get(d) != 1, f"import cycle: {' -> '.join(path[path.index(d):] + [d]) if d in path else d}"
            if d not in state:
                visit(d, path + [d])
        state[n] = 2

    for n in graph:
        if n not in state:
            visit(n, [n])
