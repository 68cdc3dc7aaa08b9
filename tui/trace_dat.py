"""Binary `trace.dat` files (what `trace-cmd record` writes), read as text through
`trace-cmd report`.

mmuscope parses the kernel's trace *text* (`trace-cmd report`, tracefs `trace`); a
trace.dat starts with trace-cmd's magic, the bytes 0x17 0x08 0x44 then "tracing" (the
`magic` and `tracing` fields of trace-cmd's file header, see trace-cmd.dat(5)), and holds
the ring buffer pages as the kernel wrote them.  Where `trace-cmd` is installed it turns
one into text; otherwise the user is told the command to run.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

TRACE_DAT_MAGIC = b"\x17\x08Dtracing"
INSTALL = "sudo apt-get install trace-cmd (or: make trace-cmd)"


class TraceDatError(Exception):
    """A trace.dat that cannot be turned into text; `str()` is one line for the user."""


def is_trace_dat(path: Path) -> bool:
    """Whether `path` starts with trace-cmd's magic (unreadable files are not)."""
    try:
        with path.open("rb") as handle:
            return handle.read(len(TRACE_DAT_MAGIC)) == TRACE_DAT_MAGIC
    except OSError:
        return False


def looks_like_trace_dat(first_line: str) -> bool:
    """The same test on text already decoded (a trace.dat piped into stdin)."""
    return first_line.startswith(TRACE_DAT_MAGIC.decode("latin-1"))


def report_command(path: Path | str) -> str:
    return f"trace-cmd report -i {path}"


def _trace_cmd(path: Path) -> str:
    binary = shutil.which("trace-cmd")
    if binary is None:
        raise TraceDatError(
            f"{path} is a binary trace-cmd trace.dat and trace-cmd is not installed: "
            f"run  {report_command(path)} > {path.stem}.txt  and replay that "
            f"(trace-cmd: {INSTALL})"
        )
    return binary


@contextmanager
def report_lines(path: Path) -> Iterator[IO[str]]:
    """`trace-cmd report -i path` as text lines, streamed; its failure is a TraceDatError
    (after the lines it did print, if any).  The child never outlives the reading."""
    binary = _trace_cmd(path)
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            [binary, "report", "-i", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errors,
            encoding="utf-8",
            errors="replace",
            start_new_session=True,  # a terminal's Ctrl+C reaches mmuscope, which ends it
        )
        assert proc.stdout is not None
        try:
            yield proc.stdout
            stopped_early = proc.stdout.read(1) != ""
        finally:
            with contextlib.suppress(OSError):
                proc.stdout.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)  # done writing, or SIGPIPE'd by the close
            if proc.poll() is None:
                proc.kill()  # an interrupted read: it does not outlive mmuscope
            proc.wait()
        if proc.returncode != 0 and not stopped_early:
            errors.seek(0)
            lines = errors.read().decode(errors="replace").strip().splitlines()
            why = lines[-1].strip() if lines else f"exit status {proc.returncode}"
            raise TraceDatError(f"{report_command(path)} failed: {why}")


def report_to_file(path: Path) -> Path:
    """The report written to a temporary text file (the replay screen seeks in its file);
    the caller removes it."""
    with tempfile.NamedTemporaryFile(
        "w", prefix=f"mmuscope-{path.stem}-", suffix=".txt", delete=False, encoding="utf-8"
    ) as out:
        try:
            with report_lines(path) as lines:
                shutil.copyfileobj(lines, out)
        except BaseException:
            Path(out.name).unlink(missing_ok=True)
            raise
    return Path(out.name)
