"""`kvm->mmu_invalidate_*`: what a page fault reads to learn that the host unmapped the
page it is about to map (docs/kvm.md §6.7).

torvalds/linux 6.18 `virt/kvm/kvm_main.c` (`kvm_mmu_invalidate_begin`,
`kvm_mmu_invalidate_range_add`, `kvm_mmu_invalidate_end`) and `include/linux/kvm_host.h`
(`mmu_invalidate_retry_gfn`, `mmu_invalidate_retry_gfn_unsafe`):
- an MMU-notifier invalidation that finds a memslot raises `mmu_invalidate_in_progress`
  (under mmu_lock for write) and widens `[mmu_invalidate_range_start,
  mmu_invalidate_range_end)` to the gfns it zaps (the first range of a burst replaces
  INVALID_GPA; later ones only widen it: "Fully tracking multiple concurrent ranges has
  diminishing returns");
- its end bumps `mmu_invalidate_seq`, then lowers `mmu_invalidate_in_progress`;
- a page fault snapshots the sequence (`fault->mmu_seq`) before it asks the host for the
  pfn, and retries (RET_PF_RETRY) when, before or after that, an invalidation of its gfn
  is in progress or has ended since (`mmu_invalidate_retry_gfn`): the pfn it got may be
  the page the host is freeing.  The kernel keeps no count of such retries;
  `stale_retries` is the model's own.
"""

from __future__ import annotations

from ..errors import AuditError

INVALID_GPA = (1 << 64) - 1  # INVALID_GPA, (~(gpa_t)0) (include/linux/kvm_types.h)


class MmuInvalidate:
    """The `struct kvm` fields of the MMU notifier's invalidations."""

    __slots__ = ("in_progress", "range_end", "range_start", "seq", "stale_retries")

    def __init__(self) -> None:
        self.seq = 0  # mmu_invalidate_seq
        self.in_progress = 0  # mmu_invalidate_in_progress
        self.range_start = INVALID_GPA  # mmu_invalidate_range_start
        self.range_end = INVALID_GPA  # mmu_invalidate_range_end
        self.stale_retries = 0  # faults that returned RET_PF_RETRY for it (model-only)

    def kvm_mmu_invalidate_begin(self) -> None:
        """`kvm_mmu_invalidate_begin()` (mmu_lock held for write)."""
        self.in_progress += 1
        if self.in_progress == 1:
            self.range_start = self.range_end = INVALID_GPA

    def kvm_mmu_invalidate_range_add(self, start: int, end: int) -> None:
        """`kvm_mmu_invalidate_range_add()`: the gfns [start, end) join the range."""
        if not self.in_progress:
            raise AuditError("mmu_invalidate_range_add outside an invalidation (WARN_ON_ONCE)")
        if self.range_start == INVALID_GPA:
            self.range_start, self.range_end = start, end
        else:
            self.range_start = min(self.range_start, start)
            self.range_end = max(self.range_end, end)

    def kvm_mmu_invalidate_end(self) -> None:
        """`kvm_mmu_invalidate_end()`: the sequence moves, then the count drops."""
        self.seq += 1
        self.in_progress -= 1
        if self.in_progress < 0:
            raise AuditError("mmu_invalidate_in_progress < 0 (KVM_BUG_ON)")

    def mmu_invalidate_retry_gfn(self, mmu_seq: int, gfn: int) -> bool:
        """`mmu_invalidate_retry_gfn()` (mmu_lock held): an invalidation covering `gfn`
        is in progress, or one ended since the fault read `mmu_seq`."""
        if self.in_progress and self.range_start <= gfn < self.range_end:
            return True
        return self.seq != mmu_seq

    # The lockless pre-check, `mmu_invalidate_retry_gfn_unsafe()`, reads the same fields
    # without mmu_lock: here, with no concurrent writer mid-update, the same answer.
    mmu_invalidate_retry_gfn_unsafe = mmu_invalidate_retry_gfn

    def audit(self) -> None:
        """No invalidation in progress without a range; the count never negative."""
        if self.in_progress < 0:
            raise AuditError(f"mmu_invalidate_in_progress {self.in_progress}")
        if self.in_progress and self.range_start == INVALID_GPA:
            raise AuditError("an invalidation in progress with no range (WARN_ON_ONCE)")
