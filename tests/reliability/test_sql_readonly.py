"""``quants sql`` cannot write: write attempts on SQLite and on the real PostgreSQL server.

Each attempt must be refused (ReadOnlyViolation / QueryError; exit 1 with one line from the CLI)
and leave the catalog identical (every table's rows, and on SQLite the file's bytes). The list
holds the attacks that once worked on PostgreSQL (several statements in one call ending the
read-only transaction) and every other way found to end, widen or escape it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from crawler.base.errors import QueryError, ReadOnlyViolation
from crawler.catalog import Catalog
from tests.catalog.populate import populate
from tests.cli import Cli
from tests.pg import BOTH_DATABASES, built_catalog

ATTACKS = [
    # ending the read-only transaction inside one call
    "COMMIT; BEGIN READ WRITE; DROP TABLE quants CASCADE; COMMIT",
    "COMMIT; BEGIN; UPDATE repos SET downloads = 0; COMMIT",
    "ROLLBACK; START TRANSACTION READ WRITE; DELETE FROM repos; COMMIT",
    "END; DELETE FROM repos",
    "SELECT 1; UPDATE repos SET downloads = 0",
    "SELECT 1; COMMIT",
    "SELECT 1 /* ; */ ; DELETE FROM repos",
    "SELECT 1 -- ;\n; DELETE FROM repos",
    "SELECT ';'; DELETE FROM repos",
    'SELECT 1 AS ";"; DELETE FROM repos',
    "SELECT $$;$$; DELETE FROM repos",
    "SELECT $q$ ; $q$; DELETE FROM repos",
    "SAVEPOINT a; RELEASE a; DELETE FROM repos",
    "PREPARE p AS DELETE FROM repos; EXECUTE p",
    "select 1;\x00delete from repos",
    "COMMIT",
    "BEGIN READ WRITE",
    "ROLLBACK",
    "START TRANSACTION READ WRITE",
    "SET TRANSACTION READ WRITE",
    "SET default_transaction_read_only = off",
    "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
    "RESET ALL",
    "DISCARD ALL",
    # plain writes
    "DROP TABLE quants",
    "DELETE FROM repos",
    "UPDATE repos SET downloads = 0",
    "INSERT INTO crawl_state (key, value) VALUES ('k', 'v')",
    "REPLACE INTO crawl_state (key, value) VALUES ('k', 'v')",
    "INSERT OR REPLACE INTO crawl_state (key, value) VALUES ('k', 'v')",
    "/* harmless */ DELETE FROM repos",
    "(DELETE FROM repos)",
    "  \n\tdelete from repos",
    "CREATE TABLE evil (x integer)",
    "CREATE TEMP TABLE evil (x integer)",
    "CREATE VIEW evil AS SELECT 1",
    "CREATE INDEX evil ON repos (likes)",
    "CREATE FUNCTION evil() RETURNS int AS 'select 1' LANGUAGE sql",
    "ALTER TABLE repos ADD COLUMN evil integer",
    "TRUNCATE repos",
    "GRANT ALL ON repos TO public",
    "COMMENT ON TABLE repos IS 'pwned'",
    "LOCK TABLE repos IN ACCESS EXCLUSIVE MODE",
    "NOTIFY evil",
    "VACUUM",
    "REINDEX",
    "ANALYZE",
    "COPY repos FROM STDIN",
    "COPY (SELECT 1) TO '/tmp/quants-sql-pwned'",
    "CALL evil()",
    "DO $$ BEGIN DELETE FROM repos; END $$",
    # writes hidden inside a read
    "WITH d AS (DELETE FROM repos RETURNING 1) SELECT * FROM d",
    "WITH x AS (SELECT 1) UPDATE repos SET downloads = 0",
    "EXPLAIN ANALYZE DELETE FROM repos",
    "EXPLAIN ANALYZE UPDATE repos SET downloads = 0",
    "SELECT * FROM repos FOR UPDATE",
    "SELECT nextval('repos_id_seq')",
    "SELECT setval('repos_id_seq', 1)",
    "SELECT pg_catalog.set_config('default_transaction_read_only', 'off', false); "
    "DELETE FROM repos",
    # SQLite's own ways out
    "ATTACH DATABASE '/tmp/quants-sql-attached.db' AS x",
    "DETACH main",
    "PRAGMA query_only = 0",
    "PRAGMA journal_mode = DELETE",
    "PRAGMA writable_schema = 1",
    "PRAGMA user_version = 7",
]


def _fingerprint(url: str) -> dict[str, object]:
    """Every table's rows (sorted reprs) and the SQLite file's bytes."""
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:
            tables = sorted(inspect(conn).get_table_names())
            out: dict[str, object] = {"tables": tables}
            for t in tables:
                rows = conn.execute(text(f'SELECT * FROM "{t}"')).fetchall()
                out[t] = sorted(repr(tuple(r)) for r in rows)
            if conn.dialect.name == "postgresql":
                out["read_only_default"] = conn.execute(
                    text("SHOW default_transaction_read_only")
                ).scalar()
                out["large_objects"] = conn.execute(
                    text("SELECT count(*) FROM pg_largeobject_metadata")
                ).scalar()
    finally:
        engine.dispose()
    if url.startswith("sqlite:///"):
        out["bytes"] = hashlib.sha256(Path(url.removeprefix("sqlite:///")).read_bytes()).digest()
    return out


@pytest.fixture(scope="module", params=BOTH_DATABASES)
def catalog(request, tmp_path_factory) -> Iterator[str]:
    with built_catalog(request.param, tmp_path_factory.mktemp("sql-ro"), "quants_sql_ro",
                       populate) as url:  # fmt: skip
        yield url


@pytest.mark.parametrize("attack", ATTACKS)
def test_write_attempt_is_refused_and_changes_nothing(catalog: str, attack: str) -> None:
    before = _fingerprint(catalog)
    with Catalog.open(catalog, upgrade=False, check=False) as cat:
        with pytest.raises((ReadOnlyViolation, QueryError)) as info:
            cat.query_readonly(attack)
        assert "\n" not in str(info.value)
        # The same connection kind still reads afterwards.
        _, rows = cat.query_readonly("SELECT count(*), sum(downloads) FROM repos")
        assert tuple(rows[0]) == (2, 1010)
    assert _fingerprint(catalog) == before
    assert not Path("/tmp/quants-sql-pwned").exists()
    assert not Path("/tmp/quants-sql-attached.db").exists()


#: Functions PostgreSQL runs even in a read-only transaction (it does not check them); the
#: transaction is always rolled back, so nothing they make persists. (lo_import also reads a
#: server file when the role is a superuser: docs/sql.md says to use a read-only role.)
ROLLED_BACK = ["SELECT lo_create(0)", "SELECT lo_import('/etc/hostname')"]


@pytest.mark.parametrize("attack", ROLLED_BACK)
def test_what_runs_anyway_is_rolled_back(catalog: str, attack: str) -> None:
    before = _fingerprint(catalog)
    with Catalog.open(catalog, upgrade=False, check=False) as cat:
        try:
            cat.query_readonly(attack)
        except QueryError:
            assert catalog.startswith("sqlite")  # no such function there
    assert _fingerprint(catalog) == before


def test_a_string_that_only_looks_like_two_statements_is_one_read(catalog: str) -> None:
    with Catalog.open(catalog, upgrade=False, check=False) as cat:
        _, rows = cat.query_readonly("SELECT 'a; DELETE FROM repos' AS s")
        assert rows == [("a; DELETE FROM repos",)]


def test_statement_timeout_stops_a_runaway_query(catalog: str) -> None:
    slow = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    with (
        Catalog.open(catalog, upgrade=False, check=False) as cat,
        pytest.raises(QueryError, match=r"stopped after 0\.3 s"),
    ):
        cat.query_readonly(slow, timeout_s=0.3)


def test_row_cap(catalog: str) -> None:
    with (
        Catalog.open(catalog, upgrade=False, check=False) as cat,
        pytest.raises(QueryError, match="more than 1 rows"),
    ):
        cat.query_readonly("SELECT * FROM repos", max_rows=1)


def test_the_connection_alone_refuses_without_the_statement_check(catalog: str) -> None:
    """The guarantee does not rest on crawler/catalog/sql_guard.py: the raw read-only connection
    refuses a multi-statement write by itself (PostgreSQL: one prepared statement; SQLite: the
    driver runs one statement, on a mode=ro connection)."""
    from sqlalchemy.exc import DBAPIError

    before = _fingerprint(catalog)
    with Catalog.open(catalog, upgrade=False, check=False) as cat:
        engine = cat._readonly_engine()
        try:
            for attack in (ATTACKS[0], "DELETE FROM repos"):
                with engine.connect() as conn, pytest.raises(DBAPIError):
                    conn.exec_driver_sql(attack)
        finally:
            engine.dispose()
    assert _fingerprint(catalog) == before


def test_cli_refuses_the_reported_attacks_in_one_line(catalog: str, tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    before = _fingerprint(catalog)
    script = tmp_path / "harmless.sql"
    script.write_text("SELECT 1;\nUPDATE repos SET downloads = 0;\n")
    for query in (ATTACKS[0], str(script)):
        out = cli.run("sql", query, "--db", catalog, ok=False)
        assert out.returncode == 1, out.stdout
        assert out.stderr.startswith("error: refused") and "Traceback" not in out.stderr
        assert "internal error" not in out.stderr
    assert _fingerprint(catalog) == before


def test_cli_missing_sqlite_path_is_an_error_not_a_new_catalog(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    missing = tmp_path / "nope" / "catalog.sqlite"
    out = cli.run("sql", "SELECT 1", "--db", f"sqlite:///{missing}", ok=False)
    assert out.returncode == 1 and "no catalog at" in out.stderr.splitlines()[0]
    assert not missing.exists() and not missing.parent.exists()
