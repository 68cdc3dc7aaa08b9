"""Recording a guest program for the command line: `engine.kvm.record.record` with its
failures as one-line errors (exit 2), and files written through a temporary name."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .cliparts import CliError


def record_or_fail(program: Any, on_text: Any, *, trace: bool = True, **hooks: Any) -> Any:
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


def write_atomically(path: Path, text: str) -> None:
    """`text` to `path` through a temporary name in the same directory."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise CliError(f"{path}: {err.strerror or err}") from None
