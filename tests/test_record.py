"""engine.record: the frozen records that stand in for `@dataclass(frozen=True, slots=True)`
behave as the dataclasses did (equality and hash by the fields' tuple, repr, frozen,
replace, copy and pickle), and the simulate command's start-up no longer imports the
dataclasses module."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys

import pytest
from mmuscope.engine.events import Event
from mmuscope.engine.memslots.memslot import MemorySlot
from mmuscope.engine.mmu.role import KvmMmuPageRole, role_field_names
from mmuscope.engine.mmu.spte import SPTE_CONFIGS, SpteConfig
from mmuscope.engine.record import FrozenRecordError, replace


def test_equality_hash_and_repr_are_the_dataclass_ones() -> None:
    slot = MemorySlot(1, 0, 0x100, 16, flags=2)
    assert slot == MemorySlot(id=1, as_id=0, base_gfn=0x100, npages=16, flags=2)
    assert slot != MemorySlot(1, 0, 0x100, 16) and slot != (1, 0, 0x100, 16, 2, 0)
    assert hash(slot) == hash((1, 0, 0x100, 16, 2, 0))
    assert repr(slot) == (
        "MemorySlot(id=1, as_id=0, base_gfn=256, npages=16, flags=2, userspace_addr=0)"
    )
    assert repr(Event("x")) == "Event(name='x', fields={}, ts=0.0, cpu=0, pid=0, comm='mmuscope')"
    assert Event("x").fields is not Event("x").fields  # a dict of its own, as default_factory


def test_frozen_replace_copy_and_pickle() -> None:
    role = KvmMmuPageRole(level=4, direct=1)
    with pytest.raises(FrozenRecordError):
        role.level = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del role.smm  # type: ignore[misc]
    child = replace(role, level=3)
    assert child.level == 3 and child.direct == 1 and role.level == 4
    with pytest.raises(ValueError, match="does not fit"):
        replace(role, level=16)  # the checks of __init__ run again
    for record in (role, SPTE_CONFIGS["ept-no-ad"], MemorySlot(2, 1, 0, 8)):
        assert copy.copy(record) == record == copy.deepcopy(record)
        assert pickle.loads(pickle.dumps(record)) == record
    assert role_field_names()[0] == "level" and role_field_names()[-1] == "smm"


def test_derived_fields_are_compared_but_not_shown() -> None:
    cfg = SpteConfig(ept=False, host_phys_bits=52)
    assert cfg == SpteConfig(ept=False, host_phys_bits=52) != SPTE_CONFIGS["shadow"]
    assert "shadow_mmio_value" not in repr(cfg) and cfg.shadow_mmio_value == 0
    assert replace(cfg, host_phys_bits=46) == SPTE_CONFIGS["shadow"]


def test_simulate_start_up_imports_no_dataclasses() -> None:
    code = (
        "import sys; from mmuscope.tui.cli import main; "
        "main(['simulate', '--mmu', 'tdp', '--workload', 'kernbench', '--accesses', '3']); "
        "print(sorted({'dataclasses', 'inspect'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
