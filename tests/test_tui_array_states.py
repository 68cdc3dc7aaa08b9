"""tui/widgets/structure.py: `_cells_states` works out an array row's cell states at
once (binary search's probes looked up, a scan's revealed prefix); it must give each
cell the state `_array_state` gives it alone, for every row, lookup after lookup, probe
by probe, with the caches on and off."""

from __future__ import annotations

from pathlib import Path

from mmuscope.engine.lookup.views import ArrayView
from mmuscope.tui.widgets.structure import StructureView

from tests.tui_pilot import build, memslots


def _cell_by_cell(view: StructureView, start: int, end: int) -> tuple[str | None, ...]:
    shape = view.shape
    assert isinstance(shape, ArrayView)
    binary = view._binary_states() if shape.strategy == "binary" else None
    return tuple(view._array_state(position, binary) for position in range(start, end))


async def test_a_rows_states_are_its_cells_states(tmp_path: Path) -> None:
    for strategy in ("binary", "linear", "size-sorted"):
        app = build(tmp_path, "assigned-devices", lookup=strategy)
        kinds: set[str] = set()
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause()
            screen = memslots(app)
            view = screen.query_one(StructureView)
            for step in range(16):
                if step == 8:
                    screen.action_toggle_vm_cache()
                screen.action_step() if step % 3 == 2 else screen.action_next_lookup()
                await pilot.pause()
                highlight = view.highlight
                assert highlight is not None and isinstance(view.shape, ArrayView)
                kinds.add("cache" if highlight.cache_hit else "done" * highlight.done or "part")
                per_row, count = view._cells_per_row(), len(view.shape.entries)
                for start in range(0, count, per_row):
                    end = min(start + per_row, count)
                    assert view._cells_states(start, end) == _cell_by_cell(view, start, end), (
                        f"{strategy} step {step} row {start // per_row}"
                    )
        assert {"done", "part"} <= kinds, (strategy, kinds)
