"""Random KVM_SET_USER_MEMORY_REGION sequences for holding `engine.Vm` against the
kernel: the same calls applied to both, which must answer with the same errno each time.

The values are chosen to reach every check of `__kvm_set_memory_region()` (engine/
memslots/set_memory_region.py lists them in the kernel's order): slot ids below, at and above
KVM_USER_MEM_SLOTS and in address spaces 1 and 2, every flag bit the v1 ioctl refuses,
unaligned and wrapping addresses and sizes, host addresses at the end of the user range
(access_ok), gfns at `kvm_mmu_max_gfn()`, sizes above KVM_MEM_MAX_NR_PAGES, and, among a
few slot ids and overlapping ranges, creates, deletes, moves, resizes and flag changes.
Sizes that pass every check stay small: the kernel allocates rmaps and dirty bitmaps for
a slot, and a huge one would fail with ENOMEM, which no model of the checks can know.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from ..memslots.constants import (
    KVM_MEM_GUEST_MEMFD,
    KVM_MEM_LOG_DIRTY_PAGES,
    KVM_MEM_MAX_NR_PAGES,
    KVM_MEM_READONLY,
    KVM_USER_MEM_SLOTS,
    TASK_SIZE_MAX,
)

PAGE = 4096
Call = tuple[int, int, int, int, int]  # slot, flags, guest_phys_addr, memory_size, hva
MAX_GPA_52 = 1 << 52
SLOT_IDS = (0, 1, 2, 3, 5, 31, KVM_USER_MEM_SLOTS - 1, KVM_USER_MEM_SLOTS, 0x7FFF, 0xFFFF)
FLAGS = (0, 0, 0, 0, KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY,
         KVM_MEM_LOG_DIRTY_PAGES | KVM_MEM_READONLY)  # fmt: skip
BAD_FLAGS = (KVM_MEM_GUEST_MEMFD, 1 << 3, 1 << 31)


def _slot(rng: random.Random) -> int:
    slot = rng.choice(SLOT_IDS[:5]) if rng.random() < 0.8 else rng.choice(SLOT_IDS)
    if rng.random() < 0.06:
        slot |= rng.choice((1, 2, 0x7FFF)) << 16
    return slot


def _gpa(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.80:
        return rng.randrange(0, 32) * 8 * PAGE  # a small window: overlaps are frequent
    if r < 0.85:
        return rng.randrange(0, 32) * 8 * PAGE + rng.choice((1, 8, 0x800))  # unaligned
    if r < 0.92:
        return MAX_GPA_52 - rng.randrange(1, 8) * PAGE  # around kvm_mmu_max_gfn()
    return (1 << 64) - rng.randrange(1, 4) * PAGE  # wraps with any size


def _size(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.15:
        return 0  # delete
    if r < 0.85:
        return rng.choice((1, 1, 2, 4, 8, 8, 16)) * PAGE
    if r < 0.92:
        return rng.choice((1, 8)) * PAGE + rng.choice((1, 0x100, 0x800))  # unaligned
    return (KVM_MEM_MAX_NR_PAGES + rng.randrange(1, 3)) * PAGE  # too many pages


def _hva(rng: random.Random, bases: tuple[int, ...]) -> int:
    r = rng.random()
    if r < 0.85:
        return rng.choice(bases)
    if r < 0.90:
        return rng.choice(bases) + rng.choice((1, 0x10, 0x800))  # unaligned
    if r < 0.97:
        return TASK_SIZE_MAX - rng.randrange(0, 4) * PAGE  # the end of the user range
    return (1 << 64) - rng.randrange(1, 3) * PAGE  # wraps


def random_calls(seed: int, count: int, bases: tuple[int, ...]) -> Iterator[Call]:
    """`count` calls, deterministic for `seed`; host addresses from `bases` (page-aligned
    mappings the caller owns) and from the edges of the address space."""
    rng = random.Random(seed)
    recent: list[Call] = []
    for _ in range(count):
        if recent and rng.random() < 0.35:
            call = _mutate(rng, rng.choice(recent), bases)
        else:
            flags = rng.choice(FLAGS) if rng.random() < 0.94 else rng.choice(BAD_FLAGS)
            call = (_slot(rng), flags, _gpa(rng), _size(rng), _hva(rng, bases))
        recent = [*recent[-7:], call]
        yield call


def _mutate(rng: random.Random, call: Call, bases: tuple[int, ...]) -> Call:
    """The same slot again, one thing changed: what an existing slot allows (a move, a
    flags-only change) or refuses (a resize, a new host address, READONLY toggled)."""
    slot, flags, gpa, size, hva = call
    what = rng.randrange(6)
    if what == 0:
        return slot, flags ^ KVM_MEM_LOG_DIRTY_PAGES, gpa, size, hva
    if what == 1:
        return slot, flags, _gpa(rng), size, hva
    if what == 2:
        return slot, flags, gpa, _size(rng), hva
    if what == 3:
        return slot, flags, gpa, size, _hva(rng, bases)
    if what == 4:
        return slot, flags ^ KVM_MEM_READONLY, gpa, size, hva
    return slot, flags, gpa, 0, hva
