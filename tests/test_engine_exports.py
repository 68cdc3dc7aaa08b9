"""The engine's public names (docs/architecture.md §6.2) import and behave as documented;
`engine.lookup`'s lazily exported names (PEP 562 `__getattr__`: a strategy's module is
imported when it is made) are the objects of the modules that define them."""

from __future__ import annotations

import errno
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


def test_every_export_is_there() -> None:
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


def test_a_vm_loads_only_the_strategy_it_looks_up_with() -> None:
    """A VM that keeps only the structure it looks up with imports only the rbtree among
    the strategies."""
    code = (
        "import sys\nimport mmuscope.engine as engine\n"
        "engine.Vm(track_all=False)\n"
        "print(sorted(m for m in sys.modules if m.startswith('mmuscope.engine.lookup.')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lookup = "mmuscope.engine.lookup"
    assert result.stdout == f"['{lookup}.base', '{lookup}.bst', '{lookup}.rbtree']\n"
