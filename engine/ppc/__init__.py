"""POWER's hash page table under Book3S HV KVM, and the POWER-keys thread's key-fault
proposal.

Modules: `hpte` (HPTE bits and kinds), `hpt` (groups of 8, the primary/secondary hash,
`kvmppc_hv_find_lock_hpte`'s search), `keys` (page-class keys, the AMR, the eras
``"2014-keys"`` and ``"today"``), `faults` (classifying an HDSI: forwarded, emulated,
paged in), `machine` (the hypervisor: hcalls, the HDSI handler, host reclaim), `guest`
(the guest kernel's hash_page and flushes), `pfault` (the thread's benchmark program),
`views` (the searched groups as dot).  The `ppc_keys` bench table is claims/ppc_keys.py.
"""

from __future__ import annotations

from .faults import EMULATED, FORWARDED, OUTCOMES, PAGED_IN, FaultRecord, Phase
from .hpt import KVM_DEFAULT_HPT_ORDER, HashPageTable, SearchResult
from .hpte import KINDS, Hpte
from .keys import DEFAULT_ERA, ERAS, Amr, PpcEra, era_of, key_conflict
from .machine import PpcCounters, PpcMachine
from .pfault import PFAULT, PRESSURE, PfaultProgram, PfaultRun

__all__ = [
    "DEFAULT_ERA",
    "EMULATED",
    "ERAS",
    "FORWARDED",
    "KINDS",
    "KVM_DEFAULT_HPT_ORDER",
    "OUTCOMES",
    "PAGED_IN",
    "PFAULT",
    "PRESSURE",
    "Amr",
    "FaultRecord",
    "HashPageTable",
    "Hpte",
    "PfaultProgram",
    "PfaultRun",
    "Phase",
    "PpcCounters",
    "PpcEra",
    "PpcMachine",
    "SearchResult",
    "era_of",
    "key_conflict",
]
