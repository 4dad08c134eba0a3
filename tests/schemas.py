"""Validate a ``--json`` document against its shipped JSON Schema (crawler/schemas).

Every test that reads a command's JSON goes through checked, so a payload that drifts
from its published schema fails the test that produced it.
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator

from crawler.schemas import SCHEMA_VERSION, load_schema


def checked(name: str, document: str | dict[str, Any]) -> dict[str, Any]:
    """``document`` (text or parsed) after validating it against ``quants NAME --json``'s schema."""
    doc: dict[str, Any] = json.loads(document) if isinstance(document, str) else document
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    errors = sorted(Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(
        f"{name} --json at {'/'.join(map(str, e.path)) or '(root)'}: {e.message}"
        for e in errors[:10]
    )
    assert doc["schema_version"] == SCHEMA_VERSION
    return doc
