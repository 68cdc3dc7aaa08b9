"""The side panels' wrapping (tui/widgets/wrap.py): rows never wider than the panel,
every word kept in order, styles kept, continuation rows under the value column."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.tui.widgets.wrap import wrap_text
from rich.text import Text

WORD = st.text(alphabet="abcxyz0123_→·", min_size=1, max_size=12)
LINE = st.lists(st.tuples(WORD, st.sampled_from([" ", "  ", "   "])), max_size=12).map(
    lambda parts: "".join(word + gap for word, gap in parts).rstrip()
)


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(LINE, min_size=1, max_size=5), width=st.integers(16, 80))
def test_rows_fit_and_keep_every_word(lines: list[str], width: int) -> None:
    text = Text("\n".join(lines))
    rows = wrap_text(text, width).plain.split("\n")
    assert all(len(row) <= width for row in rows)
    assert " ".join(rows).split() == " ".join(lines).split() or any(
        len(word) > width // 2 for line in lines for word in line.split()
    )  # a word longer than a continuation row is folded


def test_a_name_value_row_continues_under_its_value_and_keeps_its_styles() -> None:
    text = Text("mmu_valid_gen         0 (shadow pages only: the TDP MMU has roots)")
    text.stylize("bold", 0, 13)
    wrapped = wrap_text(text, 44)
    first, second = wrapped.plain.split("\n")
    assert first == "mmu_valid_gen         0 (shadow pages only:"
    assert second == " " * 22 + "the TDP MMU has roots)"
    assert any(span.style == "bold" and span.end == 13 for span in wrapped.spans)


def test_a_row_breaks_between_two_fields_first() -> None:
    line = "  1 slot 1   ram-1m-to-hole gfn 0x100-0xdffff  gfn >= base_gfn + npages: go right"
    assert wrap_text(Text(line), 58).plain.split("\n") == [
        "  1 slot 1   ram-1m-to-hole gfn 0x100-0xdffff",
        "             gfn >= base_gfn + npages: go right",
    ]
    short = Text("fits")
    assert wrap_text(short, 10) is short


def test_a_counters_row_never_wraps_and_keeps_its_label() -> None:
    """Tables never wrap a row: the value takes the label column's padding,
    then drops its closing "(explanation)", then is cut with an ellipsis."""
    from mmuscope.tui.widgets.fit import table_row
    from rich.style import Style

    label = Style()
    assert table_row("host pages", "2M (host_pfn_mapping_level)", 0, 22, label).plain == (
        "host pages            2M (host_pfn_mapping_level)"
    )
    assert table_row("accesses / exits", "201 / 151", 30, 22, label).plain == (
        "accesses / exits     201 / 151"
    )
    assert table_row("host pages", "2M (host_pfn_mapping_level)", 30, 22, label).plain == (
        "host pages            2M"
    )
    row = table_row("level (why)", "2M: slot and host allow", 30, 22, label).plain
    assert row.startswith("level (why) ") and row.endswith("…") and len(row) == 30
    for width in (24, 30, 44):
        assert len(table_row("nx_lpage_splits", "0 · nx_huge_pages=off", width, 22, label)) <= width
