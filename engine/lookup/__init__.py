"""Memslot lookup strategies, by name (`LOOKUP_STRATEGIES`, docs/architecture.md §6.2).

A strategy's module is imported when it is first made or named (`make_strategy`,
`STRATEGY_CLASSES`), so a VM on the default rbtree (`mmuscope simulate`) loads no other
(a faster start-up); the other names are exported lazily (PEP 562 `__getattr__`).
tests/test_engine_exports.py checks `_CLASSES` and `LOOKUP_STRATEGIES` against the classes'
own `name`s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import CacheProbe, LookupStrategy, LookupTrace, Probe
    from .views import ArrayView, Shape, TreeView

    STRATEGY_CLASSES: dict[str, type[LookupStrategy]]

# strategy name -> (module under engine.lookup, class), in the order the UI cycles them
_CLASSES: dict[str, tuple[str, str]] = {
    "linear": ("linear", "LinearArray"),
    "size-sorted": ("size_sorted", "SizeSortedArray"),
    "binary": ("binary", "BinarySearchArray"),
    "wbtree": ("wbtree", "WbTree"),
    "rbtree": ("rbtree", "RbTree"),
    "wbtree-compact": ("wbtree_compact", "WbTreeCompact"),
}
LOOKUP_STRATEGIES: tuple[str, ...] = tuple(_CLASSES)
_BASE_NAMES = frozenset({"CacheProbe", "LookupStrategy", "LookupTrace", "Probe"})
_VIEW_NAMES = frozenset({"ArrayView", "Shape", "TreeView"})


def strategy_class(name: str) -> type[LookupStrategy]:
    """The class of the named strategy; unknown names raise KeyError."""
    from importlib import import_module

    module, cls = _CLASSES[name]
    strategy: type[LookupStrategy] = getattr(import_module(f"{__name__}.{module}"), cls)
    return strategy


def make_strategy(name: str) -> LookupStrategy:
    """A new, empty structure of the named strategy; unknown names raise ValueError."""
    try:
        cls = strategy_class(name)
    except KeyError:
        raise ValueError(
            f"unknown lookup strategy {name!r}: choose one of {', '.join(LOOKUP_STRATEGIES)}"
        ) from None
    return cls()


def __getattr__(name: str) -> object:
    """`STRATEGY_CLASSES` (every strategy's module imported then), base.py's and
    views.py's names."""
    value: object
    if name == "STRATEGY_CLASSES":
        value = {strategy: strategy_class(strategy) for strategy in LOOKUP_STRATEGIES}
    elif name in _BASE_NAMES:
        from . import base

        value = getattr(base, name)
    elif name in _VIEW_NAMES:
        from . import views

        value = getattr(views, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = [
    "LOOKUP_STRATEGIES",
    "STRATEGY_CLASSES",
    "ArrayView",
    "CacheProbe",
    "LookupStrategy",
    "LookupTrace",
    "Probe",
    "Shape",
    "TreeView",
    "make_strategy",
]
