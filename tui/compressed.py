"""Compressed traces (gzip, xz, zstd), read as the text inside them, as `replay` reads
every trace: known by their magic bytes (RFC 1952's 1f 8b; xz's fd 37 7a 58 5a 00; the
zstd frame's 28 b5 2f fd, RFC 8878), not by their names.

gzip and xz come with Python; zstd from Python's own module (3.14), else the `zstandard`
package, else the `zstd` program (Debian's package of that name), streamed.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import lzma
import shutil
import subprocess
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

MAGIC = {b"\x1f\x8b": "gzip", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
DAMAGED = (EOFError, gzip.BadGzipFile, lzma.LZMAError, zlib.error)  # read errors of the data


class CompressedError(Exception):
    """A compressed trace that cannot be read; `str()` is one line."""


def compression_of(path: Path) -> str | None:
    """``gzip``, ``xz``, ``zstd``, or None (not compressed, or unreadable)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(6)
    except OSError:
        return None
    return next((kind for magic, kind in MAGIC.items() if head.startswith(magic)), None)


def _text(binary: Any) -> TextIO:
    return io.TextIOWrapper(binary, encoding="utf-8", errors="replace", newline="")


@contextmanager
def open_compressed(path: Path, kind: str) -> Iterator[Iterable[str]]:
    """The text inside `path`; damaged data, when read, is a CompressedError."""
    try:
        with _open(path, kind) as text:
            yield text
    except DAMAGED as err:
        raise CompressedError(f"{path}: its {kind} data is damaged ({err})") from None


@contextmanager
def _open(path: Path, kind: str) -> Iterator[Iterable[str]]:
    if kind == "gzip":
        with gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="") as text:
            yield text
    elif kind == "xz":
        with lzma.open(path, "rt", encoding="utf-8", errors="replace", newline="") as text:
            yield text
    else:
        with _zstd(path) as text:
            yield text


@contextmanager
def _zstd(path: Path) -> Iterator[Iterable[str]]:
    for module in ("compression.zstd", "zstandard"):
        with contextlib.suppress(ImportError):
            zstd: Any = __import__(module, fromlist=["open"])
            if module == "compression.zstd":
                with zstd.open(path, "rb") as binary:
                    yield _text(binary)
            else:
                with path.open("rb") as raw, zstd.ZstdDecompressor().stream_reader(raw) as binary:
                    yield _text(binary)
            return
    binary = shutil.which("zstd")
    if binary is None:
        raise CompressedError(
            f"{path} is zstd-compressed and zstd is not installed: sudo apt-get install zstd "
            f"(or: zstd -dc {path} | mmuscope replay - ...)"
        )
    proc = subprocess.Popen(
        [binary, "-dc", "--", str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    stderr = proc.stderr

    def lines() -> Iterator[str]:
        """The text, and at its end zstd's verdict: a damaged file fails there, before
        the reader takes what it read for the whole trace."""
        yield from _text(proc.stdout)
        if proc.wait() != 0:
            why = stderr.read().decode(errors="replace").strip().splitlines()
            raise CompressedError(f"{path}: zstd -dc failed: {why[-1] if why else proc.returncode}")

    try:
        yield lines()
    finally:
        proc.stdout.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        stderr.close()
