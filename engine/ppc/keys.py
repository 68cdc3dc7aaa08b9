"""Virtual page class keys, the AMR, and the two eras of KVM's use of them (the
POWER-keys thread).

The ISA 2.06 mechanism (docs/kvm.md §8; QEMU commit f80872e2 by David Gibson): every
HPTE has a class key 0-31; the AMR holds two bits per key, and an access whose key the
AMR denies takes a key fault (DSISR_KEYFAULT) instead of completing.  The kernel reads
the bits as `hpte_get_skey_perm(r, amr) = (amr >> (62 - 2 * key)) & 3`, bit 0 of the
result denying loads and bit 1 stores (asm/kvm_book3s_64.h).  AMOR, a hypervisor
register, says which AMR bits the guest may change (the QEMU commit leaves it out; the
patch needs it so that the guest cannot re-allow the host's keys).

The eras, by name:

* ``"2014-keys"`` — Aneesh Kumar K.V's series "[PATCH 0/6] Use virtual page class key
  protection mechanism for speeding up guest page fault" (the POWER-keys thread,
  kvm-ppc, June 2014).  MMIO and
  host-swapped pages get a *valid* HPTE with key 31 and 30, "the authority mask register
  is configured such that class index 30 and 31 will have read/write denied", so touching
  them is a key fault and a NO_HPTE fault can only be the guest's own: "forward a NO_HPTE
  fault directly to guest without doing the expensive hash pagetable lookup".  The price
  (Benjamin Herrenschmidt's reply): guests cannot use keys 30 and 31 — "make it
  impossible for guests to exploit virtual page class keys".  Modelled here by the
  host's AMR bits for 30/31 held by AMOR, and H_ENTER refusing a guest key 30/31 with
  H_PARAMETER (in the spirit of patch 2/6, "Deny virtual page class key update via
  h_protect"; the exact refusal is UNVERIFIED: the patch bodies are not in the thread).
  The key-30 proposal itself appears in no merged source (docs/kvm.md §8).
* ``"today"`` — merged KVM (book3s_hv_rm_mmu.c): only emulated MMIO is marked, with
  key 31, on an HPTE that is *absent* (V clear, HPTE_V_ABSENT), so the hardware never
  checks that key; a host-swapped page is ABSENT with the key cleared.  Every NO_HPTE
  fault goes through `kvmppc_hpte_hv_fault()`, whose `kvmppc_hv_find_lock_hpte()` hash
  search tells the three cases apart; a per-vCPU cache of the last 4 MMIO HPTEs
  (`MMIO_HPTE_CACHE_SIZE 4`, `mmio_cache_search()`, keyed by `kvm->arch.mmio_update`)
  skips the search for repeated MMIO faults: Yongji Xie's "KVM: PPC: Book3S HV: Add a per
  vcpu cache for recently page faulted MMIO entries" (a56ee9f8f01c), on top of 4.9-rc6 in
  November 2016 beside "KVM: PPC: Book3S HV: Clear the key field of HPTE when the page is
  paged out" (f05859827d28), so 4.10 at the earliest; the exact release is not settled
  here.  The guest keeps all 32 keys.
* ``"2014"`` — the kernel the thread's series was measured against ("Without Fix", v3.15
  era): the same marks and handler as today — key 31 on absent MMIO HPTEs since Paul
  Mackerras's MMIO emulation for HV guests (v3.2), every NO_HPTE fault hash-searched —
  but no MMIO HPTE cache yet, and a paged-out HPTE kept its key (the model's guest sets
  none, so that changes nothing here).  The guest keeps all 32 keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import AuditError
from .hpte import MAX_KEY

AMR_MASK = (1 << 64) - 1
H_SUCCESS = 0
H_PARAMETER = -4  # PAPR hcall return, asm/hvcall.h
H_PTEG_FULL = -6


@dataclass(frozen=True, slots=True)
class PpcEra:
    """How one era marks MMIO and host-swapped HPTEs, and what it leaves the guest."""

    name: str
    mmio_key: int  # 31 in both eras
    swapped_key: int | None  # the thread's 30; None: today's ABSENT with the key cleared
    host_valid_marks: bool  # the host's marks are valid HPTEs that fault on their key
    mmio_cache: bool  # today's per-vCPU MMIO HPTE cache (MMIO_HPTE_CACHE_SIZE)
    summary: str

    @property
    def host_keys(self) -> frozenset[int]:
        """Keys the host uses on *valid* HPTEs, so the AMR must deny them."""
        if not self.host_valid_marks:
            return frozenset()
        keys = {self.mmio_key}
        if self.swapped_key is not None:
            keys.add(self.swapped_key)
        return frozenset(keys)

    @property
    def guest_keys(self) -> tuple[int, ...]:
        """The keys a guest may use in its own HPTEs."""
        return tuple(k for k in range(MAX_KEY + 1) if k not in self.host_keys)


ERAS: dict[str, PpcEra] = {  # the POWER screen cycles today, 2014-keys, 2014
    "2014": PpcEra(
        "2014",
        mmio_key=31,
        swapped_key=None,
        host_valid_marks=False,
        mmio_cache=False,
        summary="before the series: today's marks and hash search, no MMIO HPTE cache",
    ),
    "today": PpcEra(
        "today",
        mmio_key=31,
        swapped_key=None,
        host_valid_marks=False,
        mmio_cache=True,
        summary="key 31 on absent MMIO HPTEs only; every NO_HPTE fault hash-searches",
    ),
    "2014-keys": PpcEra(
        "2014-keys",
        mmio_key=31,
        swapped_key=30,
        host_valid_marks=True,
        mmio_cache=False,
        summary="MMIO key 31, host-swapped key 30, valid HPTEs the AMR denies",
    ),
}
DEFAULT_ERA = "today"


def era_of(name: str) -> PpcEra:
    try:
        return ERAS[name]
    except KeyError:
        raise ValueError(f"unknown POWER era {name!r}: {', '.join(ERAS)}") from None


def amr_bits(key: int, read: bool = True, write: bool = True) -> int:
    """The AMR bits that deny loads (`read`) and/or stores (`write`) for `key`."""
    if not 0 <= key <= MAX_KEY:
        raise ValueError(f"a page-class key is 0-31, not {key}")
    pair = (1 if read else 0) | (2 if write else 0)
    return pair << (62 - 2 * key)


def skey_perm(amr: int, key: int) -> int:
    """`hpte_get_skey_perm()`: 2 bits, 1 = loads denied, 2 = stores denied."""
    return (amr >> (62 - 2 * key)) & 3


def key_denies(amr: int, key: int, store: bool) -> bool:
    """Whether the AMR makes this access a key fault (the kernel's `perm >>= 1` for a
    store, then `perm & 1`)."""
    perm = skey_perm(amr, key)
    if store:
        perm >>= 1
    return bool(perm & 1)


class Amr:
    """The AMR a guest runs with: the host's bits, guarded by AMOR, plus the guest's."""

    def __init__(self, era: PpcEra) -> None:
        self.era = era
        self.host_bits = 0
        for key in sorted(era.host_keys):
            self.host_bits |= amr_bits(key)
        self.amor = AMR_MASK & ~self.host_bits  # the guest may change every other bit
        self.value = self.host_bits

    def guest_write(self, value: int) -> int:
        """`mtspr AMR` in the guest: only the AMOR bits change; returns the new value."""
        self.value = (self.value & ~self.amor) | (value & self.amor & AMR_MASK)
        return self.value

    def denies(self, key: int, store: bool) -> bool:
        return key_denies(self.value, key, store)

    def audit(self) -> None:
        if self.value & self.host_bits != self.host_bits:
            raise AuditError(f"AMR {self.value:#x} lost the host's bits {self.host_bits:#x}")
        for key in self.era.host_keys:
            if not (self.denies(key, False) and self.denies(key, True)):
                raise AuditError(f"AMR allows the host's key {key}")


def key_conflict(era: PpcEra, key: int) -> str:
    """Why a guest HPTE with `key` cannot work in `era` ('' when it can): the thread's
    trade-off.  A guest page with the host's key would key-fault on every access, and
    the host's handler would take it for MMIO (31) or a host-swapped page (30)."""
    if key not in era.host_keys:
        return ""
    meaning = "emulated MMIO" if key == era.mmio_key else "a host-swapped page"
    return (
        f"key {key} is the host's mark for {meaning} in era {era.name}: the AMR denies it "
        f"to the guest, so every access would key-fault into the host, which would treat "
        f"the page as {meaning}"
    )
