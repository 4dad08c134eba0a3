"""A new, empty catalog made at the head schema in one step: the statements the migrations run on
an empty database, recorded per dialect (recorded/<dialect>.json) and replayed as they were sent.
Details: docs/internals/catalog.md#fresh_schema
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

__all__ = ["RECORDED", "is_empty", "record", "recording", "replay"]

#: The recordings (tools/record_schema.py writes them; a test holds them to the migrations).
RECORDED = Path(__file__).with_name("recorded")

#: The statements that change a database; the migrations' reads (the schema they inspect, the
#: server's extensions and version) and their transaction control are left out.
_CHANGES = ("CREATE", "ALTER", "DROP", "INSERT", "UPDATE", "DELETE", "WITH")


def record(migrate: Callable[[Callable[[str, Any], None]], None]) -> list[list[Any]]:
    """The [statement, parameters] the migrations send to an empty database that change it, in
    order; ``migrate(tracer)`` runs them with ``tracer`` called for every statement."""
    sent: list[list[Any]] = []

    def trace(statement: str, params: Any) -> None:
        words = statement.lstrip().split(None, 1)
        if words and words[0].upper() in _CHANGES:
            sent.append([statement, params if params is None else _plain(params)])

    migrate(trace)
    return sent


def _plain(params: Any) -> Any:
    """Parameters as JSON holds them (the drivers take a list for a tuple)."""
    return dict(params) if isinstance(params, dict) else list(params)


def recording(dialect: str) -> dict[str, Any] | None:
    """{"revision", "statements"} recorded for ``dialect``; None where there is none."""
    try:
        found = json.loads((RECORDED / f"{dialect}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def is_empty(conn: Connection) -> bool:
    """Whether the database holds nothing of its own: no table, index, view or trigger (SQLite),
    no relation in the current schema (PostgreSQL)."""
    if conn.dialect.name == "sqlite":
        sql = "SELECT COUNT(*) FROM sqlite_master"
    else:
        sql = (
            "SELECT COUNT(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema()"
        )
    return conn.exec_driver_sql(sql).scalar() == 0


def replay(conn: Connection, head: str) -> bool:
    """Make the ``head`` schema through ``conn``, in its transaction, where the database is empty
    and a recording of ``head`` exists for its dialect; False otherwise (nothing done).

    A statement that fails (a server without an extension the recording's server had) raises the
    driver's error: the caller rolls the transaction back and migrates instead."""
    found = recording(conn.dialect.name)
    if found is None or found.get("revision") != head or not is_empty(conn):
        return False
    cursor = conn.connection.cursor()
    try:
        for statement, params in found["statements"]:
            # As the migrations sent them: a driver reads "%" in a statement sent with
            # parameters (even none) as a placeholder's start.
            if params is None:
                cursor.execute(statement)
            else:
                cursor.execute(statement, params if isinstance(params, dict) else tuple(params))
    finally:
        cursor.close()
    return True
