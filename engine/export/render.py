"""Write dot text to a file: `.dot` as is, `.pdf`/`.svg`/`.png` through Graphviz's `dot`.

The 2011 wbtree RFC (the memslot-search thread: Alex Williamson, "[RFC PATCH 0/3]
Weight-balanced binary tree + KVM growable memory slots using wbtree") left the rendering
step to the reader: `dot -Tpdf foo.dot > foo.pdf`.  `write_export` runs that step for you
and writes the result atomically (a temporary file in the same directory, then
`os.replace`), so a failed export never leaves a partial file behind.  Every failure is
an `ExportError` with a one-line message fit to show the user.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable

SUPPORTED_FORMATS = ("dot", "pdf", "svg", "png")
INSTALL_HINT = (
    "Graphviz 'dot' is not installed: run  sudo apt-get install graphviz  (or export to .dot)"
)
FILE_MODE = 0o644  # NamedTemporaryFile creates 0600; an exported picture is for sharing


class ExportError(Exception):
    """An export that could not be done; `str()` is a one-line message for the user."""


def dot_binary() -> str | None:
    """Path of Graphviz's `dot`, or None when it is not installed."""
    return shutil.which("dot")


def output_format(out: pathlib.Path) -> str:
    """The format named by the file's suffix (case-insensitive), one of SUPPORTED_FORMATS."""
    fmt = out.suffix.lower().lstrip(".")
    if fmt not in SUPPORTED_FORMATS:
        raise ExportError(f"unsupported output format '{out.suffix}': use .dot, .pdf, .svg or .png")
    return fmt


def first_line(text: str) -> str:
    """The first non-blank line of `text` (dot's error message), or a fallback."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return "no error message"


#: dot needs ~6 s for a 4000-node tree and grows faster than linearly (the `max` layout's
#: 32764 slots run for many minutes): beyond this, refuse up front (`check_dot_size`)
DOT_NODE_LIMIT = 4000
DOT_TIMEOUT = 120.0  # seconds; a `dot` still running then is killed and the export fails

_running: set[subprocess.Popen[bytes]] = set()
_running_lock = threading.Lock()


def check_dot_size(
    nodes: int, what: str, hint: str = "export to .dot instead, or use a smaller layout"
) -> None:
    """Refuse, before running `dot`, a drawing too big for it to lay out in reasonable time."""
    if nodes > DOT_NODE_LIMIT:
        raise ExportError(
            f"{what}: {nodes} nodes is too many for dot to lay out in reasonable time "
            f"(at most {DOT_NODE_LIMIT}): {hint}"
        )


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, before exec
    """In the `dot` child: SIGKILL it when the thread that started it dies (Linux's
    PR_SET_PDEATHSIG), so a killed mmuscope leaves no `dot` spinning."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _load_prctl() -> Callable[[int, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_prctl = _load_prctl() if sys.platform.startswith("linux") else None


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill `dot`'s whole process group (it runs in a session of its own) and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.wait()


def kill_running_dots() -> None:
    """Kill every `dot` still running (the CLI and the app call this on exit and interrupt)."""
    with _running_lock:
        running = list(_running)
    for proc in running:
        _kill(proc)


def run_dot(dot_text: str, fmt: str, timeout: float = DOT_TIMEOUT) -> bytes:
    """`dot -T<fmt>` on `dot_text`: the rendered bytes, or ExportError.

    `dot` runs in its own process group (a terminal's Ctrl+C reaches mmuscope only, which
    then kills it), dies with its parent, and is killed after `timeout` seconds."""
    binary = dot_binary()
    if binary is None:
        raise ExportError(INSTALL_HINT)
    try:
        proc = subprocess.Popen(
            [binary, f"-T{fmt}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_die_with_parent if _prctl is not None else None,
        )
    except OSError as exc:
        raise ExportError(f"cannot run {binary}: {exc.strerror or exc}") from exc
    with _running_lock:
        _running.add(proc)
    try:
        out, err = proc.communicate(dot_text.encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ExportError(
            f"dot -T{fmt} took longer than {timeout:g} s and was stopped: export to .dot instead"
        ) from None
    finally:
        _kill(proc)
        with _running_lock:
            _running.discard(proc)
    if proc.returncode != 0:
        message = first_line(err.decode(errors="replace"))
        raise ExportError(f"dot -T{fmt} failed: {message}")
    return out


def render(dot_text: str, fmt: str) -> bytes:
    """The bytes to write for `fmt`: the dot text itself, or what `dot` made of it."""
    if fmt == "dot":
        return dot_text.encode()
    return run_dot(dot_text, fmt)


def write_atomically(out: pathlib.Path, data: bytes) -> None:
    """Write `data` to `out` through a temporary sibling and `os.replace`; never partial."""
    tmp_name: str | None = None
    try:
        with tempfile.NamedTemporaryFile(
            delete=False, dir=out.parent, prefix=f".{out.name}."
        ) as tmp:
            tmp_name = tmp.name
            tmp.write(data)
        os.chmod(tmp_name, FILE_MODE)
        os.replace(tmp_name, out)
    except BaseException as exc:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
        if isinstance(exc, OSError):
            raise ExportError(f"cannot write {out}: {exc.strerror or exc}") from exc
        raise


def write_export(dot_text: str, out: pathlib.Path) -> None:
    """Write `dot_text` to `out` in the format its suffix names (.dot, .pdf, .svg, .png)."""
    out = pathlib.Path(out)
    fmt = output_format(out)
    if not out.parent.is_dir():
        raise ExportError(f"cannot write {out}: no such directory {out.parent}")
    write_atomically(out, render(dot_text, fmt))
