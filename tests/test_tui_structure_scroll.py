"""The structure drawing after a resize is the drawing made at that size (the width is
worked out once per drawing pass), for an array and a tree."""

from __future__ import annotations

from pathlib import Path

from mmuscope.tui.widgets.structure import StructureView

from tests.tui_pilot import build, drawn_strips, memslots


async def _drawing_after(
    tmp_path: Path, strategy: str, sizes: tuple[tuple[int, int], ...]
) -> list[list[object]]:
    """The structure drawing as drawn (styled) after three lookups at each of `sizes` in
    turn."""
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
        return [list(strip) for strip in drawn_strips(view)]


async def test_a_resized_drawing_is_the_drawing_made_at_that_size(tmp_path: Path) -> None:
    """The drawing's width is worked out once per drawing pass (StructureView._view_width):
    after a resize it is the new one, as in an app started at the new size."""
    for strategy in ("binary", "rbtree"):
        resized = await _drawing_after(tmp_path, strategy, ((120, 36), (80, 24)))
        fresh = await _drawing_after(tmp_path, strategy, ((80, 24), (80, 24)))
        assert resized == fresh, strategy
