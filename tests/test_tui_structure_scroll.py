"""tui/widgets/scroll_through.py: an array drawing scrolls to a lookup shown whole (to its
first probe, then to its last) in one scroll; it must end where the two scrolls Textual
makes step by step end, and the screen show the same drawing, for binary and linear, at
two sizes, lookup after lookup."""

from __future__ import annotations

from pathlib import Path

from mmuscope.tui.widgets.structure import StructureView

from tests.tui_pilot import build, memslots


async def _offsets(tmp_path: Path, strategy: str, merge: bool) -> list[object]:
    app = build(tmp_path, "assigned-devices", lookup=strategy)
    seen: list[object] = []
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        screen = memslots(app)
        view = screen.query_one(StructureView)
        view.merge_scrolls = merge
        for size in ((120, 36), (80, 24)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            for step in range(12):
                screen.action_step() if step % 4 == 3 else screen.action_next_lookup()
                await pilot.pause()
                strips = app.screen._compositor.render_strips()
                region = view.region  # the drawing as composed (the log's times vary)
                drawn = [list(strips[y].crop(region.x, region.right)) for y in region.line_range]
                seen.append((size, step, view.scroll_offset, drawn))
    return seen


async def test_one_scroll_ends_where_the_scrolls_step_by_step_end(tmp_path: Path) -> None:
    for strategy in ("binary", "linear"):
        merged = await _offsets(tmp_path, strategy, merge=True)
        stepped = await _offsets(tmp_path, strategy, merge=False)
        for fast, slow in zip(merged, stepped, strict=True):
            assert fast[2] == slow[2], f"{strategy}: offset at {fast[:2]}"
            assert fast[3] == slow[3], f"{strategy}: drawing at {fast[:2]}"
        assert len({entry[2] for entry in merged}) > 2, strategy  # the drawing scrolled


async def _drawing_after(
    tmp_path: Path, strategy: str, sizes: tuple[tuple[int, int], ...]
) -> list[list[object]]:
    """The structure drawing as composed after three lookups at each of `sizes` in turn."""
    app = build(tmp_path, "assigned-devices", lookup=strategy)
    async with app.run_test(size=sizes[0]) as pilot:
        await pilot.pause()
        screen = memslots(app)
        view = screen.query_one(StructureView)
        for size in sizes:
            await pilot.resize_terminal(*size)
            await pilot.pause()
            for _ in range(3):
                screen.action_next_lookup()
                await pilot.pause()
        strips = app.screen._compositor.render_strips()
        region = view.region
        return [list(strips[y].crop(region.x, region.right)) for y in region.line_range]


async def test_a_resized_drawing_is_the_drawing_made_at_that_size(tmp_path: Path) -> None:
    """The drawing's width is worked out once per drawing pass (StructureView._view_width):
    after a resize it is the new one, as in an app started at the new size."""
    for strategy in ("binary", "rbtree"):
        resized = await _drawing_after(tmp_path, strategy, ((120, 36), (80, 24)))
        fresh = await _drawing_after(tmp_path, strategy, ((80, 24), (80, 24)))
        assert resized == fresh, strategy
