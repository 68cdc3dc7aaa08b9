"""`mmuscope replay TRACE`: the replay screen on a file, or with `--jsonl | --summary`
(docs/architecture.md §6.3) text streamed line by line.

`--jsonl` prints one JSON object per event as soon as it is known (`event_json`);
`--summary` prints one object at the end.  A file that cannot be read is a one-line error
(exit 2); lines that are not events are skipped, never an error.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from mmuscope.engine.replay.model import replay_summary
from mmuscope.engine.trace import widths
from mmuscope.engine.trace.lines import parse_line
from mmuscope.engine.trace.reader import TraceCounts, iter_events
from mmuscope.engine.trace.tracepoints import event_json

from .cliparts import CliError, check_replay_app_options, run_app
from .compressed import CompressedError, compression_of, open_compressed
from .trace_dat import (
    TraceDatError,
    is_trace_dat,
    looks_like_trace_dat,
    report_command,
    report_lines,
    report_to_file,
)

WRITE_BATCH = 512  # JSON lines joined per write


class TraceFileError(Exception):
    """The trace cannot be read at all (missing, a directory, no permission)."""


@contextmanager
def open_trace(path: Path) -> Iterator[Iterable[str]]:
    """The trace as text lines; undecodable bytes become U+FFFD (and those lines are
    skipped as garbage, not an error)."""
    if str(path) == "-":
        yield _text_stdin()
        return
    kind = compression_of(path)
    if kind is not None:  # gzip, xz, zstd: the text inside
        try:
            with open_compressed(path, kind) as text:
                yield text
        except CompressedError as err:
            raise TraceFileError(str(err)) from None
        return
    if is_trace_dat(path):  # trace-cmd record's binary file: its `trace-cmd report`
        try:
            with report_lines(path) as lines:
                yield lines
        except TraceDatError as err:
            raise TraceFileError(str(err)) from None
        return
    try:
        handle = path.open(encoding="utf-8", errors="replace", newline="")
    except IsADirectoryError:
        raise TraceFileError(f"{path}: is a directory, not a trace") from None
    except OSError as err:
        raise TraceFileError(f"{path}: {err.strerror or err}") from None
    with handle:
        yield handle


def _text_stdin() -> Iterable[str]:
    """Standard input's lines, refused at once when it is a binary trace.dat."""
    stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline="")
    first = stdin.readline()
    if looks_like_trace_dat(first):
        raise TraceFileError(
            "standard input is a binary trace-cmd trace.dat: give it as text, "
            f"{report_command('FILE')} | mmuscope replay - ..."
        )
    return itertools.chain([first], stdin) if first else ()


def write_jsonl(lines: Iterable[str], out: TextIO, hex64: bool = False) -> TraceCounts:
    """One JSON object per event; with `hex64`, 64-bit fields as "0x…" strings."""
    counts = TraceCounts()
    batch: list[str] = []
    dumps = json.dumps
    shape = widths.hex64 if hex64 else _as_is
    for event in iter_events(lines, counts):
        batch.append(dumps(shape(event_json(event))))
        if len(batch) >= WRITE_BATCH:
            out.write("\n".join(batch) + "\n")
            batch.clear()
    if batch:
        out.write("\n".join(batch) + "\n")
    return counts


def _as_is(event_json: dict[str, Any]) -> dict[str, Any]:
    return event_json


# -- what is not a trace ----------------------------------------------------------------

HEAD_LINES = 2000  # lines kept to tell a file without events from an empty trace
# What only a trace prints besides its records: tracefs's `trace` header, `trace-cmd
# report`'s first lines and its notes
_TRACE_HEADER = re.compile(
    r"\s*(?:# tracer:|# entries-in-buffer|#\s+TASK-PID|cpus=\d|version = \d|CPU \d+ is empty)"
)
_MTREE = re.compile(
    r"(?:address-space|memory-region)(?: \(\d+\))?: |FlatView #\d|Root memory region:"
)
_MEMSLOT_CALLS = re.compile(r"kvm_set_user_memory |KVM_SET_USER_MEMORY_REGION")


class HeadLines:
    """The lines of a stream, passed on as they are read, the first HEAD_LINES kept."""

    def __init__(self, lines: Iterable[str]) -> None:
        self.lines = lines
        self.head: list[str] = []

    def __iter__(self) -> Iterator[str]:
        for line in self.lines:
            if len(self.head) < HEAD_LINES:
                self.head.append(line)
            yield line

    def is_trace(self) -> bool:
        """Whether the head holds an ftrace record or a trace's header: a file of no
        events that is a trace (a quiet recording) rather than something else."""
        return any(_TRACE_HEADER.match(line) or parse_line(line) for line in self.head)


def not_a_trace(path: Path, head: list[str]) -> str:
    """The one-line error for a file in which nothing is a trace line, naming what it
    looks like (and the command that reads it, where there is one)."""
    name = "standard input" if str(path) == "-" else str(path)
    raw = b"" if str(path) == "-" else _first_bytes(path)
    text = "".join(head)
    if not text.strip():
        what = "is empty"
    elif raw.startswith(b"\x7fELF"):
        what = "is an ELF executable"
    elif b"\0" in raw or text.count("\ufffd") * 20 > len(text):
        what = "is binary data"
    elif any(_MTREE.match(line.lstrip()) for line in head):
        what = "is a QEMU 'info mtree' dump (mmuscope layout --mtree FILE reads it)"
    elif any(_MEMSLOT_CALLS.search(line) for line in head):
        what = "holds QEMU's memslot calls (mmuscope layout --trace FILE reads them)"
    elif all(line.lstrip().startswith("{") for line in head if line.strip()):
        what = "is JSON, not trace text"
    else:
        what = "is text with no trace line"
    return f"{name} {what}: no ftrace record and no trace header in it"


def _first_bytes(path: Path) -> bytes:
    try:
        with path.open("rb") as raw:
            return raw.read(4096)
    except OSError:
        return b""


def run_replay_text(args: argparse.Namespace) -> int:
    """The two text modes; `run_replay` turns TraceFileError into exit code 2.  A file
    in which nothing is a trace line is an error (no output), not zero events."""
    with open_trace(args.trace) as lines:
        head = HeadLines(lines)
        if args.summary:
            summary = replay_summary(head)
            events = summary["events"]
        else:
            events = write_jsonl(head, sys.stdout, hex64=args.hex64).events
    if events == 0 and not head.is_trace():
        raise TraceFileError(not_a_trace(args.trace, head.head))
    if args.summary:
        print(json.dumps(summary))
    sys.stdout.flush()
    return 0


def run_replay(args: argparse.Namespace) -> int:
    """`mmuscope replay`: the app without a flag, else the text modes, or the traces
    written as a dataset (--parquet)."""
    from .dataset_cli import check_options

    if args.hex64 and not args.jsonl:
        raise CliError("--hex64 changes what --jsonl prints: add --jsonl")
    check_options(args)
    if args.parquet is not None:
        return run_replay_parquet(args)
    if len(args.trace) > 1:
        raise CliError("several traces go with --parquet DIR (each its own source); "
                       "the other modes read one")  # fmt: skip
    args.trace = args.trace[0]
    if not (args.jsonl or args.summary):
        return run_replay_app(args)
    try:
        return run_replay_text(args)
    except TraceFileError as err:
        raise CliError(str(err)) from None


def run_replay_parquet(args: argparse.Namespace) -> int:
    """Each trace written as a source of the dataset at --parquet (tui/dataset_cli.py),
    read as --summary reads it."""
    from .cliparts import load_layout
    from .dataset_cli import source_names, write_source

    traces: list[Path] = args.trace
    if sum(str(t) == "-" for t in traces) > 1:
        raise CliError("standard input ('-') can be read once")
    names = source_names(args, traces)
    layout = None
    if args.parquet_layout or args.parquet_mtree:
        layout = load_layout(args.parquet_layout, args.parquet_mtree)
    for trace, name in zip(traces, names, strict=True):
        try:
            with open_trace(trace) as lines:
                write_source(args, name, lines, str(trace), layout)
        except TraceFileError as err:
            raise CliError(str(err)) from None
    return 0


def run_replay_app(args: argparse.Namespace) -> int:
    """The replay screen on a file (seekable: not stdin)."""
    path: Path = args.trace
    if str(path) == "-":
        raise CliError("the replay screen seeks in the trace, so it needs a file, not stdin "
                       "(--jsonl and --summary read stdin)")  # fmt: skip
    if not is_trace_dat(path):
        try:
            with open_trace(path) as lines:
                head = HeadLines(itertools.islice(lines, HEAD_LINES))
                for _ in head:
                    pass
        except TraceFileError as err:
            raise CliError(str(err)) from None
        if not head.is_trace():
            raise CliError(not_a_trace(path, head.head))
    check_replay_app_options(args, "mmuscope replay TRACE --summary")
    text = _report_file(path) if is_trace_dat(path) else path
    try:
        from .app import make_app

        run_app(make_app(trace=text, theme=args.theme, export_dir=args.export_dir))
    finally:
        if text != path:
            text.unlink(missing_ok=True)
    return 0


def _report_file(path: Path) -> Path:
    """A trace.dat's report as a temporary text file, for the replay screen."""
    try:
        return report_to_file(path)
    except TraceDatError as err:
        raise CliError(str(err)) from None
