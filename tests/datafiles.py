"""Where tests find their inputs: the repo's own fixtures, and shared/realdata beside the
checkout (or $MMUSCOPE_REALDATA); realdata tests skip when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
REALDATA = Path(
    os.environ.get("MMUSCOPE_REALDATA", Path(__file__).resolve().parents[2] / "shared" / "realdata")
)


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


def realdata_path(name: str) -> Path:
    path = REALDATA / name
    if not path.is_file():
        pytest.skip(f"{path} is not available")
    return path
