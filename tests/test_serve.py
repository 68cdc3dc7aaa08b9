"""`mmuscope serve` (tui/serve.py): the explorer in a web browser through textual-serve.

The end-to-end test starts the real `mmuscope serve` and drives Debian's headless
Chromium over the DevTools protocol (aiohttp's websocket client, which textual-serve
already brings in): it loads the page, sees the explorer drawn, presses F2, sees the
shadow-MMU screen, checks that the page fetched nothing from outside the server, and
stops the server with Ctrl+C.  `make chromium` (a prerequisite of `make test`) installs
Chromium; without it that test is skipped.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mmuscope.tui import serve
from mmuscope.tui.cli import build_parser, main

MMUSCOPE = Path(sys.executable).with_name("mmuscope")
ANSI = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]|\x1b\][^\x07]*\x07")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SERVED = ["--paused", "--theme", "projector"]  # explorer options given to `serve`
BLACK = b"\x00\x00\x00"  # the projector theme's background
# seconds for any one thing the browser or the server must do: the served app starts a
# whole Python interpreter and Textual beside Chromium, which takes over 20 s on two
# loaded cores while the other xdist worker runs
STEP_TIMEOUT = 45.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- the command line, without a browser ---------------------------------------------


def test_served_command_is_this_mmuscope_with_the_explorer_options() -> None:
    args = build_parser().parse_args(
        ["serve", "--port", "9000", "--scenario", "vtlb", "--theme", "projector", "--paused"]
    )
    command = serve.served_command(args)
    words = command.split()
    assert words[0] == "exec"
    assert words[1:6] == [sys.executable, "-m", "mmuscope.tui", "serve", serve.APP_FLAG]
    assert "--scenario vtlb" in command and "--theme projector" in command
    assert "--paused" in words and "--port" not in words and "--host" not in words
    # What the browser tab runs parses back to the same explorer.
    child = build_parser().parse_args(words[4:])
    assert child.run_app and child.scenario == "vtlb" and child.theme == "projector"
    assert child.export_dir == Path(".").resolve()


def test_only_loopback_hosts_are_quiet() -> None:
    for host in ("127.0.0.1", "localhost", "::1"):
        assert serve.exposure_warning(host) is None, host
    warning = serve.exposure_warning("0.0.0.0")
    assert warning is not None and "network" in warning and "\n" not in warning


def test_a_port_in_use_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"port {port} is already in use" in err


def test_bad_explorer_options_fail_before_serving(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--port", str(free_port()), "--theme", "no-such-theme"]) == 2
    assert "unknown theme" in capsys.readouterr().err


def test_the_page_links_nothing_outside_the_server() -> None:
    from textual_serve.server import Server

    page = serve.offline_template(Path(Server("true").templates_path))
    assert "googleapis" not in page
    assert re.findall(r"(?:href|src)=\"(https?:[^\"]*)", page) == []
    assert "fonts/RobotoMono-VariableFont_wght.ttf" in page


# -- the browser ------------------------------------------------------------------


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """End a process started in its own session, and everything it started."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            continue
        try:  # the group may outlive its leader (the apps textual-serve started)
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break


def _wait_for_line(proc: subprocess.Popen[bytes], log: Path, pattern: str) -> re.Match[bytes]:
    """Wait until `proc`'s output file `log` has a match of `pattern`."""
    deadline = time.monotonic() + STEP_TIMEOUT
    while time.monotonic() < deadline:
        seen = log.read_bytes()
        if found := re.search(pattern.encode(), seen):
            return found
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"no {pattern!r} from {proc.args!r}: {log.read_bytes()[-2000:]!r}")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, str]]:
    port = free_port()
    command = [str(MMUSCOPE)] if MMUSCOPE.exists() else [sys.executable, "-m", "mmuscope.tui"]
    env = dict(os.environ, TEXTUAL_ANIMATIONS="none")
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*command, "serve", "--port", str(port), *SERVED, "--export-dir", str(tmp_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        url = _wait_for_line(proc, log, r"open (http://\S+)").group(1).decode()
        yield proc, log, url
    finally:
        _kill_group(proc)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[str]:
    """Headless Chromium; yields the DevTools address (host:port)."""
    if CHROMIUM is None:
        pytest.skip(
            "Chromium is not installed (`make chromium` installs it: apt-get install chromium)"
        )
    log = tmp_path / "chromium.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless=new",
                "--no-sandbox",  # we may be root, as in CI
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--remote-debugging-port=0",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # as if offline
                f"--user-data-dir={tmp_path / 'chromium'}",
                "--window-size=1000,700",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    try:
        found = _wait_for_line(proc, log, r"DevTools listening on ws://([^/]+)/")
        yield found.group(1).decode()
    finally:
        _kill_group(proc)


class DevTools:
    """A minimal DevTools-protocol client over one page target's websocket."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        ident = self.next_id
        await self.ws.send_json({"id": ident, "method": method, "params": params})
        deadline = time.monotonic() + STEP_TIMEOUT
        while True:
            left = deadline - time.monotonic()
            message = json.loads(await asyncio.wait_for(self.ws.receive_str(), max(left, 0)))
            if message.get("id") == ident:
                assert "error" not in message, message
                return dict(message["result"])
            if "method" in message:
                self.events.append(message)

    async def pump(self, seconds: float) -> None:
        """Collect events for `seconds`."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = json.loads(await asyncio.wait_for(self.ws.receive_str(), left))
            except asyncio.TimeoutError:
                return
            if "method" in message:
                self.events.append(message)

    def terminal_text(self) -> str:
        """What the server sent the terminal so far, escape codes removed."""
        chunks = []
        for event in self.events:
            if event["method"] == "Network.webSocketFrameReceived":
                frame = event["params"]["response"]
                data = frame["payloadData"]
                if frame["opcode"] == 2:
                    data = base64.b64decode(data).decode("utf-8", "replace")
                chunks.append(data)
        return ANSI.sub("", "".join(chunks))

    async def wait_for_text(self, wanted: str) -> None:
        deadline = time.monotonic() + STEP_TIMEOUT
        while wanted not in self.terminal_text():
            assert time.monotonic() < deadline, f"{wanted!r} never reached the terminal"
            await self.pump(0.2)

    async def screenshot(self) -> tuple[int, int, bytes]:
        """The page as RGB pixels, at a quarter of its size (quick to decode)."""
        size = await self.call("Page.getLayoutMetrics")
        view = size["cssLayoutViewport"]
        clip = {"x": 0, "y": 0, "width": view["clientWidth"], "height": view["clientHeight"]}
        shot = await self.call("Page.captureScreenshot", format="png", clip={**clip, "scale": 0.25})
        return decode_png(base64.b64decode(shot["data"]))


def decode_png(png: bytes) -> tuple[int, int, bytes]:
    """Width, height and RGB bytes of an 8-bit RGB or RGBA PNG (what Chromium writes)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    width = height = channels = 0
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, body = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw, stride = zlib.decompress(idat), width * channels
    rows: list[bytearray] = []
    prev = bytearray(stride)
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = prev[i], prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + pred) & 255
        rows.append(line)
        prev = line
    rgb = b"".join(bytes(r[i : i + 3]) for r in rows for i in range(0, stride, channels))
    return width, height, rgb


def pixels(shot: tuple[int, int, bytes]) -> list[bytes]:
    _, _, rgb = shot
    return [rgb[i : i + 3] for i in range(0, len(rgb), 3)]


def background(shot: tuple[int, int, bytes]) -> bytes:
    """The most common colour."""
    colours = pixels(shot)
    return max(set(colours), key=colours.count)


def drawn_share(shot: tuple[int, int, bytes]) -> float:
    """The share of pixels that are not the background colour."""
    colours, most = pixels(shot), background(shot)
    return sum(c != most for c in colours) / len(colours)


def changed_share(before: tuple[int, int, bytes], after: tuple[int, int, bytes]) -> float:
    a, b = pixels(before), pixels(after)
    return sum(x != y for x, y in zip(a, b, strict=True)) / max(len(a), 1)


async def drive(devtools_host: str, url: str) -> dict[str, Any]:
    import aiohttp

    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://{devtools_host}/json/list") as reply:
            targets = await reply.json()
        page = next(t for t in targets if t["type"] == "page")
        async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            tools = DevTools(ws)
            await tools.call("Network.enable")
            await tools.call("Page.enable")
            await tools.call("Page.navigate", url=url)
            await tools.wait_for_text("memslots")
            await tools.pump(1.0)  # let xterm.js draw what arrived
            first = await tools.screenshot()
            focus = "document.querySelector('.xterm-helper-textarea').focus()"
            await tools.call("Runtime.evaluate", expression=focus)
            key = {"key": "F2", "code": "F2", "windowsVirtualKeyCode": 113}
            await tools.call("Input.dispatchKeyEvent", type="rawKeyDown", **key)
            await tools.call("Input.dispatchKeyEvent", type="keyUp", **key)
            await tools.wait_for_text("TDP MMU")  # F2: the MMU screen, on today's TDP MMU
            await tools.pump(1.0)
            second = await tools.screenshot()
            requests = [
                e["params"]["request"]["url"]
                for e in tools.events
                if e["method"] == "Network.requestWillBeSent"
            ]
            return {"first": first, "second": second, "requests": requests}


def test_the_explorer_in_headless_chromium(
    browser: str, server: tuple[subprocess.Popen[bytes], Path, str]
) -> None:
    proc, log, url = server
    seen = asyncio.run(asyncio.wait_for(drive(browser, url), 4 * STEP_TIMEOUT))

    assert drawn_share(seen["first"]) > 0.05, "the terminal looks blank"
    assert background(seen["first"]) == BLACK, "not the projector theme given to `serve`"
    assert changed_share(seen["first"], seen["second"]) > 0.02, "F2 did not change the screen"
    origin = url.rstrip("/")
    outside = [u for u in seen["requests"] if not u.startswith((origin, "data:"))]
    assert seen["requests"] and outside == [], outside

    # Ctrl+C with a browser still connected: a clean stop, one line and 130 as everywhere.
    proc.send_signal(signal.SIGINT)
    returncode = proc.wait(timeout=STEP_TIMEOUT)
    output = log.read_text(errors="replace")
    assert returncode == 130 and "Traceback" not in output, output[-2000:]
    assert output.endswith("mmuscope: interrupted\n"), output[-2000:]
