"""Where a start-up's instructions go, counted by callgrind: run by
`startup_speed.py --instructions` (not on its own) as `python startup_parts.py OUT APP MARKER...`
under `valgrind --tool=callgrind --dump-before=getppid`, APP the source of the bare
Textual app of startup_speed.py or `-` for the `mmuscope` command's `main()` (the
explorer), the markers startup_speed.py looks for on the screen.

The app runs headless at 120x40 until its first full frame: every update the screen
sends is rendered to the text a terminal would get (the work `App._display` does on a
terminal and skips headless, counted as `output`) and the run ends once that text has
shown every marker of startup_speed.py.  Meanwhile each part of the work is cut off from
the next by an `os.getppid()` call, at which callgrind writes the count so far: this
script wraps Textual's and the interpreter's steps (stylesheet parsing and applying,
layout, the compositor's drawing, each module's import, each dataclass made, each
collection of the garbage collector) and writes OUT, the label of each part in order
(the phase, `start`, `load`, `init` or `run`, and the innermost step running).  The
wrapping reaches into Textual's private methods; it is a measuring tool, not the app.
"""

from __future__ import annotations

import os
import sys

LABELS: list[str] = []  # the label of each part, in the order callgrind dumps them
STACK: list[str] = ["python"]  # the steps running, innermost last
PHASE = ["start"]


def cut() -> None:
    """End the part running (callgrind dumps its count before getppid)."""
    LABELS.append(f"{PHASE[0]}:{STACK[-1]}")
    os.getppid()


def enter(step: str) -> None:
    cut()
    STACK.append(step)


def leave() -> None:
    cut()
    STACK.pop()


def phase(name: str) -> None:
    cut()
    PHASE[0] = name


def wrap(owner: object, name: str, step: str, detail: object = None) -> None:
    """`owner.name(...)` counted as `step` (its inner steps as themselves), the label
    followed by `|` and what `detail(*args)` says of the call, if given."""
    original = getattr(owner, name)

    def wrapped(*args: object, **kwargs: object) -> object:
        enter(f"{step}|{detail(*args, **kwargs)}" if detail else step)  # type: ignore[operator]
        try:
            return original(*args, **kwargs)
        finally:
            leave()

    setattr(owner, name, wrapped)


class ImportSteps:
    """A meta path finder that counts each module's execution as `import:<package>`."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> object:
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path, target)  # type: ignore[arg-type]
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        top = name.split(".")[0]
        step = f"import:{top if top in ('mmuscope', 'textual', 'rich') else 'other'}"
        if name.startswith("mmuscope.tui.screens") or name.startswith("mmuscope.tui.widgets"):
            step = "import:mmuscope.tui.screens+widgets"
        elif name.startswith("mmuscope.engine"):
            step = "import:mmuscope.engine"
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: object) -> None:
            enter(f"{step}|{name}")
            try:
                original(module)  # type: ignore[arg-type]
            finally:
                leave()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def count_gc() -> None:
    import gc

    def callback(stage: str, info: dict[str, int]) -> None:
        if stage == "start":
            enter(f"gc{info['generation']}")
        else:
            leave()

    gc.callbacks.append(callback)


def textual_steps(markers: tuple[str, ...]) -> None:
    """Wrap Textual's steps; end the run at the first full frame."""
    import re

    from textual.app import App
    from textual.css.stylesheet import Stylesheet
    from textual.screen import Screen

    wrap(Stylesheet, "_parse_rules", "css-parse", lambda _, css, *a, **k: k.get("read_from", a[:1]))
    from textual.widget import Widget

    def node_name(_: object, node: Widget, *args: object, **kwargs: object) -> str:
        parent = node.parent if type(node).__name__ == "DOMNode" else None  # a component
        return f"{type(parent).__name__} component" if parent else type(node).__name__

    wrap(Stylesheet, "apply", "css-apply", node_name)
    wrap(Stylesheet, "_process_component_classes", "css-apply")
    wrap(Screen, "_refresh_layout", "layout")
    wrap(Screen, "_compositor_refresh", "draw")
    wrap(Widget, "render_lines", "draw", lambda widget, *a: type(widget).__name__)
    escapes = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
    seen: set[str] = set()
    original_run = App.run

    def run(app: App[object], *args: object, **kwargs: object) -> object:
        kwargs.update(headless=True, size=(120, 40))
        phase("run")

        def display(screen: Screen[object], renderable: object) -> None:
            if renderable is None:
                return
            enter("output")
            text = escapes.sub("", renderable.render_segments(app.console))  # type: ignore[attr-defined]
            seen.update(marker for marker in markers if marker in text)
            leave()
            if len(seen) == len(markers):
                phase("after")
                app.exit()

        app._display = display  # type: ignore[method-assign]
        return original_run(app, *args, **kwargs)

    App.run = run  # type: ignore[method-assign]
    original_init = App.__init__

    def init(app: App[object], *args: object, **kwargs: object) -> None:
        phase("init")
        original_init(app, *args, **kwargs)

    App.__init__ = init  # type: ignore[method-assign]


def main() -> None:
    out, source, markers = sys.argv[1], sys.argv[2], tuple(sys.argv[3:])
    phase("load")
    import dataclasses

    wrap(dataclasses, "_process_class", "dataclass", lambda cls, *a: cls.__module__)
    sys.meta_path.insert(0, ImportSteps)  # type: ignore[arg-type]
    count_gc()
    textual_steps(markers)
    if source != "-":
        exec(source, {"__name__": "__main__"})
    else:
        sys.stdin.isatty = sys.stdout.isatty = lambda: True  # type: ignore[method-assign]
        from mmuscope.tui.cli import main as mmuscope

        mmuscope([])
    cut()
    with open(out, "w") as labels:
        labels.write("\n".join(LABELS) + "\n")


if __name__ == "__main__":
    main()
