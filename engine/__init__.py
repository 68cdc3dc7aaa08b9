"""mmuscope's engine: a pure-Python model of KVM's MMU, starting with memslots.

Never imports textual or rich (a test checks).  Public API per CONTRACT.md.
"""

from __future__ import annotations

from .constants import (
    KVM_MEM_GUEST_MEMFD,
    KVM_MEM_LOG_DIRTY_PAGES,
    KVM_MEM_MAX_NR_PAGES,
    KVM_MEM_READONLY,
    KVM_MEM_SLOTS_NUM,
    KVM_USER_MEM_SLOTS,
    PAGE_SHIFT,
    PAGE_SIZE,
)
from .errors import AuditError, KvmError
from .events import Event
from .lookup import LOOKUP_STRATEGIES
from .lookup.base import LookupTrace
from .memslot import MemorySlot
from .vm import Vm

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
