"""The lazily exported names (PEP 562 `__getattr__` in `engine` and `engine.lookup`, for a
faster start-up) are the public API of docs/architecture.md §6.2, each the object of the
module that defines it, and the literal tables that stand in for imports at start-up
are what they name."""

from __future__ import annotations

import errno
import importlib
import subprocess
import sys

import mmuscope.engine as engine
import pytest


def test_the_contracts_names_import_and_behave() -> None:
    from mmuscope.engine import (
        KVM_MEM_GUEST_MEMFD,
        KVM_MEM_LOG_DIRTY_PAGES,
        KVM_MEM_READONLY,
        KVM_USER_MEM_SLOTS,
        LOOKUP_STRATEGIES,
        KvmError,
        MemorySlot,
        Vm,
    )

    assert KVM_USER_MEM_SLOTS == 32764
    assert {"linear", "size-sorted", "binary", "wbtree", "rbtree"} <= set(LOOKUP_STRATEGIES)
    assert len({KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY, KVM_MEM_GUEST_MEMFD}) == 3
    assert issubclass(KvmError, OSError)
    with pytest.raises(ValueError):
        Vm(lookup="no-such-strategy")
    for strategy in LOOKUP_STRATEGIES:
        vm = Vm(lookup=strategy)
        vm.set_user_memory_region(0, 0, 0x10_0000, 0x20_0000, 0x7F00_0000_0000)
        (slot,) = vm.memslots(0)
        assert isinstance(slot, MemorySlot) and vm.gfn_to_memslot(0x100) == slot
        with pytest.raises(KvmError) as refused:
            vm.set_user_memory_region(1, 0, 0x10_0000, 0x1000, 0x7F00_0010_0000)
        assert refused.value.errno == errno.EEXIST


def test_every_export_is_its_modules_object() -> None:
    assert sorted(engine.__all__) == sorted(engine._EXPORTS)
    for name, module in engine._EXPORTS.items():
        assert getattr(engine, name) is getattr(
            importlib.import_module(f"mmuscope.engine.{module}"), name
        )
    for name in engine._SUBMODULES:
        assert getattr(engine, name) is importlib.import_module(f"mmuscope.engine.{name}")
    assert set(engine.__all__) <= set(dir(engine))
    with pytest.raises(AttributeError):
        engine.no_such_name  # noqa: B018
    for name in engine.lookup.__all__:
        assert getattr(engine.lookup, name) is not None
    with pytest.raises(AttributeError):
        engine.lookup.no_such_name  # noqa: B018


def test_the_lookup_table_names_each_strategy_class() -> None:
    from mmuscope.engine.lookup import LOOKUP_STRATEGIES, STRATEGY_CLASSES, make_strategy

    assert tuple(STRATEGY_CLASSES) == LOOKUP_STRATEGIES
    for name, cls in STRATEGY_CLASSES.items():
        assert cls.name == name and type(make_strategy(name)) is cls
    with pytest.raises(ValueError, match="unknown lookup strategy 'nope'"):
        make_strategy("nope")


def test_the_explorer_options_name_the_engines_workloads() -> None:
    from mmuscope.engine.memslots.workload import DEFAULT_WORKLOAD, WORKLOADS
    from mmuscope.tui.cliparts import DEFAULT_EXPLORER_WORKLOAD, EXPLORER_WORKLOADS

    assert tuple(WORKLOADS) == EXPLORER_WORKLOADS
    assert DEFAULT_EXPLORER_WORKLOAD == DEFAULT_WORKLOAD


def test_import_engine_loads_what_is_used() -> None:
    """`import engine` loads none of its submodules; a name, only its own module; a VM
    that keeps only the structure it looks up with, only the rbtree among the strategies."""
    code = (
        "import sys\nimport mmuscope.engine as engine\n"
        "def loaded(): return sorted(m for m in sys.modules if m.startswith('mmuscope.engine.'))\n"
        "print(loaded())\n"
        "from mmuscope.engine import KVM_USER_MEM_SLOTS\n"
        "print(loaded())\n"
        "engine.Vm(track_all=False)\n"
        "print([m for m in loaded() if m.startswith('mmuscope.engine.lookup.')])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    bare, constants, strategies = result.stdout.splitlines()
    assert bare == "[]"
    assert constants == "['mmuscope.engine.memslots', 'mmuscope.engine.memslots.constants']"
    lookup = "mmuscope.engine.lookup"
    assert strategies == f"['{lookup}.base', '{lookup}.bst', '{lookup}.rbtree']"
