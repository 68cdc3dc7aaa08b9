"""Guest memory layouts: presets, and imports of real QEMU layouts and memslot traces."""

from __future__ import annotations

from .layout import Layout, RegionSpec, build_vm, layout_from_ram_regions
from .presets import DEFAULT_LAYOUT, PRESETS, preset

__all__ = [
    "DEFAULT_LAYOUT",
    "PRESETS",
    "Layout",
    "RegionSpec",
    "build_vm",
    "layout_from_ram_regions",
    "preset",
]
