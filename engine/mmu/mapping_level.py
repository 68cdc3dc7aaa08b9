"""The level a page fault maps at, shared by the TDP MMU, the direct MMU (EPT/NPT with
tdp_mmu=N) and the shadow MMU: `struct kvm_page_fault`'s levels and how mmu.c sets them.

torvalds/linux 6.17/6.18 `arch/x86/kvm/mmu/mmu.c`:
- `kvm_mmu_max_mapping_level()` / `__kvm_mmu_max_mapping_level()`: from `max_level`
  (capped at `max_huge_page_level`, 1G on hosts with 1G EPT/NPT pages) down, the first
  level whose `lpage_info_slot(gfn, slot, level)->disallow_lpage` is 0, then capped by
  `host_pfn_mapping_level()`: the size of the host's own mapping of the page (a PUD leaf
  1G, a PMD leaf 2M, else 4K).  The model has no host page tables: the host backs every
  memslot alike (`host_level`: 4K pages, THP 2M or hugetlbfs 1G).
- `disallow_lpage` (`kvm_alloc_memslot_metadata()`, kvm_main/x86.c): a huge page at the
  slot's head or tail that the slot does not cover whole, or every one when `base_gfn` and
  `userspace_addr` are aligned differently for that size (`lpage_limits`); the shadow
  MMU also raises it for a shadowed table's gfn (`kvm_mmu_gfn_disallow_lpage`:
  `ShadowLpageInfo` in shadow/huge.py overrides `lpage_allowed`).
- `kvm_mmu_hugepage_adjust()`: `huge_page_disallowed = exec && nx_huge_page_workaround`;
  nothing above 4K for a max level of 4K, a fault with no slot (`is_error_noslot_pfn`) or
  a slot that logs dirty pages (`kvm_slot_dirty_track_enabled`); else `req_level` =
  the max mapping level and, unless 4K or disallowed, `goal_level` = `req_level` and the
  pfn is rounded down to it.
- `disallowed_hugepage_adjust()`: at the goal level, a present non-leaf spte whose child
  was made for a disallowed NX huge page (`nx_huge_page_disallowed`) cannot be replaced
  by a huge leaf (the leaf could be executable): go one level further down.
"""

from __future__ import annotations

from collections.abc import Callable

from ..memslots.memslot import MemorySlot
from .role import PG_LEVEL_1G, PG_LEVEL_2M, PG_LEVEL_4K
from .spte import KVM_MAX_HUGEPAGE_LEVEL, KVM_PFN_NOSLOT, is_large_pte, is_shadow_present_pte

PAGE_SHIFT = 12
LEVEL_NAMES = {PG_LEVEL_4K: "4K", PG_LEVEL_2M: "2M", PG_LEVEL_1G: "1G"}
LpageLimits = tuple[tuple[int, int], tuple[int, int]]


def kvm_pages_per_hpage(level: int) -> int:
    """`KVM_PAGES_PER_HPAGE(level)`: 4K pages in one page of `level`."""
    return 1 << (9 * (level - 1))


class KvmPageFault:
    """`struct kvm_page_fault` (mmu_internal.h), the parts the fault paths read and
    write: the access, the slot and pfn, and the three levels."""

    __slots__ = (
        "exec",
        "gfn",
        "goal_level",
        "huge_page_disallowed",
        "map_writable",
        "max_level",
        "pfn",
        "req_level",
        "slot",
        "write",
    )

    def __init__(
        self,
        gfn: int,
        write: bool,
        exec_: bool,
        slot: MemorySlot | None,
        max_level: int = KVM_MAX_HUGEPAGE_LEVEL,
    ) -> None:
        self.gfn, self.write, self.exec, self.slot = gfn, write, exec_, slot
        self.max_level = max_level
        self.req_level = self.goal_level = PG_LEVEL_4K
        self.huge_page_disallowed = False
        self.map_writable = False
        self.pfn = KVM_PFN_NOSLOT
        if slot is not None:
            self.pfn = (slot.userspace_addr >> PAGE_SHIFT) + gfn - slot.base_gfn
            self.map_writable = not slot.readonly


def lpage_limits(slot: MemorySlot) -> LpageLimits:
    """`lpage_info.disallow_lpage` as gfn ranges: per level (2M, 1G), the gfns whose
    aligned range lies inside the slot, empty when gfn and host address are aligned
    differently (`kvm_alloc_memslot_metadata`)."""
    ugfn = slot.userspace_addr >> PAGE_SHIFT
    out = []
    for level in (PG_LEVEL_2M, PG_LEVEL_1G):
        pages = kvm_pages_per_hpage(level)
        if (slot.base_gfn ^ ugfn) & (pages - 1):
            out.append((0, 0))
            continue
        lo = -(-slot.base_gfn // pages) * pages
        hi = (slot.base_gfn + slot.npages) // pages * pages
        out.append((lo, hi))
    return out[0], out[1]


class MappingLevels:
    """The module parameters and host backing that decide a fault's level."""

    def __init__(self, host_level: int = PG_LEVEL_2M, nx_huge_pages: bool = False) -> None:
        self.host_level = host_level  # host_pfn_mapping_level() of every memslot page
        self.nx = nx_huge_pages  # is_nx_huge_page_enabled()
        self._limits: dict[int, tuple[MemorySlot, LpageLimits]] = {}

    def host_pfn_mapping_level(self, slot: MemorySlot, gfn: int) -> int:
        """The host's mapping of the page: the same `host_level` for every slot."""
        return self.host_level

    def slot_limits(self, slot: MemorySlot) -> LpageLimits:
        entry = self._limits.get(id(slot))  # slots are immutable values
        if entry is None or entry[0] is not slot:
            if len(self._limits) > 256:
                self._limits.clear()  # slots replaced by memslot updates
            entry = self._limits[id(slot)] = (slot, lpage_limits(slot))
        return entry[1]

    def lpage_allowed(self, slot: MemorySlot, gfn: int, level: int) -> bool:
        """`!lpage_info_slot(gfn, slot, level)->disallow_lpage` (2M or 1G)."""
        lo, hi = self.slot_limits(slot)[level - 2]
        return lo <= gfn < hi

    def kvm_mmu_max_mapping_level(self, slot: MemorySlot, gfn: int, max_level: int) -> int:
        level = min(max_level, KVM_MAX_HUGEPAGE_LEVEL)
        while level > PG_LEVEL_4K and not self.lpage_allowed(slot, gfn, level):
            level -= 1
        if level == PG_LEVEL_4K:
            return PG_LEVEL_4K
        return min(self.host_pfn_mapping_level(slot, gfn), level)

    def kvm_mmu_hugepage_adjust(self, fault: KvmPageFault) -> None:
        fault.huge_page_disallowed = fault.exec and self.nx
        slot = fault.slot
        if fault.max_level == PG_LEVEL_4K or slot is None or slot.dirty_logging:
            return
        fault.req_level = self.kvm_mmu_max_mapping_level(slot, fault.gfn, fault.max_level)
        if fault.req_level == PG_LEVEL_4K or fault.huge_page_disallowed:
            return
        fault.goal_level = fault.req_level
        fault.pfn &= ~(kvm_pages_per_hpage(fault.goal_level) - 1)

    @staticmethod
    def disallowed_hugepage_adjust(
        fault: KvmPageFault, spte: int, cur_level: int, nx_disallowed: Callable[[int], bool]
    ) -> None:
        """`nx_disallowed(spte)` is `spte_to_child_sp(spte)->nx_huge_page_disallowed`."""
        if (
            cur_level > PG_LEVEL_4K
            and cur_level == fault.goal_level
            and is_shadow_present_pte(spte)
            and not is_large_pte(spte)
            and nx_disallowed(spte)
        ):
            mask = kvm_pages_per_hpage(cur_level) - kvm_pages_per_hpage(cur_level - 1)
            fault.pfn |= fault.gfn & mask
            fault.goal_level -= 1

    def disallow_reason(self, slot: MemorySlot, gfn: int, level: int) -> str:
        """Why `disallow_lpage` is set for `gfn` at `level`, in a few words."""
        size, ugfn = LEVEL_NAMES[level], slot.userspace_addr >> PAGE_SHIFT
        if (slot.base_gfn ^ ugfn) & (kvm_pages_per_hpage(level) - 1):
            return f"gfn/hva not {size}-aligned alike"
        return f"{size} range not all in slot"

    def why(
        self,
        slot: MemorySlot | None,
        gfn: int,
        exec_: bool = False,
        max_level: int = KVM_MAX_HUGEPAGE_LEVEL,
        nx_split: bool = False,
    ) -> tuple[int, str]:
        """The level a fault on `gfn` maps at and the kernel's reason in a few words (a
        counter panel's line), for the screens; `nx_split`: the table at that level was
        made for a disallowed NX huge page."""
        if slot is None:
            return PG_LEVEL_4K, "4K: no memslot (MMIO)"
        if max_level == PG_LEVEL_4K:
            return PG_LEVEL_4K, "4K: huge pages off"
        if slot.dirty_logging:
            return PG_LEVEL_4K, "4K: dirty logging"
        level = min(max_level, KVM_MAX_HUGEPAGE_LEVEL)
        capped = ""
        while level > PG_LEVEL_4K and not self.lpage_allowed(slot, gfn, level):
            capped = self.disallow_reason(slot, gfn, level)  # lpage_info's disallow_lpage
            level -= 1
        host = self.host_pfn_mapping_level(slot, gfn)
        if level > host:
            level = host
            capped = f"host {LEVEL_NAMES[host]} pages"  # host_pfn_mapping_level()
        name = LEVEL_NAMES[level]
        if level > PG_LEVEL_4K and exec_ and self.nx:
            return PG_LEVEL_4K, f"4K: NX huge page (fetch, req {name})"
        if level > PG_LEVEL_4K and nx_split:
            lower = LEVEL_NAMES[level - 1]
            return level - 1, f"{lower}: NX-split table below"  # disallowed_hugepage_adjust
        return level, f"{name}: {capped or 'slot and host allow'}"
