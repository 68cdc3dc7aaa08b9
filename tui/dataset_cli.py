"""`--parquet DIR` on `replay`, `kvm` and `simulate`: their events written as one source of
a Hive-partitioned Parquet dataset, `DIR/source=NAME/part-NNNNN.parquet`
(engine.dataset; docs/architecture.md §6.3), for `mmuscope query`, DuckDB or Spark.

The commands add the options with `add_options` and hand their trace text to
`write_source`; pyarrow is imported only then (the `data` extra: without it, one line
naming what to install, exit 2).  Each source prints one line on stdout.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

from .cliparts import CliError, path_arg

if TYPE_CHECKING:
    from pathlib import Path

    from mmuscope.engine.dataset.writer import SourceWriter
    from mmuscope.engine.layouts import Layout
    from mmuscope.engine.trace.reader import TraceCounts

COMPRESSED = (".gz", ".xz", ".zst", ".zstd")
TEXT_SUFFIXES = (".txt", ".dat", ".trace", ".report", ".log")


def add_options(
    parser: argparse.ArgumentParser,
    mode: argparse._MutuallyExclusiveGroup | None = None,
    *,
    several: bool = False,
) -> None:
    """--parquet DIR (in the command's group of outputs, if it has one), --source NAME,
    --append; `several`: one source per TRACE, and the memslot options."""
    (parser if mode is None else mode).add_argument(
        "--parquet", type=path_arg, metavar="DIR",
        help="write the events as a Parquet dataset: DIR/source=NAME/part-NNNNN.parquet "
        "(needs pip install 'mmuscope[data]'; query it with mmuscope query DIR)",
    )  # fmt: skip
    parser.add_argument(
        "--source", action="append" if several else "store", metavar="NAME",
        help="with --parquet: the source's name"
        + (", once per TRACE in order (default: each file's name without .txt, .dat, "
           ".gz, ...)" if several else " (default: what ran, e.g. "
           "simulate-tdp-kernbench-1)"),
    )  # fmt: skip
    parser.add_argument(
        "--append", action="store_true",
        help="with --parquet: add a file to a source that exists (else it is refused)",
    )  # fmt: skip
    if several:  # replay: the guest's memslots, which a trace does not hold
        layout = parser.add_mutually_exclusive_group()
        layout.add_argument(
            "--layout", dest="parquet_layout", metavar="NAME",
            help="with --parquet: the guest's memslots are this preset's "
            "(for query --report faults-per-memslot)",
        )  # fmt: skip
        layout.add_argument(
            "--mtree", dest="parquet_mtree", type=path_arg, metavar="FILE",
            help="with --parquet: the guest's memslots as QEMU's 'info mtree' shows them",
        )  # fmt: skip


def check_options(args: argparse.Namespace) -> None:
    layout = getattr(args, "parquet_layout", None) or getattr(args, "parquet_mtree", None)
    if args.parquet is None and (args.source or args.append or layout):
        raise CliError("--source, --append, --layout and --mtree go with --parquet DIR")
    if args.parquet is not None:
        _require()


def write_run(
    args: argparse.Namespace,
    run: Callable[[TextIO], object],
    source: str,
    what: str,
    layout: Layout | None = None,
) -> int:
    """A simulated run (`run` prints its trace text) written as one source: the text
    goes through a temporary file, so the source holds what `replay --parquet` would
    make of the printed trace."""
    import tempfile

    (name,) = source_names(args, [path_arg(source)], [args.source or source])
    with tempfile.TemporaryFile("w+", encoding="utf-8") as text:
        run(text)
        text.seek(0)
        write_source(args, name, text, what, layout)
    return 0


def _require() -> None:
    from mmuscope.engine.dataset import WRITE_MODULES, MissingExtra, require

    try:
        require(*WRITE_MODULES)
    except MissingExtra as err:
        raise CliError(f"--parquet needs the data extra: {err}") from None


def trace_source(path: Path) -> str:
    """A trace's default source name: its file name without compression and text
    suffixes, other characters as ``_`` (``-``: stdin)."""
    if str(path) == "-":
        return "stdin"
    name = path.name
    for suffixes in (COMPRESSED, TEXT_SUFFIXES):
        for suffix in suffixes:
            if name.endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
                break
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name).lstrip("._+-") or "trace"


def host_source(what: str) -> str:
    """`kvm`'s default source name: this host's name and the program."""
    import socket

    host = re.sub(r"[^A-Za-z0-9._+-]", "_", socket.gethostname()).lstrip("._+-") or "host"
    return f"{host}-{what}"


def source_names(
    args: argparse.Namespace, traces: Sequence[Path], names: Sequence[str] | None = None
) -> list[str]:
    """One source name per trace: `names`, --source's, or each file's; all different,
    and none that exists unless --append."""
    from mmuscope.engine.dataset.writer import DatasetError, check_source_name

    names = list(names or args.source or [trace_source(t) for t in traces])
    if traces and len(names) != len(traces):
        raise CliError(f"{len(traces)} traces and {len(names)} --source names: give one each")
    try:
        names = [check_source_name(n) for n in names]
    except DatasetError as err:
        raise CliError(str(err)) from None
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CliError(f"two traces would make source {twice[0]!r}: name each with --source")
    existing = [n for n in names if (args.parquet / f"source={n}").exists()]
    if existing and not args.append:
        raise CliError(
            f"{args.parquet / f'source={existing[0]}'} exists: give another --source "
            "name, or --append to add to it"
        )
    return names


def write_source(
    args: argparse.Namespace,
    source: str,
    lines: Iterable[str],
    what: str,
    layout: Layout | None = None,
) -> int:
    """`lines` (trace text) written as source `source`; one line on stdout; the number
    of events.  A text with no event at all is refused and leaves nothing."""
    with writing_source(args, source, what, layout) as (writer, counts):
        found = writer.write_lines(lines)
        counts.events, counts.skipped = found.events, found.skipped
    return counts.events


@contextmanager
def writing_source(
    args: argparse.Namespace, source: str, what: str, layout: Layout | None = None
) -> Iterator[tuple[SourceWriter, TraceCounts]]:
    """Source `source` written by the block (the writer, and the counts it sets: events
    and lines skipped), then `layout`'s memslots; one line on stdout.  A block that
    wrote no event is refused and leaves nothing."""
    from mmuscope.engine.dataset.writer import DatasetError, SourceWriter
    from mmuscope.engine.trace.reader import TraceCounts

    counts = TraceCounts()
    try:
        with SourceWriter(args.parquet, source, append=args.append) as writer:
            yield writer, counts
            if counts.events == 0:
                raise CliError(f"{what}: no trace line in it, nothing written")
            if layout is not None:
                writer.write_memslots(memslots(layout))
    except DatasetError as err:
        raise CliError(str(err)) from None
    n = counts.skipped
    skipped = f", {n} line{'s' if n > 1 else ''} skipped" if n else ""
    print(f"{writer.path}: {counts.events} events from {what}{skipped}")
    sys.stdout.flush()


def memslots(layout: Layout) -> list[tuple[int, int, int, int, int, str]]:
    """A layout's slots as `write_memslots` takes them."""
    from mmuscope.engine.memslots.constants import PAGE_SHIFT

    return [
        (r.as_id, r.id, r.gpa >> PAGE_SHIFT, r.size >> PAGE_SHIFT, r.flags, r.name)
        for r in layout.regions
    ]
