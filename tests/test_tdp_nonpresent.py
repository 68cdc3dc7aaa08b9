"""The TDP MMU's non-present and frozen sptes, by era.

6.10+ (spte.h, tdp_mmu.c 6.18): a new page table comes from `mmu_shadow_page_cache`, whose
`init_value` is `SHADOW_NONPRESENT_VALUE` (BIT(63)); a zapped spte is set to it
(`tdp_mmu_zap_spte_atomic`, `tdp_mmu_zap_root`); `handle_removed_pt` and the atomic zap
freeze an spte to `FROZEN_SPTE` = SHADOW_NONPRESENT_VALUE | 0x5a0.  Before 6.10 the values
were 0 and `REMOVED_SPTE` (0x5a0): `SpteConfig.nonpresent_era = "before-6.10"`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mmuscope.engine import Vm
from mmuscope.engine.events import Event
from mmuscope.engine.mmu.params import TdpMmuParams
from mmuscope.engine.mmu.spte import (
    FROZEN_SPTE,
    REMOVED_SPTE,
    SHADOW_NONPRESENT_VALUE,
    SPTE_CONFIGS,
    is_shadow_present_pte,
)
from mmuscope.engine.mmu.tdp.iter import TdpIter
from mmuscope.engine.mmu.tdp.mmu import TdpMmu
from mmuscope.engine.replay.records import NONE, classify
from mmuscope.engine.trace.lines import parse_trace

MMUSCOPE = str(Path(sys.executable).with_name("mmuscope"))
GIB = 1 << 30
ERAS = [("ept", SHADOW_NONPRESENT_VALUE, FROZEN_SPTE), ("2011-no-mmio-cache", 0, REMOVED_SPTE)]


def mapped(config: str) -> tuple[TdpMmu, list[Event]]:
    vm = Vm()
    vm.set_user_memory_region(0, 0, 0, 4 * GIB, 0x7F00_0000_0000)
    events: list[Event] = []
    mmu = TdpMmu(vm, SPTE_CONFIGS[config], TdpMmuParams(host_level=1), events.append)
    mmu.page_fault(0, 0x1234_5000, write=True)
    return mmu, events


@pytest.mark.parametrize(("config", "nonpresent", "frozen"), ERAS)
def test_new_tables_hold_the_eras_nonpresent_value(
    config: str, nonpresent: int, frozen: int
) -> None:
    mmu, events = mapped(config)
    assert mmu.cfg.frozen_spte == frozen
    for sp in mmu.pages.pages():
        present = [i for i, s in enumerate(sp.spt) if is_shadow_present_pte(s)]
        assert len(present) == 1  # the walk's one spte per level
        assert all(s == nonpresent for i, s in enumerate(sp.spt) if i not in present)
    changed = [e.fields for e in events if e.name == "kvm_tdp_mmu_spte_changed"]
    assert len(changed) == 4 and all(f["old_spte"] == nonpresent for f in changed)
    mmu.audit()


@pytest.mark.parametrize(("config", "nonpresent", "frozen"), ERAS)
def test_a_zapped_spte_is_nonpresent_and_a_removed_table_frozen(
    config: str, nonpresent: int, frozen: int
) -> None:
    mmu, events = mapped(config)
    root = mmu.roots[0]
    it = TdpIter(mmu.pages.by_pa, root, 1, 0x12345)
    while it.try_step_down():
        pass
    assert it.level == 1 and is_shadow_present_pte(it.old_spte)
    events.clear()
    assert mmu.tdp_mmu_zap_spte_atomic(it) == 0
    assert it.pt.spt[it.index] == nonpresent and mmu.frozen_seen == 1
    (zap,) = [e.fields for e in events if e.name == "kvm_tdp_mmu_spte_changed"]
    assert zap["new_spte"] == nonpresent
    mmu.audit()
    mmu.kvm_mmu_zap_all_fast()  # mmu_lock shared: every entry of each removed table frozen
    pending = list(mmu.pages.rcu_pending.values())
    assert pending and all(s == frozen for sp in pending for s in sp.spt)
    assert mmu.pages.rcu_frozen == 512 * len(pending)
    mmu.audit()


def test_replay_classifies_the_6_10_values_as_not_present() -> None:
    for level in (1, 2, 4):
        assert classify(SHADOW_NONPRESENT_VALUE, level) == NONE
        assert classify(FROZEN_SPTE, level) == NONE


def test_the_printed_first_map_shows_old_spte_bit_63() -> None:
    """mmutrace.h `kvm_tdp_mmu_spte_changed`: "old_spte %llx", as 6.18 prints a first map."""
    done = subprocess.run(
        [MMUSCOPE, "simulate", "--mmu", "tdp", "--workload", "kernbench", "--accesses", "5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    first = next(line for line in done.stdout.splitlines() if "kvm_tdp_mmu_spte_changed" in line)
    assert "as id 0 gfn 0 level 4 old_spte 8000000000000000 new_spte 8" in first
    events = [e for e in parse_trace(done.stdout)[0] if e.name == "kvm_tdp_mmu_spte_changed"]
    assert events[0].fields["old_spte"] == SHADOW_NONPRESENT_VALUE
