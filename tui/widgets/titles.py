"""Border titles that fit: a panel's title is given as versions from the fullest to the
shortest, and the panel shows the first that fits its border whole (Textual would cut a
long one with an ellipsis)."""

from __future__ import annotations

from collections.abc import Sequence

BORDER_EXTRA = 6  # "╭─ " and " ─╮" around the title


def fit_title(versions: Sequence[str], width: int) -> str:
    """The first of `versions` that fits a border `width` columns wide (the last when
    none does: at 80 columns a title may be cut; the first before the panel has a size)."""
    if width <= 0:
        return versions[0] if versions else ""
    for version in versions:
        if len(version) + BORDER_EXTRA <= width:
            return version
    return versions[-1] if versions else ""
