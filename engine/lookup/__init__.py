"""Memslot lookup strategies, by name (CONTRACT: `LOOKUP_STRATEGIES`)."""

from __future__ import annotations

from .base import ArrayView, CacheProbe, LookupStrategy, LookupTrace, Probe, Shape, TreeView
from .binary import BinarySearchArray
from .linear import LinearArray
from .rbtree import RbTree
from .size_sorted import SizeSortedArray
from .wbtree import WbTree
from .wbtree_compact import WbTreeCompact

STRATEGY_CLASSES: dict[str, type[LookupStrategy]] = {
    cls.name: cls
    for cls in (LinearArray, SizeSortedArray, BinarySearchArray, WbTree, RbTree, WbTreeCompact)
}
LOOKUP_STRATEGIES: tuple[str, ...] = tuple(STRATEGY_CLASSES)


def make_strategy(name: str) -> LookupStrategy:
    """A new, empty structure of the named strategy; unknown names raise ValueError."""
    try:
        return STRATEGY_CLASSES[name]()
    except KeyError:
        raise ValueError(
            f"unknown lookup strategy {name!r}: choose one of {', '.join(LOOKUP_STRATEGIES)}"
        ) from None


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
