"""The TUI uses Textual's and Rich's public API only: a minor release of either may change
anything whose name starts with an underscore.  The tests read the running app through
tests/tui_pilot.py, and reach Textual's or Rich's private API nowhere else: there only
what PRIVATE_READS lists, where no public route serves.  Read from the source (its
syntax tree):

- no import from a private module (`textual._…`, `rich._…`, `textual.widgets._header`)
  and no private name imported from a public one, but for the few public classes Textual
  exports from a private module and nowhere else (ALLOWED_PRIVATE_MODULES);
- no `x._name` where `_name` is not one of the project's own (an underscore name that
  engine/ or tui/ defines: a function, a class, a module or class variable, an attribute
  set on `self`): `screen._compositor`, `app._start_widget`, `strip._filter_cache`; an
  own name that a Textual or Rich class defines as well (`_lines`, `_layout`) passes on
  `self` and `cls` only (the class rule below decides whose it is there), and
  `getattr(x, "_name")`, `setattr`, `hasattr`, `delattr` count as `x._name`;
- no `importlib.import_module("textual._…")` or `__import__("rich._…")` either;
- no class of tui/ that subclasses a Textual or Rich class touches, sets or overrides,
  on `self` or through `super()`, an underscore name that one of those library classes
  defines: a widget's `self._border_title = …` or `_styles_cache`, a screen's
  `def _on_mount`.  (A name of the project's own that a library class happens to use
  as well would be the library's attribute all the same.)

Dunder names (`__init__`, `__rich__`) are public protocol, and so are a named tuple's
`_replace`, `_asdict`, `_fields`, `_make` and `_field_defaults` (collections.namedtuple's
API, underscored to keep out of the way of field names; Rich's Segment is one).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import textwrap
from collections.abc import Iterator
from contextlib import suppress
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = ("textual", "rich")

# Public classes that Textual defines in a private module and exports from no public one:
# (module, name).  Each is documented as a part of the widget it belongs to.
ALLOWED_PRIVATE_MODULES = {
    # Header's parts, which a header of two rows (widgets/header.py) composes itself;
    # Textual's docs and CSS name them (`Header HeaderTitle`), textual.widgets exports
    # Header alone.
    ("textual.widgets._header", "HeaderIcon"),
    ("textual.widgets._header", "HeaderTitle"),
}


#: collections.namedtuple's documented methods and attributes
NAMEDTUPLE = frozenset({"_asdict", "_field_defaults", "_fields", "_make", "_replace"})


def is_private(name: str) -> bool:
    if name in NAMEDTUPLE:
        return False
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def sources(*packages: str) -> list[Path]:
    return sorted(p for package in packages for p in (ROOT / package).rglob("*.py"))


@cache
def tree_of(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def defined_names(tree: ast.AST) -> set[str]:
    """The underscore names the classes in a piece of source define: methods, nested
    classes, class variables (annotated or not) and attributes set on `self` or `cls`."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(item.name)
                elif isinstance(item, ast.Assign | ast.AnnAssign):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
    return {name for name in names if is_private(name)}


@cache
def project_names() -> frozenset[str]:
    names: set[str] = set()
    for path in sources("engine", "tui"):
        names |= defined_names(tree_of(path))
    return frozenset(names)


def library(module: str) -> bool:
    return module.split(".")[0] in LIBRARIES


@cache
def library_defined() -> frozenset[str]:
    """The underscore names Textual's and Rich's classes define (read from their source,
    nothing imported)."""
    names: set[str] = set()
    for name in LIBRARIES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        for path in sorted(Path(spec.origin).parent.rglob("*.py")):
            names |= defined_names(ast.parse(path.read_text(encoding="utf-8")))
    return frozenset(names)


def called(node: ast.Call) -> str:
    """The name of what a call calls: `f(...)` and `m.f(...)` are both `f`."""
    func = node.func
    return (
        func.id
        if isinstance(func, ast.Name)
        else func.attr
        if isinstance(func, ast.Attribute)
        else ""
    )


def literal(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def private_imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and called(node) in ("import_module", "__import__"):
            module = literal(node.args[0]) if node.args else None
            if module and library(module) and any(map(is_private, module.split("."))):
                yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if library(alias.name) and any(map(is_private, alias.name.split("."))):
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if not library(node.module):
                continue
            private_module = any(map(is_private, node.module.split(".")))
            for alias in node.names:
                if (node.module, alias.name) in ALLOWED_PRIVATE_MODULES:
                    continue
                if private_module or is_private(alias.name):
                    yield node.lineno, f"from {node.module} import {alias.name}"


def imported_from_elsewhere(tree: ast.Module) -> set[str]:
    """The names a module imports from anything but Textual and Rich: modules and
    classes of the standard library, the project's own modules."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(
                alias.asname or alias.name.split(".")[0]
                for alias in node.names
                if not library(alias.name)
            )
        elif isinstance(node, ast.ImportFrom) and (node.level or not library(node.module or "")):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


GETATTR = ("getattr", "setattr", "hasattr", "delattr")


def attributes(tree: ast.Module) -> Iterator[tuple[ast.AST, ast.expr, str]]:
    """(node, x, name) for each `x._name`, and each `getattr(x, "_name", …)` (or
    setattr, hasattr, delattr) with the name written out."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            yield node, node.value, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in GETATTR
            and len(node.args) >= 2
        ):
            name = literal(node.args[1])
            if name is not None and is_private(name):
                yield node, node.args[0], name


def foreign_attributes(
    tree: ast.Module, own: frozenset[str] | None = None
) -> Iterator[tuple[int, str]]:
    """`x._name` where `_name` is none of the project's classes', or is one that a
    Textual or Rich class defines too and `x` is not `self` or `cls`.  On a name
    imported from elsewhere than Textual and Rich (`argparse._SubParsersAction`,
    typeshed's name for what add_subparsers() returns) it is not Textual's or Rich's
    either."""
    own = project_names() if own is None else own
    elsewhere = imported_from_elsewhere(tree)
    for node, value, name in attributes(tree):
        on_self = isinstance(value, ast.Name) and value.id in ("self", "cls")
        if name in own and (on_self or name not in library_defined()):
            continue
        if isinstance(value, ast.Name) and value.id in elsewhere:
            continue
        yield getattr(node, "lineno", 0), ast.unparse(node)


def test_the_scan_finds_what_it_looks_for() -> None:
    """Each rule on a sample of what the private layer did."""
    sample = ast.parse(
        "import textual._border\n"
        "from textual._segment_tools import line_crop\n"
        "from textual.strip import _filter\n"
        "from textual.widgets._header import HeaderTitle\n"
        "import argparse\n"
        "import importlib\n"
        "def f(strip, app, sub: argparse._SubParsersAction) -> None:\n"
        "    strip._filter_cache.clear()\n"
        "    app._start_widget(app, None)\n"
        "    getattr(app, '_notifications').clear()\n"
        "    setattr(app.screen, '_border_title', 'x')\n"
        "    importlib.import_module('textual._compositor')\n"
        "    __import__('rich._loop')\n"
        "    app.screen._layout\n"  # the project has a `_layout` too: not on `self`
        "    getattr(app, 'title')\n"
        "    strip[0]._replace(text='x')\n"  # a Segment, a named tuple: its public API
    )
    assert [text for _, text in sorted(private_imports(sample))] == [
        "import textual._border",
        "from textual._segment_tools import line_crop",
        "from textual.strip import _filter",
        "importlib.import_module('textual._compositor')",
        "__import__('rich._loop')",
    ]
    assert [text for _, text in sorted(foreign_attributes(sample))] == [
        "strip._filter_cache",
        "app._start_widget",
        "getattr(app, '_notifications')",
        "setattr(app.screen, '_border_title', 'x')",
        "app.screen._layout",
    ]


@pytest.mark.parametrize("path", sources("tui"), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_import_or_attribute(path: Path) -> None:
    tree = tree_of(path)
    found = [
        f"line {line}: {text}"
        for line, text in sorted([*private_imports(tree), *foreign_attributes(tree)])
    ]
    assert not found, "Textual's or Rich's private API:\n" + "\n".join(found)


# -- classes that subclass Textual's or Rich's -----------------------------------------


def tui_modules() -> Iterator[str]:
    for path in sources("tui"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__main__":
            continue  # runs the app
        yield ".".join(["mmuscope", *(parts[:-1] if parts[-1] == "__init__" else parts)])


@cache
def library_names(cls: type) -> frozenset[str]:
    """The underscore names a library class defines (on the class or on `self`)."""
    names = {name for name in vars(cls) if is_private(name)}
    with suppress(OSError, TypeError):  # no source (a C type): its class variables only
        names |= defined_names(ast.parse(textwrap.dedent(inspect.getsource(cls))))
    return frozenset(names)


def class_tree(cls: type) -> ast.ClassDef:
    path = Path(inspect.getsourcefile(cls) or "")
    _, line = inspect.getsourcelines(cls)
    for node in ast.walk(tree_of(path)):
        if (
            isinstance(node, ast.ClassDef)
            and node.name == cls.__name__
            and min([node.lineno, *(d.lineno for d in node.decorator_list)]) == line
        ):
            return node
    raise LookupError(cls)


def names_on_self(node: ast.ClassDef) -> Iterator[tuple[int, str]]:
    """The underscore names a class body defines, or uses on `self`, `cls` or `super()`."""
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if is_private(item.name):
                yield item.lineno, item.name
        elif isinstance(item, ast.Assign | ast.AnnAssign):
            targets = item.targets if isinstance(item, ast.Assign) else [item.target]
            for target in targets:
                if isinstance(target, ast.Name) and is_private(target.id):
                    yield item.lineno, target.id
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Attribute) or not is_private(sub.attr):
            continue
        value = sub.value
        if (isinstance(value, ast.Name) and value.id in ("self", "cls")) or (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "super"
        ):
            yield sub.lineno, sub.attr


def subclasses_of_libraries() -> Iterator[type]:
    for name in tui_modules():
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if (
                inspect.isclass(cls)
                and cls.__module__ == name
                and any(library(base.__module__) for base in cls.__mro__[1:])
            ):
                yield cls


def test_the_class_scan_finds_what_it_looks_for() -> None:
    """A widget that set its title, cleared its styles cache and chained a private
    handler the way the private layer did."""
    from textual.widget import Widget

    (sample,) = ast.parse(
        "class Panel(Widget):\n"
        "    _lines = None\n"
        "    def _on_mount(self, event) -> None:\n"
        "        super()._on_mount(event)\n"
        "    def show(self, title) -> None:\n"
        "        self._border_title = title\n"
        "        self._styles_cache.clear()\n"
        "        self._shown = title\n"
    ).body
    assert isinstance(sample, ast.ClassDef)
    names = {name for _, name in names_on_self(sample)}
    assert names == {"_lines", "_on_mount", "_border_title", "_styles_cache", "_shown"}
    assert names & library_names(Widget) == {"_on_mount", "_border_title", "_styles_cache"}


def test_no_subclass_touches_a_library_private() -> None:
    found = []
    classes = list(subclasses_of_libraries())
    assert len(classes) > 50  # the screens and the widgets
    for cls in classes:
        theirs: set[str] = set()
        for base in cls.__mro__:
            if library(base.__module__):
                theirs |= library_names(base)
        for own in cls.__mro__:
            if not own.__module__.startswith("mmuscope.tui"):
                continue
            for line, name in names_on_self(class_tree(own)):
                if name in theirs:
                    found.append(f"{own.__module__}.{own.__qualname__} line {line}: {name}")
    assert not found, "Textual's or Rich's private names:\n" + "\n".join(sorted(set(found)))


# -- the tests --------------------------------------------------------------------------

#: the one module of the tests that may read Textual's or Rich's private API
HELPER = ROOT / "tests" / "tui_pilot.py"
#: what it reads of it (the expression as written: `app.screen._compositor`), each with
#: the Textual version it was checked on and why no public API serves.  None: checked on
#: Textual 8.2.8 and Rich 15.0.0, the screen text (App.export_screenshot), the layout
#: (Screen.find_widget), a widget's drawing (Widget.render_lines) and the notifications
#: (the toasts a run_test(notifications=True) draws) all have a public route.
PRIVATE_READS: dict[str, str] = {}


def sources_of_tests() -> list[Path]:
    return sorted((ROOT / "tests").glob("*.py"))


@cache
def own_names_in_tests() -> frozenset[str]:
    """The underscore names of the project's own: engine/, tui/ and the tests' classes."""
    names = set(project_names())
    for path in sources_of_tests():
        names |= defined_names(tree_of(path))
    return frozenset(names)


def privates_in_test(path: Path) -> list[str]:
    tree = tree_of(path)
    found = sorted([*private_imports(tree), *foreign_attributes(tree, own_names_in_tests())])
    return [f"line {line}: {text}" for line, text in found]


def test_a_test_reaching_a_private_is_found(tmp_path: Path) -> None:
    """What the tests did before tests/tui_pilot.py read for them."""
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "from textual.widgets._toast import Toast\n"
        "def toasts(app, pilot) -> list[str]:\n"
        "    pilot.app.screen._compositor.render_strips()\n"
        "    return [n.message for n in app._notifications]\n"
    )
    assert privates_in_test(sample) == [
        "line 1: from textual.widgets._toast import Toast",
        "line 3: pilot.app.screen._compositor",
        "line 4: app._notifications",
    ]


@pytest.mark.parametrize(
    "path", [p for p in sources_of_tests() if p != HELPER], ids=lambda p: p.name
)
def test_no_test_reaches_a_private_but_through_the_helper(path: Path) -> None:
    found = privates_in_test(path)
    assert not found, (
        f"Textual's or Rich's private API (read it in {HELPER.name}, if no public "
        "route serves):\n" + "\n".join(found)
    )


def test_the_helper_reads_only_the_privates_it_lists() -> None:
    found = {text.split(": ", 1)[1] for text in privates_in_test(HELPER)}
    assert found == set(PRIVATE_READS), (
        "list each in PRIVATE_READS with the Textual version and why no public API "
        f"serves; listed but not read: drop it.\nread: {sorted(found)}"
    )
