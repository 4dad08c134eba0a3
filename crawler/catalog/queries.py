"""The analyst SQL shipped in queries/: listing, header parsing, and resolving a CLI argument.

Each file declares its purpose and parameters in leading comments; the files ship in the wheel.
Details: docs/internals/catalog.md#queries
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from crawler.base.errors import QueryError, UsageError
from crawler.catalog.database import _coerce, resource_dir

_PARAM = re.compile(r"^--\s*param:\s*(\w+)\s*(?:=\s*(\S+))?\s*(?:\((.*)\))?\s*$")
_MAX_SQL_FILE_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class NamedQuery:
    """A query file: its name (file stem), purpose, parameters with defaults, and SQL text."""

    name: str
    purpose: str
    params: dict[str, object | None]
    param_help: dict[str, str]
    sql: str


def parse_query(name: str, sql: str) -> NamedQuery:
    """Read the header comments of ``sql``."""
    purpose = ""
    params: dict[str, object | None] = {}
    helps: dict[str, str] = {}
    lines = sql.splitlines()
    body_start = len(lines)
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped.startswith("--"):
            if stripped:
                body_start = i
                break
            continue
        if stripped.lower().startswith("-- purpose:"):
            purpose = stripped.split(":", 1)[1].strip()
        elif m := _PARAM.match(stripped):
            params[m[1]] = _coerce(m[2]) if m[2] is not None else None
            helps[m[1]] = (m[3] or "").strip()
    # The header is not sent: SQLAlchemy's text() would take ":name" in a comment for a parameter.
    body = "\n".join(lines[body_start:])
    return NamedQuery(name, purpose, params, helps, body)


def list_queries() -> list[NamedQuery]:
    """Every shipped query, sorted by name."""
    folder = resource_dir("queries")
    return [parse_query(p.stem, p.read_text("utf-8")) for p in sorted(folder.glob("*.sql"))]


def resolve_query(arg: str) -> NamedQuery:
    """``arg`` is a shipped query name, a path to a .sql file, or SQL text (tried in that order)."""
    stem = arg[:-4] if arg.endswith(".sql") else arg
    if re.fullmatch(r"[\w-]+", stem):
        for query in list_queries():
            if query.name == stem:
                return query
    path = Path(arg)
    if arg.endswith(".sql") or (len(arg) < 4096 and "\n" not in arg and _is_file(path)):
        if not _is_file(path):
            raise UsageError(f"no shipped query or file named {arg!r} (see `quants sql --list`)")
        if path.stat().st_size > _MAX_SQL_FILE_BYTES:
            raise UsageError(f"{arg} is larger than {_MAX_SQL_FILE_BYTES} bytes")
        return parse_query(path.stem, path.read_text("utf-8"))
    if not arg.strip():
        raise UsageError("empty query")
    return parse_query("<sql>", arg)


def _is_file(path: Path) -> bool:
    # One-line SQL longer than NAME_MAX (255) makes stat() fail with ENAMETOOLONG, which
    # Path.is_file() re-raises (found by test_concurrency): such text is SQL, not a file.
    try:
        return path.is_file()
    except OSError:
        return False


def bind_params(query: NamedQuery, given: dict[str, object]) -> dict[str, object]:
    """Defaults overlaid with ``given``; a declared parameter without value is an error."""
    values: dict[str, object] = {k: v for k, v in query.params.items() if v is not None}
    values.update(given)
    missing = [k for k in query.params if k not in values]
    if missing:
        raise QueryError(f"query {query.name} needs --param {missing[0]}=VALUE")
    return values
