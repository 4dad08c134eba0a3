"""A new catalog made from the migrations' recorded statements (crawler.catalog.fresh_schema)
against one the migrations make, on SQLite and PostgreSQL: the same tables, columns, indexes,
constraints, triggers, views, functions and rows; the migrations wherever the replay cannot serve.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Connection, create_engine
from sqlalchemy.engine import make_url

from crawler.catalog import Catalog, fresh_schema
from crawler.catalog.reader import SCHEMA_HEAD
from tests.catalog.populate import populate
from tests.cli import clean_env, start_quants
from tests.pg import databases


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def new_url(request, tmp_path) -> Iterator[Callable[[], str]]:
    """A maker of URLs of new, empty databases of one dialect."""
    if request.param == "sqlite":
        made = itertools.count()
        yield lambda: f"sqlite:///{tmp_path / f'catalog{next(made)}.sqlite'}"
        return
    with databases("quants_fresh") as new:
        yield new


def _migrated(url: str) -> None:
    with Catalog.open(url, upgrade=False, check=False) as catalog:
        catalog.upgrade(replay=False)


def _no_migrations(monkeypatch) -> None:
    def refused(*_a: Any, **_k: Any) -> None:
        raise AssertionError("the migrations ran")

    monkeypatch.setattr(command, "upgrade", refused)


def test_the_recordings_are_of_the_head_revision():
    for dialect in ("sqlite", "postgresql"):
        found = fresh_schema.recording(dialect)
        assert found is not None and found["revision"] == SCHEMA_HEAD, (
            f"{dialect}: re-record with tools/record_schema.py"
        )
        assert len(found["statements"]) > 50


def test_a_new_catalog_is_the_schema_the_migrations_make(new_url, monkeypatch):
    migrated = new_url()
    _migrated(migrated)
    with monkeypatch.context() as m:
        _no_migrations(m)
        replayed = new_url()
        with Catalog.open(replayed) as catalog:
            assert catalog.current_revision() == SCHEMA_HEAD
    want = _schema(migrated)
    assert len(want["tables"]) >= 10 and any(want["rows"].values())
    assert _schema(replayed) == want
    # A catalog at the head opens without a migration, and takes a crawl's writes.
    populate(replayed)


def test_a_failed_replay_leaves_nothing_and_the_migrations_run(new_url, monkeypatch, caplog):
    """A statement the server refuses (one without an extension the recording's server had):
    the replay's transaction is rolled back and the migrations make the catalog."""
    migrated = new_url()
    _migrated(migrated)
    found = fresh_schema.recording(make_url(migrated).get_backend_name())
    assert found is not None
    # Most of the schema made, then a statement that fails: a table that exists.
    statements = found["statements"]
    broken = {**found, "statements": [*statements[:-5], statements[1], *statements[-5:]]}
    monkeypatch.setattr(fresh_schema, "recording", lambda _dialect: broken)
    url = new_url()
    with (
        caplog.at_level(logging.INFO, logger="crawler.catalog.database"),
        Catalog.open(url) as catalog,
    ):
        assert catalog.current_revision() == SCHEMA_HEAD
    assert "recorded schema not replayed" in caplog.text
    assert _schema(url) == _schema(migrated)


def test_the_migrations_run_where_the_replay_cannot_serve(new_url, monkeypatch):
    """A database that holds a table of its own, or a recording of another revision."""
    migrated = new_url()
    _migrated(migrated)
    ran: list[str] = []
    real = command.upgrade
    monkeypatch.setattr(command, "upgrade", lambda cfg, rev: (ran.append(rev), real(cfg, rev)))
    url = new_url()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE theirs (x INTEGER)")
    engine.dispose()
    with Catalog.open(url) as catalog:
        assert catalog.current_revision() == SCHEMA_HEAD
    assert ran == ["head"]
    ours = _schema(url)
    assert "theirs" in ours["tables"]
    found = fresh_schema.recording(make_url(url).get_backend_name())
    monkeypatch.setattr(fresh_schema, "recording", lambda _dialect: {**found, "revision": "0001"})
    url = new_url()
    with Catalog.open(url):
        pass
    assert ran == ["head", "head"]
    assert _schema(url) == _schema(migrated)


def test_three_processes_making_one_catalog_at_once(new_url, tmp_path):
    """`quants db upgrade` three times at once: each either makes the schema or finds it made
    (SQLite: waits for the first's transaction; PostgreSQL: its replay meets the first's tables
    and it migrates, which finds the head)."""
    url = new_url()
    env = clean_env(tmp_path)
    procs = [start_quants("db", "upgrade", "--db", url, env=env) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    assert [out for out, _err in outs] == [f"{url}: at revision {SCHEMA_HEAD}\n"] * 3
    assert _schema(url)["tables"]


def _schema(url: str) -> dict[str, Any]:
    """What a catalog's database holds: its schema objects' definitions and every table's rows."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            found = _sqlite(conn) if conn.dialect.name == "sqlite" else _postgresql(conn)
            found["rows"] = {
                t: sorted(map(repr, conn.exec_driver_sql(f'SELECT * FROM "{t}"').all()))
                for t in found["tables"]
            }
            return found
    finally:
        engine.dispose()


def _sqlite(conn: Connection) -> dict[str, Any]:
    rows = conn.exec_driver_sql(
        "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
    ).all()
    return {
        "objects": [tuple(r) for r in rows],
        "tables": [r[1] for r in rows if r[0] == "table" and not r[3].startswith("CREATE VIRTUAL")],
        "user_version": conn.exec_driver_sql("PRAGMA user_version").scalar(),
    }


def _postgresql(conn: Connection) -> dict[str, Any]:
    def q(sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in conn.exec_driver_sql(sql).all()]

    here = "current_schema()"
    own = "NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')"
    return {
        "relations": q(
            "SELECT c.relname, c.relkind, c.relpersistence FROM pg_class c JOIN pg_namespace n"
            f" ON n.oid = c.relnamespace WHERE n.nspname = {here} ORDER BY 1"
        ),
        "columns": q(
            "SELECT table_name, ordinal_position, column_name, data_type, udt_name, is_nullable,"
            " column_default, character_maximum_length, numeric_precision, is_identity"
            f" FROM information_schema.columns WHERE table_schema = {here} ORDER BY 1, 2"
        ),
        "indexes": q(
            f"SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = {here} ORDER BY 1"
        ),
        "constraints": q(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)"
            f" FROM pg_constraint WHERE connamespace = {here}::regnamespace ORDER BY 1, 2"
        ),
        "triggers": q(
            "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger"
            " WHERE NOT tgisinternal ORDER BY 1, 2"
        ),
        "functions": q(
            "SELECT p.proname, pg_get_function_identity_arguments(p.oid), p.prosrc FROM pg_proc p"
            f" JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = {here}"
            f" AND {own} ORDER BY 1, 2"
        ),
        "views": q(f"SELECT viewname, definition FROM pg_views WHERE schemaname = {here}"),
        "sequences": q(
            "SELECT sequencename, start_value, increment_by, last_value FROM pg_sequences"
            f" WHERE schemaname = {here} ORDER BY 1"
        ),
        "extensions": q("SELECT extname, extversion FROM pg_extension ORDER BY 1"),
        "tables": [
            r[0] for r in q(f"SELECT tablename FROM pg_tables WHERE schemaname = {here} ORDER BY 1")
        ],
    }
