"""`mmuscope live` on the real tracefs with a real guest: its own instance records while
`mmuscope kvm` runs a program on this host's KVM; the global tracing switches are left
exactly as they were, and the instance is gone afterwards."""

from __future__ import annotations

import subprocess
from pathlib import Path

from mmuscope.engine.kvm.tracing import find_tracefs
from mmuscope.engine.replay.live import LiveTimeline
from mmuscope.tui.app import make_app
from mmuscope.tui.live import live_instance
from mmuscope.tui.screens.replay import ReplayScreen
from mmuscope.tui.widgets.events import EventPanel

from tests.kvm_host import MMUSCOPE, needs_tracing, our_instances


def _global_switches(root: Path) -> tuple[str, str, str]:
    return tuple(  # type: ignore[return-value]
        (root / name).read_text()
        for name in ("tracing_on", "events/kvmmmu/enable", "events/kvm/enable")
    )


@needs_tracing
async def test_live_follows_a_real_guest_in_its_own_instance(tmp_path: Path) -> None:
    root = find_tracefs()
    before = _global_switches(root)
    with live_instance(root) as instance:
        assert instance.parent == root / "instances" and "mmuscope" in instance.name
        app = make_app(tracefs=instance, export_dir=tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.screen
            assert isinstance(screen, ReplayScreen)
            timeline = screen.timeline
            assert isinstance(timeline, LiveTimeline)
            guest = subprocess.Popen(
                [str(MMUSCOPE), "kvm", "touch", "--pages", "30", "--summary"],
                stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            assert guest.wait(60) == 0

            def ours(name: str) -> int:  # other VMs of the host may run meanwhile
                return sum(e.name == name and e.pid == guest.pid for e in timeline.window)

            for _ in range(200):
                if ours("kvm_mmu_set_spte") >= 31:
                    break
                await pilot.pause(0.05)
            assert ours("kvm_mmu_set_spte") == 31  # 30 data pages and the code page
            assert ours("kvm_mmu_get_page") == 5 and ours("kvm_mmio") == 1
            totals = screen.query_one(EventPanel).counters.totals
            assert totals["kvm_mmu_get_page"] >= 5 and timeline.model.set_sptes >= 31
    assert _global_switches(root) == before
    assert not our_instances()
