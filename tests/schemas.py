"""Validate a ``--json`` document against its shipped JSON Schema (crawler/schemas).

Every test that reads a command's JSON goes through checked, so a payload that drifts
from its published schema fails the test that produced it.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator

from crawler.schemas import SCHEMA_VERSION, load_schema


def checked(name: str, document: str | dict[str, Any]) -> dict[str, Any]:
    """``document`` (text or parsed) after validating it against ``quants NAME --json``'s schema."""
    doc: dict[str, Any] = json.loads(document) if isinstance(document, str) else document
    errors = sorted(_validator(name).iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(
        f"{name} --json at {'/'.join(map(str, e.path)) or '(root)'}: {e.message}"
        for e in errors[:10]
    )
    assert doc["schema_version"] == SCHEMA_VERSION
    return doc


@cache
def _validator(name: str) -> Draft202012Validator:
    """The validator of one shipped schema, itself checked against the metaschema once per
    process (that check cost ~0.2 s a document, most of the suite's JSON checking)."""
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)
