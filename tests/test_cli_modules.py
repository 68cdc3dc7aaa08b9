"""The app's modules import no one in a circle: the command modules share
`tui/cliparts.py`, and `tui/cli.py` only assembles them.

Every import counts, also those inside functions (they run as soon as the function
does); only imports under `if TYPE_CHECKING:` are left out, as they never run.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx
from mmuscope.tui.cli import RUNNERS, build_parser

TUI = Path(__file__).resolve().parent.parent / "tui"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(TUI.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return found


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The `tui` modules an import statement loads (a package and its named submodules)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, *([node.module] if node.module else [])])
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def import_graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    paths = sorted(TUI.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    for path in paths:
        module = _module_name(path)
        graph.add_node(module)
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _targets(module, path.name == "__init__.py", node):
                if target in modules and target != module:
                    graph.add_edge(module, target)
    return graph


def test_the_graph_sees_the_imports_the_cli_makes() -> None:
    graph = import_graph()
    assert graph.has_edge("tui.commands", "tui.cliparts")
    assert graph.has_edge("tui.serve", "tui.explorer_cli")  # `from .x import y`
    assert graph.has_edge("tui.explorer_cli", "tui.app")  # inside a function
    assert not graph.has_edge("tui.scenario_runner", "tui.app")  # only for type checking


def test_no_tui_module_imports_itself_through_others() -> None:
    cycles = list(nx.simple_cycles(import_graph()))
    assert cycles == [], " ; ".join(" -> ".join([*c, c[0]]) for c in cycles)


def test_no_command_module_imports_the_assembling_cli() -> None:
    importers = sorted(nx.ancestors(import_graph(), "tui.cli"))
    assert importers == ["tui.__main__"]


def test_a_command_line_builds_only_its_command_and_lists_every_command() -> None:
    """Start-up: `mmuscope` alone, or with an option whose value names a command, imports
    no command module, yet `--help` lists every command with its help line; a command
    after the explorer's options gets its arguments."""
    full = build_parser().format_help()
    assert build_parser([]).format_help() == full
    assert build_parser(["--scenario", "simulate"]).format_help() == full
    words = ["--layout", "max", "lookup", "0x1"]
    args = build_parser(words).parse_args(words)
    assert (args.command, args.gfn) == ("lookup", 1)
    words = ["--scenario", "simulate", "--paused"]
    args = build_parser(words).parse_args(words)
    assert (args.command, args.scenario, args.paused) == (None, "simulate", True)
    assert build_parser(["bench", "--quick"]).parse_args(["bench", "--quick"]).quick
    commands = [f"mmuscope.tui.{module}" for module, _ in set(RUNNERS.values())]
    code = (
        "import sys; from mmuscope.tui.cli import build_parser; "
        "build_parser(['--scenario', 'simulate', '--paused']); "
        f"print([m for m in {commands!r} if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"
