"""A QEMU guest's memslots in every address space QEMU registers with KVM, from one
``info mtree`` dump.

QEMU gives KVM one memory listener per address space it registers, each with its own
slot ids (``kvm_get_free_slot``) and the as_id in bits 16.. of the uapi slot
(``kvm_set_user_memory_region``: ``slot->slot | (kml->as_id << 16)``):

- as_id 0: ``address_space_memory``, printed as ``memory`` (accel/kvm/kvm-all.c
  ``kvm_init``: ``kvm_memory_listener_register(s, &s->memory_listener,
  &address_space_memory, 0, "kvm-memory")``);
- as_id 1: ``KVM-SMRAM``, only on x86 and only for a guest with SMM (target/i386/kvm/kvm.c
  ``register_smram_listener``: ``address_space_init(&smram_address_space, &smram_as_root,
  "KVM-SMRAM")``, then ``kvm_memory_listener_register(..., 1, "kvm-smram")``).

`mtree_guest` loads both; where the dump has no ``KVM-SMRAM`` it says so
(`MtreeGuest.missing`) and address space 1 has no memslots, as in such a guest.
"""

from __future__ import annotations

from dataclasses import dataclass

from .layout import Layout, layout_from_address_spaces
from .qemu_mtree import MtreeError, MtreeSlots, list_address_spaces, read_mtree

KVM_ADDRESS_SPACES: tuple[tuple[int, str], ...] = ((0, "memory"), (1, "KVM-SMRAM"))


@dataclass(frozen=True, slots=True)
class MtreeGuest:
    layout: Layout
    spaces: dict[int, MtreeSlots]  # as_id -> its slots and the rule that gave them
    missing: dict[int, str]  # as_id -> why it has no memslots

    def notes(self) -> list[str]:
        """One line per KVM address space: where its slots came from, or why none."""
        lines = []
        for as_id, name in KVM_ADDRESS_SPACES:
            if as_id in self.spaces:
                slots = self.spaces[as_id]
                lines.append(f"as {as_id} {slots.describe()}: {len(slots.regions)} slots")
            else:
                lines.append(f"as {as_id} {name}: {self.missing[as_id]}")
        return lines


def mtree_guest(text: str, name: str, *, source: str = "the input") -> MtreeGuest:
    """Both KVM address spaces of an ``info mtree [-f]`` dump; `MtreeError` (one line)
    when the text is not a dump or has no system address space."""
    present = list_address_spaces(text)
    spaces: dict[int, MtreeSlots] = {}
    missing: dict[int, str] = {}
    for as_id, space in KVM_ADDRESS_SPACES:
        if as_id and space not in present:
            missing[as_id] = (
                f"not in {source}, so no memslots (QEMU registers it for a guest with SMM)"
            )
            continue
        try:
            spaces[as_id] = read_mtree(text, space, source=source)
        except MtreeError:
            if not as_id:
                raise
            missing[as_id] = f"printed without ranges in {source}, so no memslots"
    regions = {
        as_id: [(r.name, r.gpa, r.size, r.readonly) for r in slots.regions]
        for as_id, slots in spaces.items()
    }
    smram = f", {len(spaces[1].regions)} in KVM-SMRAM" if 1 in spaces else "; no KVM-SMRAM"
    title = f"{name} ({len(spaces[0].regions)} slots from QEMU{smram})"
    return MtreeGuest(layout_from_address_spaces(name, regions, title), spaces, missing)
