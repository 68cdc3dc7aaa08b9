"""Every command explains itself, as a user reads it in `mmuscope COMMAND --help`: a
paragraph on what it does, a help text for each option, and examples that run as printed.

The examples of one command run in order, in one fresh directory, through bash (they may
pipe and redirect), with the installed `mmuscope` on PATH.  An example that opens the app
ends, without a terminal, on the one-line "needs a terminal" error and nothing else; the
server's examples are started, answered over HTTP and stopped with Ctrl+C.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from mmuscope.tui.cli import RUNNERS

from tests.cli_run import MMUSCOPE, ok
from tests.kvm_host import TRACE_REASON

COMMANDS = [name for name in RUNNERS if name is not None]


def section(text: str, title: str) -> list[str]:
    """The lines of a help text's section `title:` up to the next blank line."""
    lines = text.splitlines()
    start = lines.index(f"{title}:") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def description(text: str) -> str:
    """The paragraph between the usage and the first section."""
    paragraphs = text.split("\n\n")
    if len(paragraphs) < 2 or re.match(r"[a-z ]+:\n", paragraphs[1]):
        return ""
    return paragraphs[1]


def options_without_help(text: str) -> list[str]:
    """Options whose entry, in any section of the help, has no text beside or below it."""
    lines = text.splitlines()
    missing = []
    for i, line in enumerate(lines):
        if not line.startswith("  -"):
            continue
        beside = re.search(r"\S {2,}\S", line[2:])
        below = i + 1 < len(lines) and re.match(r" {6,}\S", lines[i + 1]) is not None
        if not (beside or below):
            missing.append(line.strip())
    return missing


def examples(text: str) -> list[str]:
    """The command lines of the `examples:` section: continuations joined, comments cut."""
    commands: list[str] = []
    joined = ""
    for line in section(text, "examples"):
        joined += line.strip()
        if joined.endswith("\\"):
            joined = joined[:-1]
            continue
        commands.append(re.sub(r"\s+#.*$", "", joined))
        joined = ""
    return commands


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_explains_itself(command: str) -> None:
    text = ok(command, "--help")
    assert text.startswith(f"usage: mmuscope {command}")
    assert len(description(text).split()) >= 15, text
    assert options_without_help(text) == []
    shown = examples(text)
    assert len(shown) >= 2 and all(line.startswith("mmuscope ") for line in shown), shown
    assert any(line.startswith(f"mmuscope {command}") for line in shown)


def test_the_section_readers_see_what_is_missing() -> None:
    """The checks above fail on a help text without them."""
    bare = "usage: mmuscope x [-h] [--y Y]\n\noptions:\n  -h, --help  show\n  --y Y\n"
    assert description(bare) == "" and options_without_help(bare) == ["--y Y"]
    with pytest.raises(ValueError):
        examples(bare)
    helped = bare.replace("  --y Y\n", "  --y Y\n              the y\n") + "\nexamples:\n  a \\\n"
    assert options_without_help(helped) == []
    assert examples(helped + "    b  # c\n") == ["a b"]


def _port_of(line: str) -> int:
    found = re.search(r"--port (\d+)", line)
    return int(found.group(1)) if found else 8000


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _run_server(line: str, cwd: Path, env: dict[str, str]) -> None:
    """A `serve` example: started, its page fetched, stopped as Ctrl+C stops it."""
    port = _port_of(line)
    if not _port_free(port):
        pytest.skip(f"port {port}, which the example names, is taken on this machine")
    server = subprocess.Popen(
        ["bash", "-c", f"exec {line}"],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.communicate()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
                    assert page.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "the server never answered"
                time.sleep(0.2)
    finally:
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=30)
    assert server.returncode == 130, (out, err)


def test_the_bare_command_explains_itself() -> None:
    text = ok("--help")
    assert len(description(text).split()) >= 15 and options_without_help(text) == []
    assert "mmuscope COMMAND --help" in text and len(examples(text)) >= 2


#: `query`'s and `simulate`'s examples run in tests/test_query_cli.py and
#: tests/test_simulate_cli.py (what they print or write checked there too)
RUN_ELSEWHERE = ("query", "simulate")
RUN_HERE = [name for name in COMMANDS if name not in RUN_ELSEWHERE]


def run_example(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """One example as a user pastes it (through bash, the installed `mmuscope` on PATH):
    it succeeds with some output, or opens the app and ends on "needs a terminal"."""
    env = dict(os.environ, PATH=f"{MMUSCOPE.parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", line],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    opens_the_app = (
        done.returncode == 2 and done.stderr.count("\n") == 1 and "needs a terminal" in done.stderr
    )
    assert done.returncode == 0 or opens_the_app, (line, done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, (line, done.stderr)
    if done.returncode == 0:
        assert done.stdout or any(cwd.iterdir()), f"{line}: no output"
    return done


@pytest.mark.parametrize("command", ["", *RUN_HERE])
def test_the_examples_run_as_printed(command: str, tmp_path: Path) -> None:
    if command == "kvm" and TRACE_REASON is not None:
        pytest.skip(TRACE_REASON)
    env = dict(os.environ, PATH=f"{MMUSCOPE.parent}{os.pathsep}{os.environ['PATH']}")
    for line in examples(ok(*[command][: bool(command)], "--help")):
        if line.startswith("mmuscope serve"):
            _run_server(line, tmp_path, env)
            continue
        run_example(line, tmp_path)


def test_the_commands_run_elsewhere_still_have_examples_run() -> None:
    """Each command left out here has its examples run in its own test file."""
    here = Path(__file__).parent
    for name in RUN_ELSEWHERE:
        assert name in COMMANDS
        text = (here / f"test_{name}_cli.py").read_text()
        assert "examples(" in text and "--help" in text, name
