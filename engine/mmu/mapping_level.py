"""The level a page fault maps at, shared by the TDP MMU, the direct MMU (EPT/NPT with
tdp_mmu=N) and the shadow MMU: `struct kvm_page_fault`'s levels and how mmu.c sets them.

torvalds/linux 6.18 `arch/x86/kvm/mmu/mmu.c`:
- `kvm_mmu_max_mapping_level()` / `__kvm_mmu_max_mapping_level()`: from `max_level`
  (capped at `max_huge_page_level`, 1G on hosts with 1G EPT/NPT pages) down, the first
  level whose `lpage_info_slot(gfn, slot, level)->disallow_lpage` is 0, then capped by
  `host_pfn_mapping_level()`: the size of the host's own mapping of the page (a PUD leaf
  1G, a PMD leaf 2M, else 4K).  The model has no host page tables: the host backs every
  memslot alike (`host_level`: 4K pages, THP 2M or hugetlbfs 1G), but for the huge
  pages it split and the pages it zapped (`HostPages.mapping_level`).
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
- `kvm_mmu_faultin_pfn()` -> `__kvm_faultin_pfn()` -> `hva_to_pfn()` (kvm_main.c): the
  host-physical page behind the slot's host virtual address (`__gfn_to_hva_memslot()`),
  as the host's page allocator placed it: `HostPages`; around it the MMU notifier's
  retry checks (`mmu_invalidate_retry_gfn_unsafe`, mmu_invalidate.py), and under
  mmu_lock `is_page_fault_stale()`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ..memslots.memslot import MemorySlot
from .mmu_invalidate import MmuInvalidate
from .role import PG_LEVEL_1G, PG_LEVEL_2M, PG_LEVEL_4K
from .spte import (
    KVM_MAX_HUGEPAGE_LEVEL,
    KVM_PFN_NOSLOT,
    RET_PF_CONTINUE,
    RET_PF_RETRY,
    RetPf,
    is_large_pte,
    is_shadow_present_pte,
)
from .vcpu.vmx import PFERR_PRESENT_MASK, PFERR_RSVD_MASK

PAGE_SHIFT = 12
LEVEL_NAMES = {PG_LEVEL_4K: "4K", PG_LEVEL_2M: "2M", PG_LEVEL_1G: "1G"}
LpageLimits = tuple[tuple[int, int], tuple[int, int]]
# The host RAM that backs guest memory: 1 TiB of host-physical addresses from 64 GiB up,
# below the 46-bit MAXPHYADDR of the modelled host (`SpteConfig.host_phys_bits`) and apart
# from the shadow pages' own addresses (`SPT_BASE`, 4 GiB up, mmu_pages.py).
HOST_RAM_BASE = 0x10_0000_0000
HOST_RAM_SIZE = 0x100_0000_0000
HOST_PAGES_SEED = 0x4057  # the host allocator's draws: the session's seed ^ this


def gfn_to_hva_memslot(slot: MemorySlot, gfn: int) -> int:
    """`__gfn_to_hva_memslot()` (kvm_host.h): the VMM's address of the slot's page."""
    return slot.userspace_addr + ((gfn - slot.base_gfn) << PAGE_SHIFT)


class HostPages:
    """Where the host's page allocator put each page of the VMM's guest memory: what
    `hva_to_pfn()` (6.18 kvm_main.c, through get_user_pages) returns for a host virtual
    address.  The host maps that memory with pages of `host_level` (4K, a THP 2M or a
    hugetlbfs 1G page), each physically contiguous and aligned to its size, and those
    pages lie scattered over host RAM (`HOST_RAM_BASE`, `HOST_RAM_SIZE`) as drawn from
    `seed`.  A VMM page keeps the host page it got first; each host page backs one VMM
    page.  Where a page goes is a one-to-one function of its address within any
    HOST_RAM_SIZE of the VMM's address space, so the same seed gives the same pfns on
    every MMU, whatever order the faults come in; only a page whose place is taken (an
    address in another such window) takes the next free one, and then the order counts.
    The model's own: the kernel reads the host's page tables, which the model has none
    of."""

    def __init__(self, host_level: int = PG_LEVEL_2M, seed: int = 1) -> None:
        self.pages = kvm_pages_per_hpage(host_level)  # 4K pages in one host page
        frames = (HOST_RAM_SIZE >> PAGE_SHIFT) // self.pages
        self._bits = frames.bit_length() - 1  # host RAM holds 2**bits host pages
        rng = random.Random(seed ^ HOST_PAGES_SEED)
        self._keys = rng.getrandbits(self._bits), rng.getrandbits(self._bits)
        self._frames: dict[int, int] = {}  # the VMM's host-page number -> RAM's
        self._used: set[int] = set()
        self.level = host_level
        self.split: set[int] = set()  # huge pages (their numbers) split into 4K ptes
        self.zapped: set[int] = set()  # VMM 4K pages the host unmapped and freed
        self.refaulted: dict[int, int] = {}  # VMM 4K pages faulted back in: their pfn

    def frame(self, index: int) -> int:
        """Where the VMM's `index`-th page of this size goes first: its window folded in,
        then an odd multiply, an add and an xor-shift modulo 2**bits (one-to-one)."""
        bits = self._bits
        mask, half = (1 << bits) - 1, max(bits // 2, 1)
        x = (index ^ (index >> bits) * 0x2545_F491) & mask
        x = (x * 0x9E37_79B9_7F4A_7C15 + self._keys[0]) & mask
        x ^= x >> half
        return (x * 0xC2B2_AE3D_27D4_EB4F + self._keys[1]) & mask

    def hva_to_pfn(self, hva: int) -> int:
        """The host-physical frame number of the page at host virtual address `hva`."""
        vpfn = hva >> PAGE_SHIFT
        if vpfn in self.refaulted or vpfn in self.zapped:
            return self._refault(vpfn)
        index = vpfn // self.pages
        frame = self._frames.get(index)
        if frame is None:
            frame = self._frames[index] = self._alloc(self.frame(index))
        return (HOST_RAM_BASE >> PAGE_SHIFT) + frame * self.pages + vpfn % self.pages

    def _alloc(self, frame: int) -> int:
        """`frame`, or the allocator's next free host page when it is taken."""
        mask = (1 << self._bits) - 1
        if len(self._used) > mask:
            raise MemoryError(f"host RAM ({HOST_RAM_SIZE >> 30} GiB) is all in use")
        while frame in self._used:
            frame = (frame + 1) & mask
        self._used.add(frame)
        return frame

    def _refault(self, vpfn: int) -> int:
        """A VMM page the host zapped, touched again: a new 4K page (the first 4K of the
        allocator's next free host page: the model hands out whole frames)."""
        pfn = self.refaulted.get(vpfn)
        if pfn is None:
            frame = self._alloc(self.frame(vpfn // self.pages))
            pfn = self.refaulted[vpfn] = (HOST_RAM_BASE >> PAGE_SHIFT) + frame * self.pages
            self.zapped.discard(vpfn)
        return pfn

    def mapping_level(self, hva: int) -> int:
        """The level of the host's own mapping of `hva` (`host_pfn_mapping_level()` reads
        it from the host's page tables): the backing's page size, 4K once that huge page
        was split (`split_huge_pmd`) or for a page faulted back after a zap."""
        vpfn = hva >> PAGE_SHIFT
        if self.pages == 1 or vpfn // self.pages in self.split or vpfn in self.refaulted:
            return PG_LEVEL_4K
        return self.level

    def huge_page_of(self, hva: int) -> tuple[int, int] | None:
        """The host virtual range [start, end) of the huge page mapping `hva`, or None
        when the host maps it with a 4K page."""
        if self.mapping_level(hva) == PG_LEVEL_4K:
            return None
        size = self.pages << PAGE_SHIFT
        start = hva & -size
        return start, start + size

    def split_huge_page(self, hva: int) -> None:
        """`__split_huge_pmd()`: the huge page at `hva` mapped by 4K ptes from now on
        (the same host-physical pages: a THP splits in place)."""
        self.split.add((hva >> PAGE_SHIFT) // self.pages)

    def zap(self, hva: int) -> None:
        """`zap_pte_range()` of the 4K page at `hva` (its huge page split first): the
        page is freed; the VMM's next touch faults in another (`_refault`)."""
        vpfn = hva >> PAGE_SHIFT
        if self.mapping_level(hva) != PG_LEVEL_4K:
            raise ValueError(f"hva {hva:#x} is in a huge page: split it first")
        self.refaulted.pop(vpfn, None)
        self.zapped.add(vpfn)


def gfn_to_index(gfn: int, base_gfn: int, level: int) -> int:
    """`gfn_to_index()` (kvm_host.h): the index of `gfn`'s page of `level` within a
    memslot (its rmap and lpage_info entry)."""
    shift = 9 * (level - 1)
    return (gfn >> shift) - (base_gfn >> shift)


def kvm_pages_per_hpage(level: int) -> int:
    """`KVM_PAGES_PER_HPAGE(level)`: 4K pages in one page of `level`."""
    return 1 << (9 * (level - 1))


class KvmPageFault:
    """`struct kvm_page_fault` (mmu_internal.h), the parts the fault paths read and
    write, one per fault as `kvm_mmu_do_page_fault()` (6.18 mmu.h) builds it: the
    address and the exit's error code (`present` and `rsvd` its PFERR_PRESENT and
    PFERR_RSVD bits, which `fast_page_fault()` reads), the access, the slot and pfn, and
    the three levels.  `write` and `exec` are the access as the emulator would redo it:
    the error code's PFERR_WRITE and PFERR_FETCH, except in a reserved-bit fault, whose
    code under EPT carries neither (`handle_ept_misconfig()`)."""

    __slots__ = (
        "addr",
        "error_code",
        "exec",
        "gfn",
        "goal_level",
        "huge_page_disallowed",
        "map_writable",
        "max_level",
        "mmu_seq",
        "pfn",
        "present",
        "req_level",
        "rsvd",
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
        error_code: int = 0,
        addr: int | None = None,
    ) -> None:
        self.gfn, self.write, self.exec, self.slot = gfn, write, exec_, slot
        self.addr = gfn << PAGE_SHIFT if addr is None else addr  # cr2_or_gpa
        self.error_code = error_code
        self.present = bool(error_code & PFERR_PRESENT_MASK)
        self.rsvd = bool(error_code & PFERR_RSVD_MASK)
        self.max_level = max_level
        self.req_level = self.goal_level = PG_LEVEL_4K
        self.huge_page_disallowed = False
        self.map_writable = False
        self.mmu_seq = 0  # kvm->mmu_invalidate_seq when kvm_mmu_faultin_pfn() began
        self.pfn = KVM_PFN_NOSLOT  # MappingLevels.kvm_mmu_faultin_pfn() fills both in


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

    def __init__(
        self, host_level: int = PG_LEVEL_2M, nx_huge_pages: bool = False, host_seed: int = 1
    ) -> None:
        self.host_level = host_level  # host_pfn_mapping_level() of every memslot page
        self.nx = nx_huge_pages  # is_nx_huge_page_enabled()
        self.host = HostPages(host_level, host_seed)
        self.mmu_invalidate = MmuInvalidate()  # kvm->mmu_invalidate_* (mmu_invalidate.py)
        #: runs inside `kvm_mmu_faultin_pfn()` while the host pfn is looked up (tests, and
        #: an MMU-notifier invalidation racing the fault); None: nothing races
        self.faultin_race: Callable[[KvmPageFault], None] | None = None
        self._limits: dict[int, tuple[MemorySlot, LpageLimits]] = {}

    def gfn_to_pfn(self, slot: MemorySlot, gfn: int) -> int:
        """The host page behind `gfn` of `slot`: `hva_to_pfn(__gfn_to_hva_memslot())`."""
        return self.host.hva_to_pfn(gfn_to_hva_memslot(slot, gfn))

    def kvm_mmu_faultin_pfn(self, fault: KvmPageFault) -> RetPf:
        """`kvm_mmu_faultin_pfn()` (6.18 mmu.c) for a fault the MMU maps: the MMU
        notifier's sequence read first (`fault->mmu_seq`); no slot leaves KVM_PFN_NOSLOT
        (`kvm_handle_noslot_fault()`); else RET_PF_RETRY when an invalidation of the gfn
        is in progress (`mmu_invalidate_retry_gfn_unsafe()`, "before getting the pfn from
        the primary MMU"), the host pfn (`__kvm_mmu_faultin_pfn`, during which the host
        may unmap the page: `faultin_race`), and the same check again ("purely to avoid
        contending mmu_lock").  RET_PF_CONTINUE: go on to map it."""
        inv = self.mmu_invalidate
        fault.mmu_seq = inv.seq
        if fault.slot is None:
            return RET_PF_CONTINUE
        if inv.mmu_invalidate_retry_gfn_unsafe(fault.mmu_seq, fault.gfn):
            inv.stale_retries += 1
            return RET_PF_RETRY
        race = self.faultin_race
        if race is not None:  # hva_to_pfn() may sleep in get_user_pages()
            race(fault)
        self.kvm_faultin_pfn(fault)
        if inv.mmu_invalidate_retry_gfn_unsafe(fault.mmu_seq, fault.gfn):
            inv.stale_retries += 1
            return RET_PF_RETRY
        return RET_PF_CONTINUE

    def is_page_fault_stale(self, fault: KvmPageFault, root_obsolete: bool) -> bool:
        """`is_page_fault_stale()` (6.18 mmu.c), mmu_lock held: the root was made obsolete
        (a fast zap) or, for a fault with a slot, an invalidation of its gfn is in
        progress or ended since `fault->mmu_seq` (`mmu_invalidate_retry_gfn()`, the check
        the unlocked ones may miss).  The caller returns RET_PF_RETRY."""
        if root_obsolete:
            return True
        inv = self.mmu_invalidate
        if fault.slot is not None and inv.mmu_invalidate_retry_gfn(fault.mmu_seq, fault.gfn):
            inv.stale_retries += 1
            return True
        return False

    def kvm_faultin_pfn(self, fault: KvmPageFault) -> KvmPageFault:
        """`__kvm_mmu_faultin_pfn()` → `__kvm_faultin_pfn()`: a slot's page gives its host
        pfn (`hva_to_pfn`) and `map_writable` (not a read-only slot)."""
        slot = fault.slot
        if slot is not None:
            fault.pfn = self.gfn_to_pfn(slot, fault.gfn)
            fault.map_writable = not slot.readonly
        return fault

    def host_pfn_mapping_level(self, slot: MemorySlot, gfn: int) -> int:
        """The host's mapping of the page (`HostPages.mapping_level`): `host_level`
        unless the host split or zapped that page."""
        return self.host.mapping_level(gfn_to_hva_memslot(slot, gfn))

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
