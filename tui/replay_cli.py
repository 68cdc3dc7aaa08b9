"""`mmuscope replay TRACE`: the replay screen on a file, or with `--jsonl | --summary`
(CONTRACT.md) text streamed line by line.

`--jsonl` prints one JSON object per event as soon as it is known (`event_json`);
`--summary` prints one object at the end.  A file that cannot be read is a one-line error
(exit 2); lines that are not events are skipped, never an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from engine.events import Event
from engine.trace.reader import TraceCounts, iter_events, summarize
from engine.trace.tracepoints import json_fields

from .cliparts import CliError, check_replay_app_options

WRITE_BATCH = 512  # JSON lines joined per write


class TraceFileError(Exception):
    """The trace cannot be read at all (missing, a directory, no permission)."""


@contextmanager
def open_trace(path: Path) -> Iterator[TextIO]:
    """The trace as text lines; undecodable bytes become U+FFFD (and those lines are
    skipped as garbage, not an error)."""
    if str(path) == "-":
        yield sys.stdin
        return
    try:
        handle = path.open(encoding="utf-8", errors="replace", newline="")
    except IsADirectoryError:
        raise TraceFileError(f"{path}: is a directory, not a trace") from None
    except OSError as err:
        raise TraceFileError(f"{path}: {err.strerror or err}") from None
    with handle:
        yield handle


def event_json(event: Event) -> dict[str, object]:
    """One ``--jsonl`` object: the kernel's field names, then the earlier names of renamed
    fields (``fast_page_fault``'s ``vcpu, gva, old, new``, ...), kept for one release."""
    obj = event.to_json()
    obj["fields"] = json_fields(event.name, event.fields)
    return obj


def write_jsonl(lines: TextIO, out: TextIO) -> TraceCounts:
    counts = TraceCounts()
    batch: list[str] = []
    dumps = json.dumps
    for event in iter_events(lines, counts):
        batch.append(dumps(event_json(event)))
        if len(batch) >= WRITE_BATCH:
            out.write("\n".join(batch) + "\n")
            batch.clear()
    if batch:
        out.write("\n".join(batch) + "\n")
    return counts


def run_replay_text(args: argparse.Namespace) -> int:
    """The two text modes; `run_replay` turns TraceFileError into exit code 2."""
    with open_trace(args.trace) as lines:
        if args.summary:
            print(json.dumps(summarize(lines).summary()))
        else:
            write_jsonl(lines, sys.stdout)
    sys.stdout.flush()
    return 0


def run_replay(args: argparse.Namespace) -> int:
    """`mmuscope replay`: the app without a flag, else the text modes."""
    if not (args.jsonl or args.summary):
        return run_replay_app(args)
    try:
        return run_replay_text(args)
    except TraceFileError as err:
        raise CliError(str(err)) from None


def run_replay_app(args: argparse.Namespace) -> int:
    """The replay screen on a file (seekable: not stdin)."""
    path: Path = args.trace
    if str(path) == "-":
        raise CliError("the replay screen seeks in the trace, so it needs a file, not stdin "
                       "(--jsonl and --summary read stdin)")  # fmt: skip
    try:
        with open_trace(path):
            pass
    except TraceFileError as err:
        raise CliError(str(err)) from None
    check_replay_app_options(args)
    from .app import make_app

    make_app(trace=path, theme=args.theme, export_dir=args.export_dir).run()
    return 0
