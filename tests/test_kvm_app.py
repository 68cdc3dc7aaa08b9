"""`mmuscope kvm PROGRAM` in the app: the replay screen follows a real guest run on this
host's KVM (a child process), with the kernel's statistics beside kvm_stat's counts and
a header saying what ran where.  Skips with the reason without /dev/kvm or root."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest
from mmuscope.engine.replay.live import LiveTimeline
from mmuscope.engine.scenarios.checks import failures, unshown
from mmuscope.tui.app import make_app
from mmuscope.tui.kvm_app import child_argv, preflight
from mmuscope.tui.kvm_launch import KvmLaunch
from mmuscope.tui.screens.kvm_replay import ComparePanel, KernelStats
from mmuscope.tui.widgets.events import EventPanel

from tests.kvm_host import needs_tracing, our_instances
from tests.kvm_recorded import run_read_whole
from tests.test_scenario_steps import cut_panels
from tests.tui_pilot import screen_text


@needs_tracing
async def test_the_replay_screen_follows_a_real_fork_storm(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "trace")
    args = argparse.Namespace(program="fork", pages=8, children=4, trace_out=None)
    launch = KvmLaunch("fork", child_argv(args, tmp_path), tmp_path, preflight())
    app = make_app(kvm=launch, export_dir=tmp_path)
    async with app.run_test(size=(140, 44)) as pilot:
        screen = await run_read_whole(pilot, set_sptes=5 * 9)
        timeline = screen.timeline
        assert isinstance(timeline, LiveTimeline)
        # 5 processes each map the code page and the 8 shared pages
        assert timeline.model.set_sptes == 5 * 9
        assert screen.query_one(EventPanel).counters.totals["kvm_mmu_get_page"] == 5 * 5
        assert (
            screen.kernel_stats["max_mmu_rmap_size"] == 4
        )  # the PTE_LIST_EXT thread's storm, by one
        assert "max_mmu_rmap_size" in str(screen.query_one(KernelStats).content)
        if "shadow MMU" in screen.title:  # the comparison, slice by slice: all equal
            assert screen.rows and all(r["explained"] is None for r in screen.rows)
            assert screen.compare is not None and screen.compare["equal"] is True
            shown = str(screen.query_one(ComparePanel).content)
            assert "0 differ" in shown and "events equal" in shown, shown
            rows = [line.split() for line in shown.splitlines()]
            assert ["kvm_mmu_get_page", "25", "25", "25"] in rows, shown
        assert "MMU" in screen.title and os.uname().release in screen.title
        assert screen.last_insn.startswith("mov %bl,(%rax) @0x")  # the doorbell, decoded
    assert screen.child is not None and screen.child.returncode == 0
    assert not our_instances()


@needs_tracing
async def test_the_classroom_scenario_runs_the_storm_on_the_real_kernel(tmp_path: Path) -> None:
    from mmuscope.tui.screens.rmaps import RmapScreen

    app = make_app(scenario="real-kvm", export_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.1)
        await pilot.press("greater_than_sign")
        screen = app.screen
        assert isinstance(screen, RmapScreen)
        for _ in range(300):
            if screen.kernel_note:
                break
            await pilot.pause(0.05)
        note = screen.kernel_note
        if "(shadow MMU)" in note:  # the 64-page budget zaps the oldest processes' pages
            assert "max_mmu_rmap_size 12" in note and "105 shadow pages" in note, note
        assert len(screen.lab.children) == 20  # the model's storm beside it
        # the kernel's numbers are drawn in a panel (pop-ups cleared away), at 120×40 and
        # at 80×24, where the README says this scenario works; then step 3's exit
        run = app.scenario_run
        assert run is not None
        for index in (1, 2):
            if index == 2:
                await pilot.press("greater_than_sign")
            scenario = run.scenario
            assert run.index == index and not failures(scenario.steps[index].expect, run.values())
            for size in ((120, 40), (80, 24)):
                await pilot.resize_terminal(*size)
                app.clear_notifications()
                await pilot.pause()
                await pilot.pause()  # the panels laid out again fit their rows: one more frame
                missing = unshown(scenario.steps[index].shows, run.values(), screen_text(app))
                assert not missing, f"real-kvm step {index + 1} at {size}: {missing}"
                assert not cut_panels(app), f"real-kvm step {index + 1} at {size}"


def _our_children(marker: bytes) -> list[int]:
    """Our own child processes whose command line holds `marker`."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if int(stat.rpartition(")")[2].split()[1]) == os.getpid() and marker in argv:
            pids.append(int(entry.name))
    return pids


async def test_stepping_away_while_the_real_storm_runs_ends_it_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clicker may step back before the kernel's storm finishes (here a stand-in that
    would take 30 s): the rmap screen goes, its worker is cancelled, the child process
    ends, and no late result fails the app."""
    from mmuscope.tui.screens.rmaps import RmapScreen

    marker = f"mmuscope-test-storm-{os.getpid()}"
    slow = [sys.executable, "-c", f"import time; time.sleep(30)  # {marker}"]
    monkeypatch.setattr(RmapScreen, "fork_argv", staticmethod(lambda children: slow))
    monkeypatch.setattr("mmuscope.engine.kvm.vmm.kvm_unavailable_reason", lambda: None)
    app = make_app(scenario="real-kvm", export_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.1)
        await pilot.press("greater_than_sign")
        first = app.screen
        assert isinstance(first, RmapScreen)
        for _ in range(100):
            if _our_children(marker.encode()):
                break
            await pilot.pause(0.02)
        assert _our_children(marker.encode()), "the storm did not start"
        await pilot.press("less_than_sign")  # back: the step's screen built afresh
        assert app.screen is not first and not first.is_attached
        for _ in range(40):
            if not _our_children(marker.encode()):
                break
            await pilot.pause(0.05)
        assert not _our_children(marker.encode()), "the storm kept running after its screen"
        await pilot.pause(0.3)
