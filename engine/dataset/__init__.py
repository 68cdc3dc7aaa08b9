"""Events as a columnar dataset: a Hive-partitioned set of Parquet files that DuckDB queries
in process and Spark reads unchanged (docs/architecture.md §2.6, §6.3).

- `columns`: the schema as data (which kernel field feeds which typed column, which
  system an event belongs to); pure Python.
- `rows`: a row group of trace records turned into Arrow columns (pyarrow, numpy).
- `writer`: one source written in row groups, to a hidden name renamed at the end.
- `reports`, `query`: the `events` view and the named reports (DuckDB).

Only `columns` and this module import without the `data` extra (pyarrow, numpy,
duckdb); the others import it at their top and are imported only by a command that
writes or queries a dataset, after `require()`.
"""

from __future__ import annotations

import importlib

EXTRA = "pip install 'mmuscope[data]'"
# what each part needs: writing (pyarrow, numpy) and querying (duckdb)
WRITE_MODULES = ("pyarrow", "numpy")
QUERY_MODULES = ("duckdb",)


class MissingExtra(Exception):
    """The `data` extra is not installed; `str()` is the one line to print."""


def require(*modules: str) -> None:
    """Import `modules` (the command is about to use them), or raise `MissingExtra`
    naming the first that cannot be imported."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            raise MissingExtra(f"{module} is not installed: {EXTRA}") from None
