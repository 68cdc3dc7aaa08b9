"""Captions against the threads and the kernel's history: what a re-check of every step
against the five threads and the screen found wrong, each finding with words its caption
must now say and words it must no longer say (what the screen shows beside it is each
step's `shows`, checked in tests/test_scenario_steps.py)."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from mmuscope.engine.scenarios import load_scenario


class Finding(NamedTuple):
    scenario: str
    step: int  # 1-based, as the caption's title counts
    says: tuple[str, ...]  # words the caption must have
    not_says: tuple[str, ...]  # words it must not
    why: str


FINDINGS = [
    Finding(
        "fast-zap",
        1,
        ("'2019 era'", "where 2013 counted up"),
        ("direct MMU of 2013",),
        "the screen shows today's mmu_valid_gen, the 0/1 flag of 2019, beside '2013'",
    ),
    Finding(
        "fast-zap",
        4,
        ("cond_resched_lock", "an rwlock since 2021"),
        ("batches (cond_resched_rwlock_write)",),
        "2013 dropped a spinlock with cond_resched_lock; mmu_lock became an rwlock in 2021",
    ),
    Finding(
        "fast-zap-today",
        2,
        ("kvm_mmu_invalidate_memslot_pages", "increments mmu_valid_gen"),
        ("kvm_mmu_zap_all_fast flips",),
        "the 2013 patch incremented the generation; kvm_mmu_zap_all_fast and the flip are 2019's",
    ),
    Finding(
        "fast-zap-today",
        4,
        ("FROZEN_SPTE since 6.10",),
        ("frozen (REMOVED_SPTE)",),
        "today's name, as the screen draws it, is FROZEN_SPTE (6.10+)",
    ),
    Finding(
        "pv-tlb-flush",
        1,
        ("drawn ▒ (waiting on preempted)",),
        ("red ▓",),
        "the lanes and the legend draw a sender waiting on a preempted target as ▒",
    ),
    Finding(
        "pv-tlb-flush",
        5,
        ("The protocol on screen, 'flush_on_enter', is today's KVM_VCPU_FLUSH_TLB",),
        ("Today's KVM does that with",),
        "the header and panels name the protocol flush_on_enter: the caption says what it is",
    ),
    Finding(
        "power-keys",
        4,
        ("8.438 s of real time",),
        ('"real0m8.438s"',),
        "the archive glued `time`'s label to its value; the caption gives the number",
    ),
    Finding(
        "power-keys",
        5,
        ("which key marks which is mmuscope's inference",),
        ("valid HPTEs with keys 31 and 30",),
        "the thread names keys 30 and 31 together, never which one marks MMIO",
    ),
    Finding(
        "power-keys",
        6,
        ('"Now with that we can implement keys for guest if we want to"',),
        ("overstates what the guest keeps",),
        "Aneesh answered Ben: guest keys could be supported once protection faults go to the host",
    ),
    Finding(
        "mmio-caching",
        2,
        ("mmio_info_in_cache", "'mmio info hits'"),
        ("KVM finds the MMIO spte with the current generation (handle_mmio_page_fault)",),
        "the doorbell's store hits vCPU 0's MMIO info cache; the traced walk is the LAPIC's",
    ),
    Finding(
        "mmio-generation-wrap",
        1,
        ("answered by that cache",),
        ("the second hits it (handle_mmio_page_fault)",),
        "the second store is answered by the MMIO info cache, before any spte is read",
    ),
    Finding(
        "memslot-search",
        3,
        ("mmuscope's reconstruction of the RFC's tree",),
        (),
        "the 71-node worst lookup is the model's reading of an archived patch cut short",
    ),
    Finding(
        "memslot-search",
        5,
        ('"with device assignment, rare == never, since those pages are pinned"',),
        ("BARs, which take",),
        "Avi argued device-assigned pages fault once: the BARs' share is the model's mix",
    ),
    Finding(
        "rmap-fork-storm",
        3,
        ("8 + 15 × 8 = 128 B", "the spte_count that patch 8/9"),
        (),
        "15 entries already fit 128 B; Sean's 14 leaves room for 8/9's per-descriptor count",
    ),
    Finding(
        "vtlb",
        5,
        ("Here none ran", "unsync (~)"),
        ("each emulation's gva_to_gpa asks the vtlb",),
        "the step emulates nothing: the caption says why no walk is saved, not that one is",
    ),
    Finding(
        "fast-page-fault",
        1,
        ("no PML", "no manual protect"),
        ("as a live migration does",),
        "an EPT host with PML clears D bits and takes no fast_page_fault: name the setting",
    ),
    Finding(
        "fast-page-fault",
        3,
        ("without manual protect", "KVM_CLEAR_DIRTY_LOG"),
        ("the migration's next pass",),
        "QEMU's manual protect re-protects at CLEAR time, not at GET",
    ),
    Finding(
        "mmio-generation-wrap",
        2,
        ("(kvm_stat's mark_mmio_spte:", "stays stale (◇) until its next store"),
        ("(hollow diamond: stale)",),
        "no hollow diamond is drawn after the store: the doorbell's spte is fresh again",
    ),
    Finding(
        "real-kvm",
        1,
        ("a parent maps 4 pages", "shares 16 pages"),
        ("a parent maps 16 pages",),
        "the model's fork lab shares 4 pages (mmu_rmaps_stat counts 4); the kernel's guest 16",
    ),
    Finding(
        "real-kvm",
        2,
        ("KVM shadow-pages (kvm-pvm", "the TDP MMU keeps no rmaps"),
        ("is 12 on a shadow-paging host, not",),
        "the kernel's numbers hold where KVM shadow-pages; an EPT host's TDP MMU has no rmaps",
    ),
    Finding(
        "real-kvm",
        2,
        ("under the mmu_rmaps_stat bars ('this machine's KVM')", "Without KVM, the panel says"),
        ("The note shows",),
        "the kernel's numbers were only in a pop-up: they are drawn in a panel now",
    ),
    Finding(
        "real-kvm",
        3,
        ("On a shadow-MMU host", "one of the model's children exits (pte_list_remove)"),
        (),
        "the numbers hold on a shadow-MMU host; the step's child exit was silent",
    ),
]


@pytest.mark.parametrize("finding", FINDINGS, ids=lambda f: f"{f.scenario}-{f.step}")
def test_the_caption_states_the_fixed_fact(finding: Finding) -> None:
    caption = " ".join(load_scenario(finding.scenario).steps[finding.step - 1].caption.split())
    for words in finding.says:
        assert words in caption, f"{finding.scenario} step {finding.step}: {finding.why}"
    for words in finding.not_says:
        assert words not in caption, f"{finding.scenario} step {finding.step}: {finding.why}"
