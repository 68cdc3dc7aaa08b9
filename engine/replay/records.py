"""The records of a replayed MMU (engine.replay.model): a shadow page as a trace shows
it, its hash key, MMIO and TDP sptes, generation flips, per-vCPU counts, and what an spte
value is (`classify`).  All immutable, so a model's snapshot can share them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..events import FieldValue
from ..mmu.spte import (
    SPTE_CONFIGS,
    SPTE_LEVEL_BITS,
    SPTE_MMU_PRESENT_MASK,
    is_large_pte,
    is_mmio_spte,
)

MAX_PAGES = 16384
MAX_TDP_SPTES = 16384
MAX_MMIO_SPTES = 4096
MAX_COUNT_KEYS = 4096  # (name, cpu, pid) triples; beyond, (name, -1, -1)
MAX_VCPUS = 4096  # KVM_MAX_VCPUS on x86
MAX_FLIPS = 32  # generation flips remembered (the latest)
ROLE_WORD_INVALID = 1 << 11  # role.invalid in role.word (docs/kvm.md §4.2)

# The role fields any printk variant shows (tracepoints.py); `invalid`, `root_count`,
# `unsync` and `created` are state, not identity.
ROLE_FIELDS = (
    *("level", "gpte_bytes", "quadrant", "direct", "access", "nxe", "ad"),
    *("pae", "wp", "smep", "smap", "smm", "role"),
)
PageKey = tuple[int, int | None, tuple[tuple[str, FieldValue], ...]]
TdpKey = tuple[int, int, int]  # (as_id, level, gfn)

NONE, TABLE, LEAF, LARGE, MMIO = "none", "nonleaf", "leaf", "large", "mmio"
_EPT = SPTE_CONFIGS["ept"]
_LEGACY = SPTE_CONFIGS["shadow"]


def classify(spte: int, level: int) -> str:
    """What an spte at `level` is: an MMIO spte of either layout (EPT misconfig value, or
    bit 51 + P) unless MMU-present (bit 11); not present when neither bit 11 nor an
    R/W/X (P) bit is set; else a 4K leaf, a huge leaf or a table by level and bit 7.
    Sptes of kernels before the MMU-present bit count as present when they carry an
    R/W/X or P bit (an assumption).  `SHADOW_NONPRESENT_VALUE` (BIT(63), 6.10+) and
    `FROZEN_SPTE` (BIT(63) | 0x5a0) are not present: neither bit 11 nor an R/W/X bit."""
    present = bool(spte & SPTE_MMU_PRESENT_MASK)
    if not present and (is_mmio_spte(_EPT, spte) or is_mmio_spte(_LEGACY, spte)):
        return MMIO
    if not present and not spte & 0x7:
        return NONE
    if level <= 1:
        return LEAF
    return LARGE if is_large_pte(spte) else TABLE


def gfns_per_spte(level: int) -> int:
    """Guest frames one spte at `level` maps (KVM_PAGES_PER_HPAGE): 512^(level-1)."""
    return 1 << SPTE_LEVEL_BITS * max(0, min(level, 5) - 1)


def page_key(fields: Mapping[str, FieldValue]) -> PageKey | None:
    """The hash key of the page a shadow-page event names, or None without a gfn."""
    gfn = fields.get("gfn")
    if not isinstance(gfn, int):
        return None
    gen = fields.get("gen")
    role = tuple((name, _identity(name, fields[name])) for name in ROLE_FIELDS if name in fields)
    return gfn, gen if isinstance(gen, int) else None, role


def _identity(name: str, value: FieldValue) -> FieldValue:
    """A role field as identity: the role word without its `invalid` bit."""
    if name == "role" and isinstance(value, int):
        return value & ~ROLE_WORD_INVALID
    return value


def _int(fields: Mapping[str, FieldValue], name: str) -> int | None:
    value = fields.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class ReplayPage:
    """One `kvm_mmu_page` as the trace shows it."""

    key: PageKey
    level: int | None  # None when the printk hides it (the plugin's role WORD)
    direct: bool
    access: int | None
    seq: int  # order of appearance in the replay
    ts: float
    copies: int = 1  # created again under the same key before a zap (e.g. SMM and not)
    adopted: bool = False  # first seen as "existing": created before the trace started
    epoch: int = 0  # fast zaps seen before it appeared

    @property
    def gfn(self) -> int:
        return self.key[0]

    @property
    def gen(self) -> int | None:
        return self.key[1]


@dataclass(frozen=True, slots=True)
class MmioSpte:
    gfn: int
    gen: int  # the 19-bit memslots generation stored in the spte (§5.1)
    access: int
    ts: float
    epoch: int  # fast zaps seen before it was cached


@dataclass(frozen=True, slots=True)
class TdpSpte:
    spte: int
    kind: str
    old: int  # the spte before this change
    ts: float


@dataclass(frozen=True, slots=True)
class GenFlip:
    ts: float
    old: int
    new: int
    used_pages: int | None


@dataclass(frozen=True, slots=True)
class VcpuCounts:
    exits: int = 0
    entries: int = 0
    faults: int = 0
    fast_fixed: int = 0
    fast_spurious: int = 0


@dataclass(frozen=True, slots=True)
class ModelSnapshot:
    """A copy of a `ReplayModel`'s state (dicts copied, values shared: all immutable)."""

    tables: dict[str, dict[Any, Any]]
    scalars: dict[str, object]

    def size(self) -> int:
        """Entries held (what a checkpoint costs)."""
        return sum(len(table) for table in self.tables.values())


def page_words(page: ReplayPage) -> str:
    """A page in a few words, as the replay's last-change line tells it."""
    level = f"l{page.level}" if page.level is not None else "l?"
    gen = f" gen {page.gen}" if page.gen is not None else ""
    return f"gfn {page.gfn:#x} {level}{' direct' if page.direct else ''}{gen}"
