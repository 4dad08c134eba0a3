"""Figures of the reliability tests (docs/reliability.md), written as JSON at the end of the session
to ``$QUANTS_RELIABILITY_REPORT`` when it is set::

    QUANTS_RELIABILITY_FULL=1 QUANTS_RELIABILITY_REPORT=figures.json pytest tests/reliability
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def figures() -> Iterator[dict[str, Any]]:
    """A dict tests add their counts to (``figures.setdefault(...)``)."""
    data: dict[str, Any] = {}
    yield data
    path = os.environ.get("QUANTS_RELIABILITY_REPORT")
    if path:
        Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def count(figures: dict[str, Any], section: str, key: str, n: int = 1) -> None:
    """Add ``n`` to ``figures[section][key]``."""
    bucket = figures.setdefault(section, {})
    bucket[key] = bucket.get(key, 0) + n
