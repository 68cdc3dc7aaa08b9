"""engine/costs.py: every cost the time models charge has a source note, a
kind, and a low/central/high that make sense for that kind; nothing numeric hides in the
module outside a `Cost`."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import mmuscope.engine.costs as costs
import pytest
from mmuscope.engine.claims.registry import TABLES, run_table
from mmuscope.engine.costs import COSTS, ESTIMATE, EXACT_KINDS, KINDS, MEASURED, Cost

ROOT = Path(__file__).resolve().parent.parent
MIN_SOURCE = 60  # characters: a sentence saying where the number comes from


def test_every_module_constant_is_a_sourced_cost() -> None:
    """Read the module's text: each top-level assignment of an upper-case name is either
    a `Cost` built by `_cost`/`_exact` (and so carries a source) or one of the module's
    vocabulary strings and tables."""
    tree = ast.parse(inspect.getsource(costs))
    vocabulary = {"KERNEL", "THREAD", "HARDWARE", "MEASURED", "ESTIMATE", "KINDS", "EXACT_KINDS"}
    vocabulary |= {"LEVELS", "COSTS"}
    for node in tree.body:
        if not isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            for name in names:
                assert isinstance(name, ast.Name)
                if not name.id.isupper() or name.id in vocabulary:
                    continue
                value = node.value
                assert isinstance(value, ast.Call) and isinstance(value.func, ast.Name), name.id
                assert value.func.id in ("_cost", "_exact"), f"{name.id} is not a sourced Cost"
                assert isinstance(getattr(costs, name.id), Cost)
                assert COSTS[name.id] is getattr(costs, name.id)


@pytest.mark.parametrize("name", sorted(COSTS))
def test_each_cost_has_a_source_note(name: str) -> None:
    cost = COSTS[name]
    assert cost.name == name and cost.kind in KINDS and cost.unit
    assert len(cost.source) >= MIN_SOURCE, f"{name}: the source note is too short"
    if cost.kind in EXACT_KINDS:
        assert cost.low == cost.central == cost.high
    if cost.kind == ESTIMATE:
        # a spread is needed; the central may sit on a bound the source itself gives (one
        # "pci rom read" in the fast-zap thread is one zap, and a run cannot zap less
        # than once)
        assert cost.low <= cost.central <= cost.high, f"{name}: central outside its band"
        assert cost.low < cost.high, f"{name}: an estimate needs a low and a high"
    if cost.kind == MEASURED:  # a measurement made here names its benchmark
        scripts = [w for w in cost.source.split() if w.startswith("benchmarks/")]
        assert scripts and all((ROOT / w.rstrip(".,;)")).exists() for w in scripts)


def test_a_cost_without_a_source_or_a_band_is_refused() -> None:
    with pytest.raises(ValueError):
        Cost("X", "ns", 2.0, 1.0, 3.0, ESTIMATE, "low above central")
    with pytest.raises(ValueError):
        Cost("X", "ns", 1.0, 2.0, 3.0, "kernel", "a kernel constant has one value")
    with pytest.raises(ValueError):
        Cost("X", "ns", 1.0, 1.0, 1.0, "guess", "not a kind")
    assert COSTS["EXIT_NS"].at("low") < COSTS["EXIT_NS"].at("high")
    with pytest.raises(ValueError):
        COSTS["EXIT_NS"].at("middle")


def test_every_cost_a_table_names_exists() -> None:
    """Each timed table says which costs it charges; each is defined here (quick runs of
    the cheap tables; tlb_flush's are listed in its module)."""
    from mmuscope.engine.tlbflush import config

    for name in ("zap", "ppc_keys", "shadow_2011"):
        assert name in TABLES
        table = run_table(name, quick=True)
        named = table.extra.get("time_costs") or [
            c
            for row in table.rows
            for c in str(row[table.columns.index("model_inputs")]).split(", ")
        ]
        assert named and set(named) <= set(COSTS), name
    assert int(COSTS["EXIT_NS"].central) == config.EXIT_NS
    assert int(COSTS["EBIZZY_RECORD_NS"].central) == config.WORK_NS
