"""`mmuscope bench` for people: every table rendered at 80, 120 and 200 columns and in a
pipe keeps every number and identifier whole, on one line, as the thread printed it
(tui/bench.py).

The quick `--json` run is shared with tests/test_bench_claims.py; one table also runs
through the console script into a pipe, with and without $COLUMNS.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest
from mmuscope.engine.claims.band import BAND_COLUMNS
from mmuscope.engine.claims.registry import TABLES, chart_spec
from mmuscope.engine.claims.table import ClaimTable, fmt_cell, fmt_number
from mmuscope.tui.bench import PIPE_WIDTH, render

from tests.test_bench import MMUSCOPE
from tests.test_bench_claims import tables  # noqa: F401  (the shared quick run)

WIDTHS = (80, 120, 200)


def wholes(table: ClaimTable) -> list[str]:
    """Every number and identifier of the table as it must print: one piece each."""
    spec = chart_spec(table)
    idents = set(spec.label) if spec is not None else {table.columns[0]}
    out: list[str] = []
    for n, row in enumerate(table.rows):
        for name, cell in zip(table.columns, row, strict=True):
            if cell is None or name == "sources":
                continue
            if isinstance(cell, int | float) or name in idents or name in ("role", "verdict"):
                if name == "error_pct" and set(BAND_COLUMNS) <= set(table.columns):
                    out.append(f"{cell:+,.1f} %")
                elif name == "band_x":
                    out.append(f"×{fmt_cell(cell)}")
                else:
                    out.append(fmt_cell(cell, table.places(name, n)))
    return out


def words(table: ClaimTable) -> list[str]:
    """The words of the free texts (sources, quotes): they may wrap, never break."""
    return [
        word
        for row in table.rows
        for cell in row
        if isinstance(cell, str) and " " in cell
        for word in cell.split()
    ]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", TABLES)
def test_every_number_and_identifier_survives_whole(
    tables: dict[str, Any],  # noqa: F811
    name: str,
    width: int,
) -> None:
    table = ClaimTable.from_json(name, tables[name])
    text = render(table, width)
    lines = text.splitlines()
    assert "…" not in text  # nothing cropped with an ellipsis
    assert all(len(line) <= width for line in lines), max(lines, key=len)
    for piece in wholes(table):
        assert any(piece in line for line in lines), f"{name} at {width}: {piece!r} was cut"
    for word in words(table):
        assert any(word in line.split() or word in line for line in lines), (name, word)
    if table.fitted is not None:
        assert table.fitted.parameter in text and table.fitted.row in text


def test_numbers_print_as_the_threads_printed_them(tables: dict[str, Any]) -> None:  # noqa: F811
    """11002.50 not 1.1e+04, 42.305 not 42.3, 2,405,434,959 not 2,405,434,"""
    texts = {
        name: render(ClaimTable.from_json(name, tables[name]), 80)
        for name in ("tlb_flush", "shadow_2011", "zap", "ppc_keys", "rmap_ext")
    }
    for name, piece in (
        ("tlb_flush", "11,002.50"),
        ("tlb_flush", "3,979.50"),
        ("tlb_flush", "922.12"),
        ("shadow_2011", "42.305"),
        ("shadow_2011", "42.160"),
        ("shadow_2011", "1.80"),
        ("zap", "2,405,434,959"),
        ("zap", "2,323,016,424"),
        ("ppc_keys", "7.833"),
        ("rmap_ext", "302.00"),
        ("rmap_ext", "265.20"),
    ):
        assert any(piece in line for line in texts[name].splitlines()), (name, piece)
    assert "e+" not in "".join(texts.values())
    assert fmt_number(11002.5, 2) == "11,002.50" and fmt_number(1.5e-7) == "0.00000015"
    assert fmt_number(1_749_150_000.0) == "1,749,150,000" and fmt_number(-0.25) == "-0.25"


def test_a_narrow_table_is_stacked_with_its_identifying_columns(
    tables: dict[str, Any],  # noqa: F811
) -> None:
    table = ClaimTable.from_json("tlb_flush", tables["tlb_flush"])
    narrow = render(table, 80)
    assert "vms 2 · quantity baseline" in narrow  # each row under its identifying cells
    wide = render(table, 200)
    header = next(line for line in wide.splitlines() if line.startswith("vms"))
    for column in ("quantity", "role", "thread", "verdict", "sources"):
        assert column in header


@pytest.mark.parametrize("columns", [None, "80"])
def test_in_a_pipe_nothing_is_cut(
    columns: str | None,
    tables: dict[str, Any],  # noqa: F811
) -> None:
    """A pipe gets the table as `render` draws it (checked whole above at 80 and 200
    columns) at $COLUMNS or PIPE_WIDTH, without colours.  slot_cache: counted, not timed,
    so the console script's run prints what the shared run's table renders to."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    done = subprocess.run(
        [str(MMUSCOPE), "bench", "--quick", "--table", "slot_cache"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    width = int(columns) if columns else PIPE_WIDTH
    lines = done.stdout.splitlines()
    assert all(len(line) <= width for line in lines)
    assert max(map(len, lines)) > width - 10  # the width used, not a narrower one
    assert "\x1b[" not in done.stdout  # no colours in a pipe
    shared = ClaimTable.from_json("slot_cache", tables["slot_cache"])
    assert done.stdout == render(shared, width)
