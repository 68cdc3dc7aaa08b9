"""The README against the program: what it says a key or an option does exists, and
what users asked it to explain is explained."""

from __future__ import annotations

import re
from pathlib import Path

from tui.screens.shadow_mmu import PAGING_MODES

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(title)
    end = README.find("\n#", start + len(title))
    return README[start : end if end > 0 else None]


def test_the_f2_section_lists_every_mmu_p_cycles() -> None:
    text = section("### The shadow-MMU screen (F2)")
    block = text[text.index("`p` ") :].split("\n\n")[0]
    bullets = re.findall(r"^- \*\*(.+?)\*\*", block, re.MULTILINE)
    assert len(bullets) == len(PAGING_MODES), bullets
    for bold, (label, _, _) in zip(bullets, PAGING_MODES, strict=True):
        assert label.startswith(bold), (bold, label)
