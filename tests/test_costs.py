"""engine/costs.py: every cost the time models charge has a source note, a
kind, and a low/central/high that make sense for that kind; nothing numeric hides in the
module outside a `Cost`."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import mmuscope.engine.costs as costs
import pytest
from mmuscope.engine.claims.registry import TABLES
from mmuscope.engine.claims.table import ClaimTable, fmt_number
from mmuscope.engine.costs import (
    CONFIG,
    COSTS,
    ESTIMATE,
    EXACT_KINDS,
    FITTED,
    KINDS,
    MEASURED,
    Cost,
)

from tests.test_bench_claims import tables  # noqa: F401  (the shared quick run)

ROOT = Path(__file__).resolve().parent.parent
MIN_SOURCE = 60  # characters: a sentence saying where the number comes from


def test_every_module_constant_is_a_sourced_cost() -> None:
    """Read the module's text: each top-level assignment of an upper-case name is either
    a `Cost` built by `_cost`/`_exact` (and so carries a source) or one of the module's
    vocabulary strings and tables."""
    tree = ast.parse(inspect.getsource(costs))
    vocabulary = {"KERNEL", "THREAD", "HARDWARE", "MEASURED", "ESTIMATE", "KINDS", "EXACT_KINDS"}
    vocabulary |= {"CONFIG", "FITTED"}
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
        # a spread is needed; the central may sit on a bound the source itself gives
        assert cost.low <= cost.central <= cost.high, f"{name}: central outside its band"
        assert cost.low < cost.high, f"{name}: an estimate needs a low and a high"
    if cost.kind == CONFIG:  # the era's usual values of a build option
        assert cost.low < cost.high, f"{name}: a config option needs its values"
    if cost.kind in (MEASURED, FITTED):  # a measurement or a fit made here names its script
        scripts = [w for w in cost.source.split() if w.startswith("benchmarks/")]
        assert scripts and all((ROOT / w.rstrip(".,;)")).exists() for w in scripts)
    if cost.kind == FITTED:  # and the one row it was fitted on
        assert "fitted on" in cost.source.lower(), f"{name}: which row was it fitted on?"


def _range(cost: Cost) -> str:
    values = (cost.low, cost.central, cost.high)
    if cost.low == cost.high:
        return fmt_number(cost.central)
    return " – ".join(fmt_number(v) for v in values)


@pytest.mark.parametrize("name", sorted(COSTS))
def test_docs_bench_lists_each_parameter_with_its_range_and_kind(name: str) -> None:
    """docs/bench.md §5: every parameter a band may use, with the range engine/costs.py
    gives it, its kind and a source (a parameter's range cited where a reader finds it)."""
    text = (ROOT / "docs" / "bench.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith(f"| `{name}` |")]
    assert len(rows) == 1, f"{name} is not in docs/bench.md's table"
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    cost = COSTS[name]
    assert cells[1:4] == [cost.unit, _range(cost), cost.kind], rows[0]
    assert len(cells[4]) >= MIN_SOURCE // 2, f"{name}: no source in docs/bench.md"


def test_at_most_one_parameter_is_fitted_and_nothing_else_is() -> None:
    fitted = [name for name, cost in COSTS.items() if cost.kind == FITTED]
    assert fitted == []  # the PV-flush table's start phases are drawn over a CFS period


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


def test_every_cost_a_table_names_exists(tables: dict[str, Any]) -> None:  # noqa: F811
    """Each timed table says which costs it charges; each is defined here (the cheap
    tables of the shared quick run; tlb_flush's are listed in its module)."""
    from mmuscope.engine.tlbflush import config

    for name in ("zap", "ppc_keys", "shadow_2011"):
        assert name in TABLES
        table = ClaimTable.from_json(name, tables[name])
        named = table.extra.get("time_costs") or [
            word.rstrip(",")
            for row in table.rows
            for word in str(row[table.columns.index("sources")] or "").split()
            if word.rstrip(",").isupper() and "_" in word
        ]
        assert named and set(named) <= set(COSTS), name
    assert int(COSTS["EXIT_NS"].central) == config.EXIT_NS
    assert int(COSTS["EBIZZY_RECORD_NS"].central) == config.WORK_NS
