"""JSON Schemas (draft 2020-12) of every --json output, shipped as package data.

May import: base.
Details: docs/internals/base.md#schemas
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

__all__ = ["SCHEMA_NAMES", "SCHEMA_VERSION", "load_schema", "versioned"]

#: The version written into every ``--json`` payload.
SCHEMA_VERSION = 1

#: The outputs that have a schema: the command, as typed after ``quants``.
SCHEMA_NAMES = (
    "search",
    "estimate",
    "inspect",
    "compare",
    "check-log",
    "crawl",
    "changes",
    "reprofile",
)


def versioned(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with ``schema_version`` as its first key."""
    return {"schema_version": SCHEMA_VERSION, **payload}


@cache
def load_schema(name: str, version: int = SCHEMA_VERSION) -> dict[str, Any]:
    """The schema of ``quants NAME --json`` (a KeyError names what exists)."""
    if name not in SCHEMA_NAMES:
        raise KeyError(f"no schema {name!r}; known: {', '.join(SCHEMA_NAMES)}")
    from importlib import resources  # here: ~5 ms of every CLI start otherwise

    text = resources.files(__package__).joinpath(f"{name}.v{version}.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
