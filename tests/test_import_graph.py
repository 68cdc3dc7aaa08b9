"""No module of engine/ or tui/ imports itself through others: the import graph of the
whole tree has no circle (docs/architecture.md §1, "Direction").

Every import statement counts, wherever it is: at module level, inside a function (it
runs as soon as the function does) and under `if TYPE_CHECKING:` (it never runs, but a
reader follows it all the same).  `from . import x` and `from .. import y` import the
package itself, so a package whose `__init__` imports a submodule that imports the
package back is a circle too.  Modules are named as in the repository (`engine.mmu.spte`);
`mmuscope.engine...` and `mmuscope.tui...` name the same modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "tui")
INSTALLED = "mmuscope."  # the wheel's top-level package


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The modules an import statement may load: `from a import b` loads `a`, and `a.b`
    when `b` is a submodule (names that are not modules fall out later)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name.removeprefix(INSTALLED)
        return
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, *([node.module] if node.module else [])])
    base = base.removeprefix(INSTALLED)
    yield base
    for alias in node.names:
        yield f"{base}.{alias.name}"


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> nx.DiGraph:
    paths = sorted(p for package in packages for p in (root / package).rglob("*.py"))
    modules = {module_name(root, p): p for p in paths}
    graph = nx.DiGraph()
    for module, path in modules.items():
        graph.add_node(module)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in imported(module, path.name == "__init__.py", node):
                    if target in modules and target != module:
                        graph.add_edge(module, target)
    return graph


def circles(graph: nx.DiGraph) -> list[frozenset[str]]:
    """The groups of modules that import each other (strongly connected components)."""
    return [frozenset(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]


def describe(graph: nx.DiGraph, circle: frozenset[str]) -> str:
    """One loop through the circle, module by module, and who else is in it."""
    loop = [a for a, _ in nx.find_cycle(graph.subgraph(circle))]
    text = " -> ".join([*loop, loop[0]])
    others = sorted(circle - set(loop))
    return text + (f" (with {', '.join(others)})" if others else "")


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    assert graph.has_edge("engine.mmu.mmu_pages", "engine.mmu.spte")  # `from .spte import`
    assert graph.has_edge("tui.explorer_cli", "tui.app")  # inside a function
    assert graph.has_edge("engine.lookup.base", "engine.lookup.views")  # type-only
    assert graph.has_edge("tui.commands", "engine.lookup.base")  # mmuscope.engine...
    assert graph.has_edge("engine.lookup.rbtree", "engine.lookup")  # `from . import bst`
    assert graph.has_edge("engine.lookup.rbtree", "engine.lookup.bst")
    assert not graph.has_edge("engine.lookup.rbtree", "engine.lookup.bst.TreeStrategy")


def test_no_module_imports_itself_through_others() -> None:
    graph = import_graph()
    found = circles(graph)
    assert found == [], "import circles:\n" + "\n".join(describe(graph, c) for c in found)


@pytest.mark.parametrize(
    ("files", "circle"),
    [
        (  # a package's __init__ imports a submodule that imports the package
            {"p/__init__.py": "from .a import f\n", "p/a.py": "from . import b\n", "p/b.py": ""},
            {"p", "p.a"},
        ),
        (  # inside a function, and only for type checking
            {
                "p/__init__.py": "",
                "p/a.py": "def f():\n    from .b import g\n",
                "p/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from mmuscope.p.a import f\n",
            },
            {"p.a", "p.b"},
        ),
        (  # three modules, absolute and relative
            {
                "p/__init__.py": "",
                "p/q/__init__.py": "",
                "p/q/a.py": "import p.q.b\n",
                "p/q/b.py": "from ..c import h\n",
                "p/c.py": "from .q.a import x\n",
            },
            {"p.q.a", "p.q.b", "p.c"},
        ),
    ],
)
def test_a_circle_is_found_and_named(
    tmp_path: Path, files: dict[str, str], circle: set[str]
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path, ("p",))
    assert circles(graph) == [frozenset(circle)]
    message = describe(graph, frozenset(circle))
    assert all(module in message for module in circle), message
