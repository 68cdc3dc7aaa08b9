"""One hashed page table entry (HPTE) of POWER's hash MMU, as Book3S HV KVM keeps it.

docs/kvm.md §8.  An HPTE is two doublewords: `v` (dword 0: AVPN, the software bits,
SECONDARY, VALID) and `r` (dword 1: the real page number, the page-class key, PP).  The
bit values are the kernel's (arch/powerpc/include/asm/book3s/64/mmu-hash.h and
asm/kvm_book3s_64.h; DSISR bits from asm/reg.h):

* `HPTE_V_VALID 0x1`, `HPTE_V_SECONDARY 0x2`, `HPTE_V_LARGE 0x4`, AVPN from bit 7;
  KVM's software bits `HPTE_V_ABSENT 0x20` ("indicate non-present HPTEs") and
  `HPTE_V_HVLOCK 0x40` (the per-HPTE lock, not modelled: one vCPU).
* The 5-bit virtual page class key: `HPTE_R_KEY_HI 0x3000000000000000` (key bits 3-4)
  and `HPTE_R_KEY_LO 0xe00` (key bits 0-2); `hpte_get_skey_perm()` reads them as
  `((r & KEY_HI) >> 57) | ((r & KEY_LO) >> 9)`.
* `DSISR_NOHPTE 0x40000000` ("no translation found"), `DSISR_KEYFAULT 0x00200000`,
  `DSISR_ISSTORE 0x02000000`.

Besides `v` and `r` an `Hpte` carries what KVM keeps beside the table: the virtual page
number it maps (the index key; KVM recomputes it from the AVPN and the slot) and the
guest's own view of dword 1 (`rev->guest_rpte` in the revmap), whose key is the guest's
even when the real HPTE carries the host's key 30 or 31.
"""

from __future__ import annotations

from typing import NamedTuple

HPTES_PER_GROUP = 8  # an HPTEG: 8 HPTEs of 16 bytes, 128 bytes (one POWER cache line)
HPTE_BYTES = 16
HPTEG_BYTES = HPTES_PER_GROUP * HPTE_BYTES

HPTE_V_VALID = 0x1
HPTE_V_SECONDARY = 0x2
HPTE_V_LARGE = 0x4
HPTE_V_ABSENT = 0x20
HPTE_V_HVLOCK = 0x40
HPTE_V_AVPN_SHIFT = 7

HPTE_R_KEY_HI = 0x3000_0000_0000_0000
HPTE_R_KEY_LO = 0x0000_0000_0000_0E00
HPTE_R_KEY = HPTE_R_KEY_HI | HPTE_R_KEY_LO
HPTE_R_PP = 0x3
PP_RW = 0x2  # PP=0b10: read/write (with the SLB's Kp set, as for Linux user pages)
PP_RO = 0x3  # PP=0b11: read-only

DSISR_NOHPTE = 0x4000_0000
DSISR_KEYFAULT = 0x0020_0000
DSISR_ISSTORE = 0x0200_0000

MAX_KEY = 31

# What an HPTE slot holds, for drawing and auditing (see `Hpte.kind`).
EMPTY = "empty"
VALID = "valid"  # a guest HPTE, valid in hardware, with the guest's key
ABSENT = "absent"  # today: V clear, HPTE_V_ABSENT, key cleared (host paged the page out)
MMIO = "mmio"  # key 31: emulated MMIO (today: ABSENT; the thread: valid, AMR-denied)
SWAPPED = "swapped"  # the thread's key 30: valid, AMR-denied, host paged the page out
KINDS = (EMPTY, VALID, ABSENT, MMIO, SWAPPED)


def key_to_r(key: int) -> int:
    """The dword-1 bits of page-class key `key` (0-31)."""
    if not 0 <= key <= MAX_KEY:
        raise ValueError(f"a page-class key is 0-31, not {key}")
    return ((key & 0x18) << 57) | ((key & 0x7) << 9)


def hpte_key(r: int) -> int:
    """The page-class key of dword 1, as `hpte_get_skey_perm()` reads it."""
    return ((r & HPTE_R_KEY_HI) >> 57) | ((r & HPTE_R_KEY_LO) >> 9)


def with_key(r: int, key: int) -> int:
    return (r & ~HPTE_R_KEY) | key_to_r(key)


def make_v(vpn: int, page_shift: int, flags: int) -> int:
    """Dword 0: the AVPN (virtual address >> 23) from bit 7, LARGE for pages over 4K."""
    avpn = (vpn << page_shift) >> 23
    large = HPTE_V_LARGE if page_shift > 12 else 0
    return (avpn << HPTE_V_AVPN_SHIFT) | large | flags


class Hpte(NamedTuple):
    """One HPTE in a slot: the real `v`/`r`, the page it maps and the guest's `r`.

    Build it with `Hpte.make()`, which computes `key` (the real HPTE's key, what the
    hardware checks against the AMR) and `kind` once: an HPTE is replaced, never
    changed.  (A named tuple: the pfault program makes a million of them.)"""

    vpn: int
    v: int
    r: int
    guest_r: int  # rev->guest_rpte: the guest's dword 1 (its own key, PP, RPN)
    key: int
    kind: str

    @classmethod
    def make(cls, vpn: int, v: int, r: int, guest_r: int) -> Hpte:
        key = hpte_key(r)
        return cls(vpn, v, r, guest_r, key, _kind(v, key, hpte_key(guest_r)))

    @property
    def valid(self) -> bool:
        return bool(self.v & HPTE_V_VALID)

    @property
    def absent(self) -> bool:
        return bool(self.v & HPTE_V_ABSENT)

    @property
    def secondary(self) -> bool:
        return bool(self.v & HPTE_V_SECONDARY)

    @property
    def guest_key(self) -> int:
        return hpte_key(self.guest_r)

    @property
    def gpa(self) -> int:
        """The guest real address the guest asked for (RPN of its dword 1)."""
        return self.guest_r & 0x0FFF_FFFF_FFFF_F000

    @property
    def writable(self) -> bool:
        return (self.guest_r & HPTE_R_PP) == PP_RW

    def consistent(self) -> bool:
        """`key` and `kind` agree with `v`, `r` and `guest_r`."""
        return self == Hpte.make(self.vpn, self.v, self.r, self.guest_r)


def _kind(v: int, key: int, guest_key: int) -> str:
    """What a slot holds: `is_mmio_hpte()` (ABSENT and key 31) or the thread's valid
    key-31 entry is MMIO; valid with the host's key 30 (not the guest's own) is the
    thread's host-swapped page; ABSENT with the key cleared is today's host-swapped page;
    the rest are the guest's HPTEs."""
    if v & HPTE_V_ABSENT:
        return MMIO if key == MAX_KEY else ABSENT
    if key != guest_key and key == MAX_KEY:
        return MMIO
    if key != guest_key and key == MAX_KEY - 1:
        return SWAPPED
    return VALID
