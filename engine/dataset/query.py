"""SQL over a dataset, in DuckDB (in process): the `events` view of every
``source=NAME/part-*.parquet`` under a directory, and `memslots` of the sources that
have them (`writer.write_memslots`).

`source` is read from the directory names as a string (``hive_types``), whatever the
names look like, and comes first in both views.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb

from .columns import MEMSLOTS_FILE, PART_GLOB, PARTITION

FETCH = 4096  # rows fetched at a time


class QueryError(Exception):
    """A directory that is no dataset, or SQL that DuckDB refuses; `str()` is one line."""


def one_line(message: str) -> str:
    """DuckDB's message in one line: its lines joined, the caret under LINE 1 left out."""
    lines = [line.strip() for line in message.splitlines()]
    return " ".join(line for line in lines if line and set(line) != {"^"})


def _files(root: Path, name: str) -> list[str]:
    return sorted(str(p) for p in root.glob(f"{PARTITION}=*/{name}"))


def _read(files: Sequence[str]) -> str:
    listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
    return (
        f"SELECT {PARTITION}, * EXCLUDE ({PARTITION}) FROM read_parquet([{listed}], "
        f"hive_partitioning = true, hive_types = {{'{PARTITION}': VARCHAR}}, "
        "union_by_name = true)"
    )


def connect(root: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the views `events` and `memslots` over `root`."""
    if not root.exists():
        raise QueryError(f"{root}: no such directory")
    if not root.is_dir():
        raise QueryError(f"{root}: not a directory (a dataset is a directory of source=NAME/)")
    events = _files(root, PART_GLOB)
    if not events:
        raise QueryError(
            f"{root}: no events in it (no {PARTITION}=NAME/{PART_GLOB}; write some with "
            "replay, kvm or simulate --parquet)"
        )
    memslots = _files(root, MEMSLOTS_FILE)
    con = duckdb.connect()
    try:
        con.execute(f"CREATE VIEW events AS {_read(events)}")
        if memslots:
            con.execute(f"CREATE VIEW memslots AS {_read(memslots)}")
        else:
            con.execute(
                "CREATE VIEW memslots AS SELECT NULL::VARCHAR AS source, NULL::INTEGER AS "
                "as_id, NULL::INTEGER AS slot, NULL::BIGINT AS base_gfn, NULL::BIGINT AS "
                "npages, NULL::BIGINT AS flags, NULL::VARCHAR AS name WHERE false"
            )
    except duckdb.Error as err:  # a file that is not Parquet, a schema that differs
        raise QueryError(f"{root}: {one_line(str(err))}") from None
    return con


def run(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], Iterator[tuple[Any, ...]]]:
    """The column names of `sql`'s result and its rows, fetched as they are read."""
    try:
        result = con.execute(sql)
    except duckdb.Error as err:
        raise QueryError(one_line(str(err))) from None
    if result.description is None:
        return [], iter(())
    columns = [d[0] for d in result.description]

    def rows() -> Iterator[tuple[Any, ...]]:
        while True:
            try:
                batch = result.fetchmany(FETCH)
            except duckdb.Error as err:
                raise QueryError(one_line(str(err))) from None
            if not batch:
                return
            yield from batch

    return columns, rows()
