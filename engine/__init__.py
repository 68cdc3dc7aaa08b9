"""mmuscope's engine: a pure-Python model of KVM's MMU, starting with memslots.

Never imports textual or rich (a test checks).  Public API: docs/architecture.md §6.2.

The names are exported lazily (PEP 562 `__getattr__`): `from engine import Vm` imports
`engine.vm` then, and `import engine.mmu.tdp_session` (`mmuscope simulate`) loads no
lookup strategy, no `Vm` machinery it does not use (`mmuscope simulate` starts faster).
tests/test_engine_exports.py checks every name below against its module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# name -> the module (under engine) that defines it
_EXPORTS: dict[str, str] = {
    "KVM_MEM_GUEST_MEMFD": "memslots.constants",
    "KVM_MEM_LOG_DIRTY_PAGES": "memslots.constants",
    "KVM_MEM_MAX_NR_PAGES": "memslots.constants",
    "KVM_MEM_READONLY": "memslots.constants",
    "KVM_MEM_SLOTS_NUM": "memslots.constants",
    "KVM_USER_MEM_SLOTS": "memslots.constants",
    "PAGE_SHIFT": "memslots.constants",
    "PAGE_SIZE": "memslots.constants",
    "AuditError": "errors",
    "KvmError": "errors",
    "Event": "events",
    "LOOKUP_STRATEGIES": "lookup",
    "LookupTrace": "lookup.base",
    "MemorySlot": "memslots.memslot",
    "Vm": "memslots.vm",
}
# the submodules `import mmuscope.engine` used to load (and so to make attributes of the package)
_SUBMODULES = frozenset({"errors", "events", "lookup", "memslots"})

if TYPE_CHECKING:
    from .errors import AuditError, KvmError
    from .events import Event
    from .lookup import LOOKUP_STRATEGIES
    from .lookup.base import LookupTrace
    from .memslots.constants import (
        KVM_MEM_GUEST_MEMFD,
        KVM_MEM_LOG_DIRTY_PAGES,
        KVM_MEM_MAX_NR_PAGES,
        KVM_MEM_READONLY,
        KVM_MEM_SLOTS_NUM,
        KVM_USER_MEM_SLOTS,
        PAGE_SHIFT,
        PAGE_SIZE,
    )
    from .memslots.memslot import MemorySlot
    from .memslots.vm import Vm


def __getattr__(name: str) -> object:
    """An exported name (or a submodule `import engine` used to load), imported now and
    kept in the package's namespace, so each is looked up once."""
    from importlib import import_module

    if name in _EXPORTS:
        value = getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    elif name in _SUBMODULES:
        value = import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_SUBMODULES})


__all__ = [
    "KVM_MEM_GUEST_MEMFD",
    "KVM_MEM_LOG_DIRTY_PAGES",
    "KVM_MEM_MAX_NR_PAGES",
    "KVM_MEM_READONLY",
    "KVM_MEM_SLOTS_NUM",
    "KVM_USER_MEM_SLOTS",
    "LOOKUP_STRATEGIES",
    "PAGE_SHIFT",
    "PAGE_SIZE",
    "AuditError",
    "Event",
    "KvmError",
    "LookupTrace",
    "MemorySlot",
    "Vm",
]
