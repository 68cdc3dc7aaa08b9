"""One source of a dataset, written as a trace is read: `DIR/source=NAME/part-NNNNN.parquet`.

The records come from the loop of ``replay --summary`` (`engine.trace.reader.summarize`,
which hands over each record's head as it meets it), so a source holds exactly the
events that command counts, in file order; a `Records` buffer is turned into Arrow
columns (`rows`) and written as one row group each time it holds `ROW_GROUP` records:
memory is bounded by a row group, not by the trace.

Nothing half-written is ever visible (readers skip names that start with ``.`` or
``_``, and the query view reads only ``source=*/part-*.parquet``):

- a new source is written in a hidden directory, ``DIR/.source=NAME.<pid>.tmp``,
  renamed to ``source=NAME`` when its file is closed;
- `append` adds a file to an existing source: written as a hidden
  ``.part-NNNNN.parquet.<pid>.tmp`` and linked to its name when closed (a link,
  unlike a rename, never replaces a file another writer made meanwhile).

An existing source is refused without `append` (`SourceExists`).  A crash leaves only
hidden names, which the next writer of that source removes.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from ..trace.reader import CONTINUED, TraceCounts, summarize
from .columns import FIELDS, MEMSLOTS_FILE, PARTITION
from .rows import SCHEMA, RawRecords, Records

if TYPE_CHECKING:
    from ..kvm.rawtrace import Decoder, RawEvent

ROW_GROUP = 32768  # records per row group (about 300 kB of Parquet, 20 MB while built)
COMPRESSION = "zstd"  # DuckDB, pyarrow and Spark (3.x and later) all read it
# Dictionary pages for the strings, whose values repeat (event and system names, comms,
# the `fields` keys, flags and exit reasons); the numbers (ts, seq, sptes, gfns) are
# mostly distinct, and a dictionary tried on them costs time and grows the file.
DICTIONARY = [
    *(f.name for f in SCHEMA if pa.types.is_string(f.type)),
    f"{FIELDS}.key_value.key",
    f"{FIELDS}.key_value.value",
]
SOURCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
MEMSLOTS_SCHEMA = pa.schema(
    [
        ("as_id", pa.int32()),
        ("slot", pa.int32()),
        ("base_gfn", pa.int64()),
        ("npages", pa.int64()),
        ("flags", pa.int64()),
        ("name", pa.string()),
    ]
)


class DatasetError(Exception):
    """A dataset that cannot be written as asked; `str()` is one line."""


class SourceExists(DatasetError):
    """The source already has events and `append` was not asked for."""


def check_source_name(name: str) -> str:
    """A source name that is a directory name everywhere (``source=NAME``)."""
    if not SOURCE_NAME.fullmatch(name):
        raise DatasetError(
            f"source name {name!r}: use letters, digits and . _ + - (at most 128, "
            "not starting with . _ + -)"
        )
    return name


class SourceWriter:
    """Writes one source: use as a context manager, feed it `write_lines` (trace text)
    or `write_records` (a ring buffer's), optionally `write_memslots`; leaving the block
    without an error makes it visible."""

    def __init__(
        self, root: Path, source: str, *, append: bool = False, row_group: int = ROW_GROUP
    ) -> None:
        self.root = root
        self.source = check_source_name(source)
        self.append = append
        self.row_group = row_group
        self.final = root / f"{PARTITION}={source}"
        self.rows = 0
        self.path: Path | None = None  # the part file, once committed
        self._hidden: Path | None = None  # the hidden dir (new source) or file (append)
        self._writer: pq.ParquetWriter | None = None
        self._memslots: pa.Table | None = None
        self._made_root = False
        self._raw: RawRecords | None = None  # ring-buffer records not written yet

    # -- the lifetime of the hidden names ----------------------------------------------

    def __enter__(self) -> SourceWriter:
        self._made_root = not self.root.exists()  # removed again if nothing is written
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise DatasetError(f"{self.root}: {err.strerror or err}") from None
        if not self.root.is_dir():
            raise DatasetError(f"{self.root}: not a directory")
        self._remove_stale()
        if self.final.exists() and not self.append:
            raise SourceExists(
                f"{self.final} exists: give another source name, or --append to add to it"
            )
        if self.final.exists():
            self._hidden = self.final / f".{self._part_name()}.{os.getpid()}.tmp"
        else:
            hidden = self.root / f".{self.final.name}.{os.getpid()}.tmp"
            shutil.rmtree(hidden, ignore_errors=True)
            hidden.mkdir()
            self._hidden = hidden / "part-00000.parquet"
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None and self._raw is not None and self._raw.records:
            self._write(self._raw)
        if self._writer is not None:
            self._writer.close()
        if kind is None:
            self._commit()
        else:
            self._discard()

    def _part_name(self) -> str:
        taken = [int(p.stem[5:]) for p in self.final.glob("part-*.parquet") if p.stem[5:].isdigit()]
        return f"part-{max(taken, default=-1) + 1:05d}.parquet"

    def _commit(self) -> None:
        assert self._hidden is not None
        if self._writer is None:  # no event: still a (valid, empty) file
            pq.write_table(
                SCHEMA.empty_table(), self._hidden, compression=COMPRESSION,
                use_dictionary=DICTIONARY,
            )  # fmt: skip
        if self._memslots is not None:  # hidden, then renamed (appended: into the source)
            hidden = self._hidden.parent / f".{MEMSLOTS_FILE}.{os.getpid()}.tmp"
            pq.write_table(self._memslots, hidden)
            os.replace(hidden, self._hidden.parent / MEMSLOTS_FILE)
        if self._hidden.parent != self.final:  # a new source: its directory appears whole
            try:
                os.rename(self._hidden.parent, self.final)
            except OSError:
                self._discard()
                raise SourceExists(f"{self.final} appeared while writing it") from None
            self.path = self.final / self._hidden.name
            return
        while True:  # append: the next free number
            final = self.final / self._part_name()
            try:
                os.link(self._hidden, final)
            except FileExistsError:
                continue
            self._hidden.unlink()
            self.path = final
            return

    def _discard(self) -> None:
        if self._hidden is None:
            return
        if self._hidden.parent == self.final:
            self._hidden.unlink(missing_ok=True)
        else:
            shutil.rmtree(self._hidden.parent, ignore_errors=True)
        if self._made_root:
            with contextlib.suppress(OSError):  # still empty: no trace of the attempt
                self.root.rmdir()

    def _remove_stale(self) -> None:
        """Hidden names of this source left by a writer that no longer runs."""
        stale = [*self.root.glob(f".{self.final.name}.*.tmp")]
        if self.final.is_dir():
            stale += [*self.final.glob(".part-*.tmp"), *self.final.glob(f".{MEMSLOTS_FILE}.*.tmp")]
        for path in stale:
            pid = path.name.rsplit(".", 2)[-2]
            if pid.isdigit() and not _running(int(pid)):
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)

    # -- writing ---------------------------------------------------------------------

    def write_lines(self, lines: Iterable[str]) -> TraceCounts:
        """The events of trace text (its lines, as `replay` reads them); the counts
        are ``replay --summary``'s.  The reader keeps each record's head match as one
        tuple (`Records.heads`); a full row group is turned into columns and written
        before the reader goes on, so one row group is held at a time."""
        records = Records(self.rows)
        heads = records.heads
        append = heads.append
        row_group = self.row_group

        def found(where: int, m: re.Match[str]) -> None:
            nonlocal records, heads, append
            if where == CONTINUED:  # the record before, wrapped onto this line
                heads[-1] = m.groups()
                return
            if len(heads) >= row_group:
                self._write(records)
                records = Records(self.rows)
                heads, append = records.heads, records.heads.append
            append(m.groups())

        counts = summarize(lines, found)
        if heads:
            self._write(records)
        return counts

    def write_records(self, records: Iterable[RawEvent], decoder: Decoder) -> None:
        """Ring-buffer records (`kvm --parquet`, as each drain of a run brings them),
        decoded by `decoder`: held until they fill a row group (`RawRecords`), written
        then; the rest when the block ends well.  The same rows as the lines
        `decoder.lines` prints of them given to `write_lines`."""
        held = self._raw
        if held is None:
            held = self._raw = RawRecords(decoder, self.rows)
        held.records.extend(records)
        while len(held.records) >= self.row_group:
            rest = held.records[self.row_group :]
            del held.records[self.row_group :]
            self._write(held)
            held = self._raw = RawRecords(decoder, self.rows)
            held.records = rest

    def _write(self, records: Records | RawRecords) -> None:
        table = records.table()
        if isinstance(records, Records):
            records.heads.clear()
        else:
            records.records.clear()
        if self._writer is None:
            assert self._hidden is not None
            self._writer = pq.ParquetWriter(
                self._hidden, SCHEMA, compression=COMPRESSION, use_dictionary=DICTIONARY
            )
        self._writer.write_table(table, row_group_size=len(table))
        self.rows += len(table)

    def write_memslots(self, slots: Sequence[tuple[int, int, int, int, int, str]]) -> None:
        """The guest's memslots, `(as_id, slot, base_gfn, npages, flags, name)` each,
        for the reports that place a gfn in its slot (kept unless one is there)."""
        if self.final.joinpath(MEMSLOTS_FILE).exists():
            return
        self._memslots = pa.Table.from_pylist(
            [dict(zip(MEMSLOTS_SCHEMA.names, slot, strict=True)) for slot in slots],
            schema=MEMSLOTS_SCHEMA,
        )


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sources(root: Path) -> list[str]:
    """The sources of a dataset, by name."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        return sorted(p.name.partition("=")[2] for p in root.glob(f"{PARTITION}=*") if p.is_dir())
    return []
