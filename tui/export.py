"""Export from the app: the view's dot text, and a PDF through Graphviz when it exists.

The dot file is always written (it needs nothing); the PDF needs `dot`.  Without it, or
for graphs too big for dot to lay out in reasonable time, the message says so and the
dot file is still there.  Files are written to a temporary name and renamed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mmuscope.engine.export.render import (
    INSTALL_HINT,
    ExportError,
    check_dot_size,
    dot_binary,
    write_export,
)

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel


def export_view(text: str, nodes: int, stem: Path) -> tuple[str, SeverityLevel]:
    """Write `stem`.dot and `stem`.pdf; return (message, severity) for a notification."""
    dot_path = stem.with_suffix(".dot")
    try:
        write_export(text, dot_path)
    except ExportError as err:
        return f"export failed: {err}", "error"
    if dot_binary() is None:
        return f"wrote {dot_path}\nno PDF: {INSTALL_HINT}", "warning"
    pdf_path = stem.with_suffix(".pdf")
    try:
        check_dot_size(nodes, "the view", hint="the .dot file has it all")
        write_export(text, pdf_path)
    except ExportError as err:
        return f"wrote {dot_path}\nno PDF: {err}", "warning"
    return f"wrote {dot_path}\nwrote {pdf_path}", "information"
