"""Write dot text to a file: `.dot` as is, `.pdf`/`.svg`/`.png` through Graphviz's `dot`.

The 2011 wbtree RFC (seed 000: Alex Williamson, "[RFC PATCH 0/3] Weight-balanced binary
tree + KVM growable memory slots using wbtree") left the rendering step to the reader:
`dot -Tpdf foo.dot > foo.pdf`.  `write_export` runs that step for you and writes the result
atomically (a temporary file in the same directory, then `os.replace`), so a failed export
never leaves a partial file behind.  Every failure is an `ExportError` with a one-line
message fit to show the user.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import subprocess
import tempfile

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


def run_dot(dot_text: str, fmt: str) -> bytes:
    """`dot -T<fmt>` on `dot_text`: the rendered bytes, or ExportError."""
    binary = dot_binary()
    if binary is None:
        raise ExportError(INSTALL_HINT)
    try:
        done = subprocess.run(
            [binary, f"-T{fmt}"], input=dot_text.encode(), capture_output=True, check=False
        )
    except OSError as exc:
        raise ExportError(f"cannot run {binary}: {exc.strerror or exc}") from exc
    if done.returncode != 0:
        message = first_line(done.stderr.decode(errors="replace"))
        raise ExportError(f"dot -T{fmt} failed: {message}")
    return done.stdout


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
