"""The aligner (`engine.kvm.align`): two event sequences compared pair by pair, the first
difference reported at its position with its kind and three events of context, host
pfns and shadow-page addresses compared as a consistent renaming."""

from __future__ import annotations

from mmuscope.engine.events import Event
from mmuscope.engine.kvm.align import CONTEXT, Alignment, kind_table


def set_spte(gfn: int, pfn: int, sptep: int = 0xFFFF_8880_0100_0000) -> Event:
    """`kvm_mmu_set_spte` of a writable user 4K leaf at `gfn`, host page `pfn`."""
    fields = {"gfn": gfn, "spte": pfn << 12 | 0x8000_0000_0000_0877, "sptep": sptep + 8 * gfn,
              "level": 1, "r": 1, "x": 0, "u": 1}  # fmt: skip
    return Event("kvm_mmu_set_spte", fields)


def requested(gfn: int, pfn: int) -> Event:
    return Event("kvm_mmu_spte_requested", {"gfn": gfn, "pfn": pfn, "level": 1})


def faults(gfns: list[int], pfn_base: int) -> list[Event]:
    """Demand faults on `gfns`: each a requested spte, then the spte set."""
    out: list[Event] = []
    for gfn in gfns:
        out += [requested(gfn, pfn_base + gfn), set_spte(gfn, pfn_base + gfn)]
    return out


def align(kernel: list[Event], model: list[Event]) -> Alignment:
    alignment = Alignment()
    alignment.add_kernel(kernel)
    for event in model:
        alignment.add_model(event)
    alignment.finish()
    return alignment


KERNEL = faults(list(range(10, 18)), 0x1234_00)  # 16 events, host pfns of this host
MODEL = faults(list(range(10, 18)), 0x77_00)  # the same, other host pfns


def test_equal_sequences_are_equal_under_a_renaming_of_host_pages() -> None:
    alignment = align(KERNEL, MODEL)
    assert alignment.first is None and alignment.equal
    assert alignment.events() == {"kernel": 16, "model": 16, "compared": 16}
    assert kind_table(alignment.kinds())[0].split() == ["event", "kernel", "model", "equal"]
    assert kind_table(alignment.kinds())[1].split() == ["kvm_mmu_set_spte", "8", "8", "8"]


def test_a_missing_event_is_reported_at_its_position() -> None:
    model = MODEL[:5] + MODEL[6:]  # the third fault's kvm_mmu_set_spte left out
    first = align(KERNEL, model).first
    assert first is not None and first.position == 5
    assert first.kind == "missing", first.summary()
    assert first.kernel is KERNEL[5] and first.model is model[5]
    assert first.summary().startswith("the model lacks the kernel's kvm_mmu_set_spte")
    assert first.kernel_before == KERNEL[5 - CONTEXT : 5]
    assert first.model_before == model[5 - CONTEXT : 5]
    assert first.kernel_after == KERNEL[6 : 6 + CONTEXT]
    assert first.model_after == model[6 : 6 + CONTEXT]


def test_an_extra_event_is_reported_at_its_position() -> None:
    model = [*MODEL[:9], set_spte(0x99, 0x7799), *MODEL[9:]]
    first = align(KERNEL, model).first
    assert first is not None and first.position == 9 and first.kind == "extra"
    assert first.model is model[9] and first.kernel is KERNEL[9]
    assert "extra kvm_mmu_set_spte" in first.summary()


def test_a_reordering_is_reported_at_its_position() -> None:
    model = [*MODEL[:6], MODEL[7], MODEL[6], *MODEL[8:]]
    first = align(KERNEL, model).first
    assert first is not None and first.position == 6 and first.kind == "reordered"
    assert first.kernel is KERNEL[6] and first.model is MODEL[7]


def test_a_changed_field_is_named_with_both_values() -> None:
    model = list(MODEL)
    model[3] = Event("kvm_mmu_set_spte", {**MODEL[3].fields, "level": 2})
    first = align(KERNEL, model).first
    assert first is not None and first.position == 3 and first.kind == "different"
    assert first.why == "kvm_mmu_set_spte: level 0x1 in the kernel, 0x2 in the model"
    # only spte bits other than the pfn are compared: a writable bit less is a difference
    model[3] = Event("kvm_mmu_set_spte", {**MODEL[3].fields, "spte": MODEL[3].fields["spte"] ^ 2})
    first = align(KERNEL, model).first
    assert first is not None and "spte 0x8000000000000877 in the kernel" in first.why


def test_one_host_page_must_stay_one_model_page() -> None:
    model = list(MODEL)
    model[2] = requested(11, 0x77_00 + 10)  # gfn 11 on the model page gfn 10 already has
    first = align(KERNEL, model).first
    assert first is not None and first.position == 2
    assert (
        first.why
        == "kvm_mmu_spte_requested: pfn: model pfn 0x770a was kernel 0x12340a, here 0x12340b"
    )
    model = list(MODEL)
    model[3] = set_spte(11, 0x77_00 + 12)  # the spte is not on the page it was requested
    first = align(KERNEL, model).first
    assert first is not None and first.position == 3
    assert first.why == "kvm_mmu_set_spte: spte: kernel pfn 0x12340b was model 0x770b, here 0x770c"


def test_a_sequence_that_ends_early_is_a_difference() -> None:
    first = align(KERNEL, MODEL[:-2]).first
    assert first is not None and first.position == 14 and first.kind == "ended"
    assert first.model is None and first.kernel is KERNEL[14]
    assert "no more events" in "\n".join(first.lines())


def test_events_one_side_cannot_emit_are_left_out() -> None:
    kernel = [Event("kvm_fpu", {"load": 1}), *KERNEL, Event("kvm_userspace_exit", {"reason": 6})]
    assert align(kernel, MODEL).equal


def test_each_vcpu_is_its_own_sequence() -> None:
    """The kernel's vCPU threads interleave as they run; the model's are in vCPU order."""
    a, b = faults([1, 2], 0x500), faults([3, 4], 0x600)
    kernel = [Event(e.name, e.fields, pid=100 + i % 2) for i, e in enumerate(
        x for pair in zip(a, b, strict=True) for x in pair)]  # fmt: skip
    alignment = Alignment()
    alignment.add_kernel(kernel)
    for event in faults([1, 2], 0x10):
        alignment.add_model(event, vcpu=0)
    for event in faults([3, 4], 0x20):
        alignment.add_model(event, vcpu=1)
    assert alignment.finish() is None and alignment.compared == 8


def zap(gfn: int) -> Event:
    fields = {"gen": 0, "gfn": gfn, "level": 1, "gpte_bytes": 8, "quadrant": 0, "direct": False,
              "access": 7, "invalid": False, "nxe": True, "ad": True, "root_count": 0,
              "unsync": False}  # fmt: skip
    return Event("kvm_mmu_prepare_zap_page", fields)


def test_a_zapped_shadow_pages_host_page_may_come_back_as_another() -> None:
    """The kernel's page allocator hands a freed shadow page's page to the next one; the
    model numbers its pages on.  Zapped, the pair leaves the renaming; not zapped, the
    same kernel page for a new model page is a difference."""
    old = 0xFFFF_8880_0100_0000
    kernel = [set_spte(1, 0x501, old), zap(0x90), set_spte(2, 0x502, old)]
    model = [set_spte(1, 0x11, 0x1_0000_0000), zap(0x90), set_spte(2, 0x12, 0x1_0000_5000)]
    alignment = Alignment()
    alignment.add_kernel(kernel)
    alignment.add_model(model[0])
    alignment.add_model(model[1], freed=0x1_0000_0000 >> 12)
    alignment.add_model(model[2])
    assert alignment.finish() is None
    first = align(kernel, model).first  # the zap not said to free the page
    assert first is not None and first.position == 2
    assert first.why.startswith("kvm_mmu_set_spte: sptep: kernel page 0xffff888001000 was")
