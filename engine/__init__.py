"""mmuscope's engine: a pure-Python model of KVM's MMU, starting with memslots.

Never imports textual or rich (a test checks).  The names below are its public API
(docs/architecture.md §6.2): a VM's memslots as KVM_SET_USER_MEMORY_REGION makes them,
looked up by any of the strategies KVM has used.  Value types are frozen slotted
dataclasses; a `NamedTuple` where a record is made in bulk in an inner loop or used as a
tuple.
"""

from __future__ import annotations

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
