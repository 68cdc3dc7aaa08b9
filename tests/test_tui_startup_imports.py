"""Start-up: the explorer's first frame, the memslots screen on pc-4g, is built without
the modules it does not draw.  The trace formats (engine.trace) come with the first event
shown; the MMU models, replay, export, scenarios, claims and the dataset modules with
their own screens or commands; no heavy library at all."""

from __future__ import annotations

import subprocess
import sys

# packages (and their submodules) the explorer's first screen must not import
LAZY = (
    "mmuscope.engine.trace",
    "mmuscope.engine.mmu",
    "mmuscope.engine.replay",
    "mmuscope.engine.export",
    "mmuscope.engine.scenarios",
    "mmuscope.engine.claims",
    "mmuscope.engine.dataset",
    "mmuscope.engine.kvm",
    "networkx",
    "graphviz",
    "pyarrow",
    "duckdb",
)


def test_the_explorers_first_screen_imports_only_what_it_draws() -> None:
    """`mmuscope` as the CLI starts it: the parser, the app, and its memslots screen."""
    code = (
        "import sys\n"
        "from mmuscope.tui.cli import build_parser\n"
        "from mmuscope.tui.explorer_cli import explorer_app\n"
        "app = explorer_app(build_parser([]).parse_args([]))\n"
        "app.memslots_screen()\n"
        f"lazy = {LAZY!r}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in lazy or m.startswith("
        "tuple(p + '.' for p in lazy) + lazy)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"
