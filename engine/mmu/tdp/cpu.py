"""The CPU's side of a guest run on the TDP MMU (`TdpSession`): the accesses the hardware
runs without exiting, its walk of the vCPU's root, and the exits it takes.

An access exits when the CPU's walk of the vCPU's root finds no leaf that allows it (not
present, MMIO, not writable for a write, not executable for a fetch, access-tracked for a
read: EPT violations and misconfigurations, SDM 29.3.3); the exit is the session's
(`_vm_exit`, `TdpMmu.page_fault`, `kvm_mmu_page_fault()` again on RET_PF_RETRY).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NamedTuple

from ...events import FieldValue
from ..fast_pf import fast_words
from ..guest.ept import LAPIC_EOI, NIC_DOORBELL
from ..guest.session import _RET_NAMES, ACCESS_NS, FETCH_RATE, PFERR_WRITE
from ..spte import (
    PT_PAGE_SIZE_MASK,
    PT_PRESENT_MASK,
    PT_WRITABLE_MASK,
    SPTE_BASE_ADDR_MASK,
    SPTE_MMU_PRESENT_MASK,
    RetPf,
)

if TYPE_CHECKING:
    from .pages import TdpMmuPage
    from .session import TdpSession

PAGE_SHIFT = 12
PFERR_FETCH = 1 << 4
MAX_RETRIES = 4
TIGHT_HITS = True  # model-only: False runs every access through the general loop (tests)


class TdpAccess(NamedTuple):
    vcpu: int
    gpa: int
    write: bool
    fetch: bool = False

    @property
    def label(self) -> str:
        return f"gpa {self.gpa:#x}" + (" (fetch)" if self.fetch else "")


def cpu_run(
    session: TdpSession, steps: int, stop: int, ram: list[tuple[int, int, int]]
) -> tuple[int, tuple[int, int, bool, bool], tuple[int, RetPf, str] | None]:
    """Accesses `steps` up to `stop`, as the CPU runs them: an access its walk of the
    vCPU's root allows costs nothing, any other exits (the session's clock and vCPU
    set for its events); one whose vCPU needs `kvm_mmu_reload()` stops the run there,
    as an RCU grace period that a fault's freeing makes end earlier does.  How far it
    got, the last access drawn, and the last exit (access, RET_PF_*, what
    fast_page_fault did).  The walk (TdpMmu.last_spte) starts at the page table it
    ended in last time in this 2M region (`_walks`); the exit test is one mask per
    kind of access (`spte & mask != want`: not present or MMIO, not writable for a
    write, not executable for a fetch, access-tracked for a read).  While every vCPU
    runs on the same root and the workload draws only RAM accesses (kernbench, churn,
    dirty) without races, the hits run in a loop of their own: the same draws, one memo,
    the spte read before the kind of access is drawn and tested against that kind's mask
    in its own branch."""
    mmu = session.mmu
    stat, cfg, pages = mmu.stat, mmu.cfg, mmu.pages
    rng = session._rng
    getrandbits, random, fetch_random = rng.getrandbits, rng.random, session._fetch_rng.random
    nr_vcpus, netperf = session.nr_vcpus, session.workload == "netperf"
    migrate = session.workload == "migrate"
    read = SPTE_MMU_PRESENT_MASK | PT_PRESENT_MASK
    written = SPTE_MMU_PRESENT_MASK | PT_WRITABLE_MASK
    fetch_mask = SPTE_MMU_PRESENT_MASK | cfg.shadow_x_mask | cfg.shadow_nx_mask
    fetch_want = SPTE_MMU_PRESENT_MASK | cfg.shadow_x_mask
    nram, kram = len(ram), len(ram).bit_length()
    by_pa, walk_cache = pages.by_pa, session.walk_cache
    changes = session._memos_checked()
    roots, walks = session._vcpu_roots()
    racing, results, page_fault = session.race_rate, session.results, mmu.page_fault
    listener = mmu._listener  # what _vm_exit()'s _forward_fields() calls
    fault_line = session._fault_line  # a printer's kvm_page_fault, from the values
    ram_only = not (netperf or migrate)
    gpa, gfn, write, fetch, drawn = 0, 0, False, False, True
    fetch_rate = FETCH_RATE
    exited: tuple[int, RetPf, str] | None = None
    at = steps
    reload_at = _first_unloaded(roots, at)  # the run stops before it: kvm_mmu_reload()
    limit = min(stop, reload_at)
    # RAM draws only, no races, one root for every vCPU: the hits run in a tighter loop
    # (no vCPU's memo to pick; write and fetch are told by the mask, at the exit)
    one_root = TIGHT_HITS and ram_only and not racing and roots.count(roots[0]) == nr_vcpus
    memo, root = walks[0], roots[0]
    while at < limit:
        if one_root and root is not None:
            drawn, first = False, at + 1
            for at in range(first, limit + 1):  # noqa: B007 (`at`: the accesses run so far)
                r = getrandbits(kram)
                while r >= nram:
                    r = getrandbits(kram)
                base_gfn, npages, kpages = ram[r]
                r = getrandbits(kpages)
                while r >= npages:
                    r = getrandbits(kpages)
                gfn = base_gfn + r
                try:  # the walk (no draws) before the kind of access is drawn
                    spt, index = memo[gfn >> 9]
                    spte = spt[index] if index >= 0 else spt[gfn & 511]
                except KeyError:
                    spte = _walk(root, gfn, by_pa, memo if walk_cache else None)
                if random() < 0.3:
                    if spte & written != written:
                        write, fetch = True, False
                        break
                elif fetch_random() < fetch_rate:
                    if spte & fetch_mask != fetch_want:
                        write, fetch = False, True
                        break
                elif spte & read != read:
                    write = fetch = False
                    break
            else:
                continue  # the run ended without an exit
            vcpu = (at - 1) % nr_vcpus
        else:
            vcpu = at % nr_vcpus
            drawn = False  # by the workload's own draws (migrate's, netperf's)
            if not ram_only:
                hot = session.hot_access(rng) if migrate else None
                if hot is not None:
                    gpa, write, fetch, drawn = hot[0] << PAGE_SHIFT, hot[1], False, True
                elif netperf and random() < 0.7:
                    gpa = NIC_DOORBELL if random() < 0.8 else LAPIC_EOI
                    write, fetch, drawn = True, False, True
            if drawn:
                gfn = gpa >> PAGE_SHIFT
                mask = want = written if write else read
            else:
                r = getrandbits(kram)
                while r >= nram:
                    r = getrandbits(kram)
                base_gfn, npages, kpages = ram[r]
                r = getrandbits(kpages)
                while r >= npages:
                    r = getrandbits(kpages)
                gfn = base_gfn + r  # (its gpa made only for an exit and at the end)
                if random() < 0.3:
                    write, fetch = True, False
                    mask = want = written
                else:
                    write, fetch = False, fetch_random() < fetch_rate
                    if fetch:
                        mask, want = fetch_mask, fetch_want
                    else:
                        mask = want = read
            at += 1
            memo = walks[vcpu]
            try:
                spt, index = memo[gfn >> 9]
                spte = spt[index] if index >= 0 else spt[gfn & 511]
            except KeyError:
                sp = roots[vcpu]
                assert sp is not None
                spte = _walk(sp, gfn, by_pa, memo if walk_cache else None)
            if spte & mask == want:
                continue
        if not drawn:
            gpa = gfn << PAGE_SHIFT
        session.steps, session._vcpu, mmu.now_ns = at, vcpu, (at - 1) * ACCESS_NS
        before = stat["pf_fast"]
        if racing:
            ret = session._exit(TdpAccess(vcpu, gpa, write, fetch))
            roots, walks = session._vcpu_roots()  # a racing vCPU may have loaded one
            reload_at = _first_unloaded(roots, at)
        else:  # _exit() and _fault(), inline: its first fault
            session.exits += 1
            if fault_line is not None or listener is not None:  # _vm_exit()
                code = (PFERR_WRITE if write else 0) | (PFERR_FETCH if fetch else 0)
            if fault_line is not None:
                fault_line(vcpu, gpa, code)
            elif listener is not None:
                fields: dict[str, FieldValue] = {
                    "vcpu_id": vcpu,
                    "fault_address": gpa,
                    "error_code": code,
                }
                listener("kvm_page_fault", fields)
            ret = page_fault(vcpu, gpa, write, fetch, None, spte)
            name = _RET_NAMES[ret]  # _result()
            results[name] = results.get(name, 0) + 1
            if ret is RetPf.RETRY:
                access = TdpAccess(vcpu, gpa, write, fetch)
                if session.needs_exit(access):
                    ret = session._exit(access, MAX_RETRIES - 1)
        fast = fast_words(cfg, mmu.fast_pf.last) if stat["pf_fast"] != before else ""
        exited = (at - 1, ret, fast)
        if pages.paging_changes != changes:  # tables linked or taken out
            changes = session._memos_checked()
            if pages.rcu_pending:  # page tables freed: a grace period ends sooner
                stop = min(stop, max(at, session._tick_step()))
        limit = min(stop, reload_at)
    if not drawn:
        gpa = gfn << PAGE_SHIFT
    if at == reload_at and at < stop:  # the vCPU of access `at` has no valid root
        return at, (at % nr_vcpus, gpa, write, fetch), exited
    return at, ((at - 1) % nr_vcpus, gpa, write, fetch), exited


def _walk(
    root: TdpMmuPage,
    gfn: int,
    by_pa: dict[int, TdpMmuPage],
    memo: dict[int, tuple[list[int], int]] | None,
) -> int:
    """The CPU's walk of `root` for `gfn` from the top: the spte it ends at (a leaf, not
    present, or level 1), remembered in `memo` by its table and index: above level 1 the
    same for every gfn of the 2M region, -1 in a 4K table (the index is gfn & 511)."""
    sp, level = root, root.role.level
    while True:
        spte = sp.spt[(gfn >> (9 * level - 9)) & 511]
        if level == 1 or not spte & SPTE_MMU_PRESENT_MASK or spte & PT_PAGE_SIZE_MASK:
            break
        sp = by_pa[spte & SPTE_BASE_ADDR_MASK]
        level -= 1
    if memo is not None:
        memo[gfn >> 9] = (sp.spt, (gfn >> (9 * level - 9)) & 511 if level > 1 else -1)
    return spte


def _first_unloaded(roots: list[TdpMmuPage | None], at: int) -> int:
    """The first access from `at` on whose vCPU has no valid root (sys.maxsize: none)."""
    nr_vcpus, first = len(roots), sys.maxsize
    for vcpu, root in enumerate(roots):
        if root is None:
            first = min(first, at + (vcpu - at) % nr_vcpus)
    return first
