"""`mmuscope serve`: the explorer in a web browser, for a classroom (textual-serve).

textual-serve runs one `mmuscope` process per browser tab on Textual's web driver and
relays its terminal over a websocket to xterm.js in the page.  The served command is this
installation's `mmuscope` (the same interpreter) with the explorer options given to
`serve`, e.g. `mmuscope serve --scenario vtlb --theme projector`.

Offline: textual-serve bundles its JavaScript (xterm.js) and CSS, but its page template
links a web font from fonts.googleapis.com.  The page served here drops that link and
declares the same font (Roboto Mono) from the copy textual-serve ships in its static
files, so the page loads nothing from outside the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import ipaddress
import logging
import re
import shlex
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cliparts import CliError, add_command, add_explorer_options, run_app
from .explorer_cli import explorer_app

if TYPE_CHECKING:
    from aiohttp import web


DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
# seconds the open browser tabs' apps get to quit on Ctrl+C: an app quits in well under a
# second on an idle machine but took over 5 s on two loaded cores, and a tab still running
# when the loop closes prints asyncio's "Loop ... that handles pid ... is closed" traceback
SHUTDOWN_TIMEOUT = 20.0
APP_FLAG = "--run-app"  # the server's own child processes: the explorer on the web driver

FONT_LINK = re.compile(r"<link[^>]*fonts\.googleapis\.com[^>]*>")
LOCAL_FONT = """<style>
      @font-face {
        font-family: "Roboto Mono";
        src: url("{{ config.static.url }}fonts/RobotoMono-VariableFont_wght.ttf");
      }
    </style>"""


def add_serve_parser(sub: Any) -> None:
    """The `serve` subcommand: where to listen, and the explorer's own options."""
    serve = add_command(
        sub,
        "serve",
        "serve the explorer to web browsers (a classroom), on 127.0.0.1",
        "The explorer in web browsers, for a classroom: each browser tab that opens the "
        f"page gets its own app, started with the explorer options given here (a scenario, "
        f"a theme, a guest). It listens on {DEFAULT_HOST} (this machine only) unless "
        "--host says otherwise, loads nothing from outside the machine, and stops on Ctrl+C.",
        (
            "mmuscope serve --scenario fast-zap --theme projector",
            "mmuscope serve --host 0.0.0.0 --port 8080  # the whole room; prints a warning",
        ),
    )
    serve.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}: this machine only)",
    )
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})"
    )
    serve.add_argument(APP_FLAG, action="store_true", help=argparse.SUPPRESS)
    add_explorer_options(serve)


def run_serve(args: argparse.Namespace) -> int:
    """`mmuscope serve`, or (with the hidden flag) one browser tab's explorer process."""
    if getattr(args, "run_app", False):
        run_app(explorer_app(args))
        return 0
    explorer_app(args)  # bad options fail here, once, not in every browser tab
    if not 0 < args.port < 65536:
        raise CliError(f"--port {args.port}: give a TCP port, 1 to 65535")
    check_port_free(args.host, args.port)
    warning = exposure_warning(args.host)
    if warning:
        print(warning, file=sys.stderr)
    server = make_server(served_command(args), args.host, args.port)
    try:
        server.serve()
    except OSError as err:  # the port was taken between the check and the bind
        raise CliError(f"cannot listen on {args.host}:{args.port}: {err.strerror}") from None
    # The server stops only on a signal (it handles Ctrl+C itself): one line and 130, as
    # a Ctrl+C ends every command (cli.main)
    raise KeyboardInterrupt


def explorer_argv(args: argparse.Namespace) -> list[str]:
    """The explorer options of `args` as command-line words (files made absolute)."""
    words: list[str] = []
    for action in add_explorer_options(argparse.ArgumentParser(add_help=False)):
        value = getattr(args, action.dest, None)
        if action.dest == "export_dir" and value is None:
            value = Path(".")  # no --export-dir: this directory, for every tab
        if value is None or value is False:
            continue
        words.append(action.option_strings[-1])
        if value is not True:
            words.append(str(value.resolve() if isinstance(value, Path) else value))
    return words


def served_command(args: argparse.Namespace) -> str:
    """The shell command textual-serve starts for each browser tab: this interpreter's
    `mmuscope` (python -m tui), so the served app is this very installation."""
    argv = [sys.executable, "-m", "mmuscope.tui", "serve", APP_FLAG, *explorer_argv(args)]
    return "exec " + shlex.join(argv)


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is on the loopback interface."""
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(
        ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos
    )


def exposure_warning(host: str) -> str | None:
    """One line when `--host` makes the app reachable from other machines."""
    if is_loopback(host):
        return None
    return (
        f"mmuscope: warning: listening on {host}: anyone who can reach this machine "
        "from the network can open the explorer"
    )


def check_port_free(host: str, port: int) -> None:
    """Raise CliError (one line, exit 2) when `host:port` cannot be bound."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as err:
        raise CliError(f"--host {host}: {getattr(err, 'strerror', None) or err}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
        try:
            probe.bind(address)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise CliError(f"port {port} is already in use on {host}") from None
            raise CliError(f"cannot listen on {host}:{port}: {err.strerror}") from None


def url_host(host: str) -> str:
    """`host` as it goes in a URL (IPv6 literals in brackets)."""
    return f"[{host}]" if ":" in host else host


def page_urls(host: str, port: int) -> str:
    """The address to open; for a wildcard host, the local one and the network one."""
    if host in ("0.0.0.0", "::", ""):
        local = "[::1]" if host == "::" else "127.0.0.1"
        return f"http://{local}:{port}/ (other machines: http://{socket.gethostname()}:{port}/)"
    return f"http://{url_host(host)}:{port}/"


def offline_template(templates: Path) -> str:
    """textual-serve's page, with its one outside link (a Google web font) replaced by
    the same font from textual-serve's own static files."""
    page = (templates / "app_index.html").read_text(encoding="utf-8")
    return FONT_LINK.sub(LOCAL_FONT, page)


def _server_class() -> type[Any]:
    from textual_serve.server import Server

    class _ExplorerServer(Server):
        """textual-serve's server with an offline page, quiet logs, and page URLs that
        follow the address the browser used (so `--host 0.0.0.0` works from other
        machines: textual-serve would otherwise hand them ws://0.0.0.0/ws)."""

        def __init__(self, command: str, host: str, port: int) -> None:
            super().__init__(command, host=host, port=port, title="mmuscope")
            self.public_url = f"http://{url_host(host)}:{port}"
            self.sessions: set[asyncio.Task[Any]] = set()

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            # One browser tab: remembered so that Ctrl+C can end it (below).
            task = asyncio.current_task()
            assert task is not None
            self.sessions.add(task)
            try:
                return await super().handle_websocket(request)
            finally:
                self.sessions.discard(task)

        async def on_shutdown(self, app: web.Application) -> None:
            # aiohttp would wait for open websockets up to its shutdown timeout (60 s):
            # end each tab now; textual-serve then tells its app to quit and waits for it.
            for task in self.sessions:
                task.cancel()
            if self.sessions:
                await asyncio.wait(self.sessions, timeout=SHUTDOWN_TIMEOUT)

        def initialize_logging(self) -> None:
            logging.basicConfig(level=logging.WARNING, format="mmuscope serve: %(message)s")

        async def _make_app(self) -> web.Application:
            import aiohttp_jinja2
            import jinja2

            app = await super()._make_app()
            page = offline_template(Path(self.templates_path))
            aiohttp_jinja2.setup(app, loader=jinja2.DictLoader({"app_index.html": page}))
            return app

        async def handle_index(self, request: web.Request) -> web.StreamResponse:
            # No await runs between this and textual-serve's use of public_url.
            self.public_url = f"{request.scheme}://{request.host}"
            return await super().handle_index(request)

        async def on_startup(self, app: web.Application) -> None:
            print(
                f"mmuscope: open {page_urls(self.host, self.port)} in a web browser; Ctrl+C stops",
                flush=True,
            )

    return _ExplorerServer


def make_server(command: str, host: str, port: int) -> Any:
    """The server (textual-serve is imported only when serving)."""
    return _server_class()(command, host, port)
