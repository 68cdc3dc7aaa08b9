"""Recording a guest program for the command line: `engine.kvm.record.record` with its
failures as one-line errors (exit 2), and files written through a temporary name."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .cliparts import CliError


def record_or_fail(program: Any, on_text: Any = None, *, trace: bool = True, **hooks: Any) -> Any:
    """`engine.kvm.record.record`, its failures as one-line errors."""
    from mmuscope.engine.kvm.record import record
    from mmuscope.engine.kvm.runner import GuestError
    from mmuscope.engine.kvm.tracing import TracefsError
    from mmuscope.engine.kvm.vmm import GuestTimeoutError, KvmUnavailableError

    try:
        return record(program, on_text=on_text, trace=trace, **hooks)
    except (KvmUnavailableError, TracefsError, GuestError, GuestTimeoutError) as err:
        raise CliError(str(err)) from None
    except PermissionError as err:
        raise CliError(
            f"{err.filename or 'tracefs'}: permission denied: recording the "
            "kernel's events needs root (run it with sudo)"
        ) from None


@contextlib.contextmanager
def text_sink(path: Path | None) -> Iterator[IO[str] | None]:
    """Where a recording's text goes as each drain brings it: `path` through a temporary
    name in its directory (renamed when the block ends well, removed otherwise); None
    without a path."""
    if path is None:
        yield None
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w+", encoding="utf-8") as out:
            yield out
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise CliError(f"{path}: {err.strerror or err}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
