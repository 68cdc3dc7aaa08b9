"""debugfs `mmu_rmaps_stat`: the histogram of rmap sizes, printed as the kernel prints it.

docs/kvm.md §3.5 (arch/x86/kvm/debugfs.c, `kvm_mmu_rmaps_stat_show`, Peter Xu 2021).
The kernel walks every memslot's rmap heads at 4K, 2M and 1G, and counts each head in
bucket `ffs(pte_list_count(head))`, clamped to `RMAP_LOG_SIZE - 1` with a WARN_ON_ONCE.
`ffs` is the *lowest* set bit, so only powers of two land where the header says: 3 and
5 go to "1", 6 to "2-3", 12 to "4-7", and 1024 to "512-1023" (clamped).  Peter Xu's
6G-guest table in the PTE_LIST_EXT thread (kvm, 2021) was printed by this code.

Output, byte for byte: `Rmap_Count:\\t0\\t1\\t` then `"%d-%d\\t"` for buckets 2..10 and
`\\n`; then for each level `Level=4K:\\t` followed by 11 `"%d\\t"` and `\\n`.  The file is
empty when the VM has no rmaps (`kvm_memslots_have_rmaps`).

`log2=True` buckets by floor(log2(count)) + 1 instead, so the labels hold for every
count.  That text is *not* the kernel's: it opens with the line `LOG2_BANNER`
("# log2 buckets (not the kernel's ffs())"), which the kernel never prints, and is
otherwise laid out the same so the two can be compared column by column.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

RMAP_LOG_SIZE = 11
KVM_LPAGE_STR = ("4K", "2M", "1G")  # kvm_lpage_str[], one row each
LOG2_BANNER = "# log2 buckets (not the kernel's ffs())\n"


def ffs(value: int) -> int:
    """The kernel's `ffs()`: 1-based index of the lowest set bit, 0 for 0."""
    return (value & -value).bit_length()


def _check_count(count: int) -> None:
    if count < 0:
        raise ValueError(f"an rmap holds {count} sptes?")


def bucket_kernel(count: int) -> int:
    """`ffs(pte_list_count(head))`, clamped to RMAP_LOG_SIZE - 1 as debugfs.c does."""
    _check_count(count)
    return min(ffs(count), RMAP_LOG_SIZE - 1)


def bucket_log2(count: int) -> int:
    """0 for 0, else floor(log2(count)) + 1, clamped: the bucket the labels promise."""
    _check_count(count)
    return min(count.bit_length(), RMAP_LOG_SIZE - 1)


def bucket_labels() -> list[str]:
    """`0`, `1`, then `2^(i-1)-(2^i - 1)` for i = 2..10, as the header prints them."""
    return ["0", "1"] + [f"{1 << (i - 1)}-{(1 << i) - 1}" for i in range(2, RMAP_LOG_SIZE)]


class RmapHistogram:
    """Bucket counts per level (`log[KVM_NR_PAGE_SIZES][RMAP_LOG_SIZE]`), for the UI."""

    def __init__(self, *, log2: bool = False) -> None:
        self.log2 = log2
        self.buckets: dict[str, list[int]] = {lvl: [0] * RMAP_LOG_SIZE for lvl in KVM_LPAGE_STR}
        self.clamped = 0  # heads past the last bucket (the kernel's WARN_ON_ONCE fired)

    @classmethod
    def from_counts(
        cls, counts_by_level: Mapping[str, Iterable[int]], *, log2: bool = False
    ) -> RmapHistogram:
        """Bucket the `pte_list_count` of every rmap head, level by level."""
        histogram = cls(log2=log2)
        for level, counts in counts_by_level.items():
            histogram.add_counts(level, counts)
        return histogram

    def bucket(self, count: int) -> int:
        return bucket_log2(count) if self.log2 else bucket_kernel(count)

    def add(self, level: str, count: int, heads: int = 1) -> None:
        """Count `heads` rmap heads holding `count` sptes each at `level`."""
        row = self._row(level)
        index = self.bucket(count)
        unclamped = count.bit_length() if self.log2 else ffs(count)
        if unclamped >= RMAP_LOG_SIZE:
            self.clamped += heads
        row[index] += heads

    def add_counts(self, level: str, counts: Iterable[int]) -> None:
        for count, heads in Counter(counts).items():
            self.add(level, count, heads)

    def _row(self, level: str) -> list[int]:
        row = self.buckets.get(level)
        if row is None:
            raise ValueError(f"level {level!r} is not one of {', '.join(KVM_LPAGE_STR)}")
        return row

    def rows(self) -> list[tuple[str, list[int]]]:
        """(level, 11 bucket counts) in the kernel's order: 4K, 2M, 1G."""
        return [(level, list(self.buckets[level])) for level in KVM_LPAGE_STR]

    def format(self) -> str:
        """The debugfs text (with `LOG2_BANNER` first in log2 mode)."""
        text = LOG2_BANNER if self.log2 else ""
        text += "Rmap_Count:\t" + "".join(f"{label}\t" for label in bucket_labels()) + "\n"
        for level, row in self.rows():
            text += f"Level={level}:\t" + "".join(f"{n}\t" for n in row) + "\n"
        return text


def format_mmu_rmaps_stat(
    counts_by_level: Mapping[str, Iterable[int]], *, log2: bool = False, have_rmaps: bool = True
) -> str:
    """`kvm_mmu_rmaps_stat_show`: the file's text for these per-head spte counts.

    `counts_by_level` maps "4K"/"2M"/"1G" to the `pte_list_count` of every rmap head at
    that level (heads holding 0 included: they fill bucket 0); a missing level prints a
    row of zeros, as for a VM with no such pages.  `have_rmaps=False` is the empty file
    of a VM without rmaps.
    """
    if not have_rmaps:
        return ""
    return RmapHistogram.from_counts(counts_by_level, log2=log2).format()
