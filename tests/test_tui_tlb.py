"""The TLB screen's keys through Pilot (F4): steps add columns to the vCPU lanes, `n`
runs to a flush stalled on a preempted vCPU, `p` and `v` restart the same seeded run
under another protocol or VM count, play/pause and speed drive the pacer, `e` exports
the followed flush; and the screen reads at 80×24 and 120×40."""

from __future__ import annotations

from pathlib import Path

from mmuscope.tui.app import MmuscopeApp
from mmuscope.tui.screens.tlb import TlbScreen
from mmuscope.tui.widgets.tlb_panels import TlbLanes, TlbSide

from tests.tui_pilot import build, drawn_lines, press_export, until

BIG, SMALL = (120, 40), (80, 24)


def tlb(app: MmuscopeApp) -> TlbScreen:
    screen = app.screen
    assert isinstance(screen, TlbScreen), f"expected the TLB screen: {screen!r}"
    return screen


async def test_step_and_next_wait_advance_the_lanes(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("f4")
        await pilot.pause()
        screen = tlb(app)
        assert screen.sim.now == 0 and not screen.pacer.playing
        for _ in range(3):
            await pilot.press("s")
        assert len(screen.history.columns) == 3
        assert screen.sim.now == 3 * screen.history.column_ns
        await pilot.press("n")
        last = screen.history.columns[-1]
        assert any(cell.waiting for cell in last)  # baseline, 2 VMs: a stalled flush
        await pilot.pause()
        lines = drawn_lines(screen.query_one(TlbLanes))
        assert sum(line.lstrip("│ ").startswith("vcpu") for line in lines) == 8
        assert any("pcpu7" in line for line in lines)  # room for the pCPUs at 120×40
        assert any("▒" in line for line in lines if "vcpu" in line)  # the stalled spin
        from mmuscope.tui.widgets.tlb_panels import LEGEND

        glyphs = [glyph for glyph, _, _ in LEGEND]
        assert len(glyphs) == len(set(glyphs)), glyphs  # one glyph per meaning
        assert screen.events_panel.counters.totals.get("flush_tlb_others_ipi", 0) > 0
        screen.sim.audit()


async def test_p_and_v_restart_the_same_seeded_run(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("f4")
        await pilot.pause()
        screen = tlb(app)
        seen = []
        await pilot.press("s")
        for _ in range(4):
            await pilot.press("p")
            seen.append(screen.sim.cfg.protocol)
            assert screen.sim.now == 0 and not screen.history.columns
            assert screen.sim.cfg.seed == screen.seed
            assert screen.protocol_name in screen.sub_title
        assert seen == ["gang", "pv_flush", "flush_on_enter", "baseline"]
        screen.protocol_name = "pv_flush"
        await pilot.press("p")
        assert screen.sim.protocol.name == "flush_on_enter"
        assert "flush_on_enter" in str(screen.query_one(TlbSide).content)
        counts = []
        for _ in range(4):
            await pilot.press("v")
            counts.append(screen.sim.cfg.vms)
            assert screen.sim.now == 0
        assert counts == [4, 8, 1, 2]
        assert screen.sim.cfg.protocol == "flush_on_enter"  # v keeps the protocol
        await pilot.press("v", "v", "n")
        assert screen.sim.counters.flags > 0  # 8 VMs: flagged, not waited on
        assert screen.sim.counters.waits_on_preempted == 0


async def test_play_pause_and_speed(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("f4")
        await pilot.pause()
        screen = tlb(app)
        speed = screen.pacer.speed
        await pilot.press("plus")
        assert screen.pacer.speed > speed
        await pilot.press("minus", "minus")
        assert screen.pacer.speed < speed
        await pilot.press("plus", "plus", "plus")
        await pilot.press("space")
        assert screen.pacer.playing and "playing" in screen.sub_title
        await until(pilot, lambda: bool(screen.history.columns))
        await pilot.press("space")
        assert not screen.pacer.playing and "paused" in screen.sub_title
        assert screen.history.columns
        done = len(screen.history.columns)
        await pilot.pause(0.2)
        assert len(screen.history.columns) == done


async def test_e_exports_the_followed_flush(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("f4")
        await pilot.pause()
        await pilot.press("e")  # nothing yet: a warning, no file
        await pilot.pause()
        assert not list(tmp_path.glob("mmuscope-tlb-*.dot"))
        await pilot.press("s", "s")
        await press_export(pilot)
    dots = list(tmp_path.glob("mmuscope-tlb-*.dot"))
    assert len(dots) == 1
    text = dots[0].read_text()
    assert text.startswith("digraph tlb_flush {") and text.count(" -> ") == 7


async def test_readable_at_80x24(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("f4")
        await pilot.pause()
        screen = tlb(app)
        assert not screen.has_class("-too-small") and screen.has_class("-narrow")
        await pilot.press("s", "s", "s", "n")
        await pilot.pause()
        lanes = drawn_lines(screen.query_one(TlbLanes))
        assert sum(line.lstrip("│ ").startswith("vcpu") for line in lanes) == 8
        assert any("running" in line for line in lanes)  # the legend still shows
        side = drawn_lines(screen.query_one(TlbSide))
        assert "baseline" in side[1] and any("records/s" in line for line in side)
        assert all(len(line) <= 80 for line in lanes + side)
