"""The catalog database through SQLAlchemy: engine, migrations, sessions, read-only user SQL.

User SQL runs on a connection that cannot write (SQLite read-only, PostgreSQL READ ONLY).
Details: docs/internals/catalog.md#database
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from crawler.base.closing import Closing
from crawler.base.errors import (
    CatalogError,
    ConfigError,
    QueryError,
    ReadOnlyViolation,
    SchemaOutOfDate,
)
from crawler.catalog.reader import SCHEMA_HEAD

if TYPE_CHECKING:
    from crawler.catalog.reader import Reader
    from crawler.catalog.search_index import ColumnsFn

logger = logging.getLogger(__name__)

__all__ = ["Catalog", "catalog_identity", "params_from_pairs", "redact_url", "resource_dir"]

#: The revision from which the search columns hold the current model's values; a catalog migrated
#: from below it gets them computed (crawler.catalog.search_index.refresh_search_columns). 0004
#: added the columns; 0008 came with the refitted quality sensitivities
#: (crawler/ranking/quality.py), so scores stored before it are recomputed once; 0013 added
#: ``fit_type_eff`` (the --sort speed bound's weight rate), 0014 ``fit_slot_bytes`` and its kin (the
#: --tier partial margin bound), 0016 ``fit_swa_kv_per_cell`` and ``fit_swa_cells`` (the memory
#: bound's sliding-window cells), 0018 ``copy_key`` (a quant's copy class).
_SEARCH_COLUMNS_REVISION = "0018_copy_classes"
# SQLite waits this long for a writer's lock before "database is locked" (WAL readers never wait).
SQLITE_BUSY_TIMEOUT_MS = 30_000
# Upper bound on rows `quants sql` materialises, so a cross join cannot exhaust memory.
MAX_QUERY_ROWS = 1_000_000
#: Seconds one `quants sql` statement may run (PostgreSQL statement_timeout; SQLite: a progress
#: handler that interrupts the statement).
QUERY_TIMEOUT_S = 30.0


def resource_dir(name: str) -> Path:
    """Path of a top-level project folder (``migrations``, ``queries``), installed or in a checkout.

    The wheel ships them as ``crawler/_<name>`` (pyproject force-include); a checkout or editable
    install finds them beside the package.
    """
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / f"_{name}", package.parent / name):
        if candidate.is_dir():
            return candidate
    raise CatalogError(f"cannot find the {name}/ folder of the quants installation")


def _normalise_url(url: str) -> str:
    # Plain "postgresql://" would pick psycopg2, which we do not depend on.
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _sqlite_path(url: str) -> Path | None:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    db = parsed.database
    if not db or db == ":memory:":
        raise CatalogError("an in-memory SQLite catalog is not supported; give a file path")
    return Path(db)


def catalog_identity(url: str) -> tuple[Path | None, str]:
    """(the SQLite file, or None for a server) and the URL without its driver, for naming what
    belongs to one catalog (postgresql:// and postgresql+psycopg:// are one catalog)."""
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError("the database URL is not valid (see --db / QUANTS_DB)") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite" and parsed.database not in (None, "", ":memory:"):
        return Path(str(parsed.database)).expanduser().resolve(), ""
    return None, parsed.set(drivername=backend).render_as_string(hide_password=False)


# PostgreSQL text cannot hold NUL ("invalid byte sequence for encoding UTF8: 0x00"); GGUF metadata
# written by anyone can. The byte becomes U+FFFD in text columns (the compressed tensor table keeps
# the exact bytes) rather than failing the repo's transaction on every crawl.
_NUL_REPLACEMENT = "\ufffd"


def _without_nul(value: Any) -> Any:
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", _NUL_REPLACEMENT)
    return value


def _pg_replace_nul(
    _conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, executemany: bool
) -> tuple[str, Any]:
    def clean(params: Any) -> Any:
        if isinstance(params, Mapping):
            return {k: _without_nul(v) for k, v in params.items()}
        if isinstance(params, (list, tuple)):
            return type(params)(_without_nul(v) for v in params)
        return params

    if executemany and isinstance(parameters, (list, tuple)):
        return statement, [clean(p) for p in parameters]
    return statement, clean(parameters)


def _on_sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL: readers (search, sql) never block on the crawler's writes; foreign keys enforced.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


class Catalog(Closing):
    """An open catalog database. Use as a context manager or call close."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine = engine
        self.url = url
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def open(
        cls,
        url: str,
        *,
        upgrade: bool = True,
        check: bool = True,
        tracer: Callable[[str, Any], None] | None = None,
        columns: ColumnsFn | None = None,
    ) -> Catalog:
        """Open (and by default create or migrate) the catalog at ``url``.

        With ``upgrade=False`` the schema is only checked (``check``) or left alone. ``columns``
        computes the search columns a migration across 0003/0004 leaves to fill (see upgrade).
        ``tracer(sql, params)`` is called for every statement, as sqlite-utils does.
        """
        url = _normalise_url(url)
        path = _sqlite_path(url)
        try:
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
                event.listen(engine, "connect", _on_sqlite_connect)
            else:
                engine = create_engine(url, pool_pre_ping=True)
                event.listen(engine, "before_cursor_execute", _pg_replace_nul, retval=True)
        except (SQLAlchemyError, ImportError, ValueError, OSError) as exc:
            raise CatalogError(f"cannot open catalog {redact_url(url)}: {exc}") from exc
        if tracer is not None:

            def _trace(_conn: Any, _cur: Any, statement: str, params: Any, *_: Any) -> None:
                tracer(statement, params)

            event.listen(engine, "before_cursor_execute", _trace)
        catalog = cls(engine, url)
        try:
            if upgrade:
                catalog.upgrade(columns)
            elif check:
                catalog.check_schema()
        except BaseException:
            engine.dispose()
            raise
        return catalog

    @classmethod
    def open_readonly(cls, url: str) -> Catalog:
        """The catalog at ``url`` on connections that cannot write (``quants serve``): never
        created or migrated (the caller checks the schema, e.g. with ``Reader.open``)."""
        url = _normalise_url(url)
        path = _sqlite_path(url)
        if path is not None and not path.is_file():
            raise CatalogError(f"no catalog at {path}")
        probe = cls(create_engine("sqlite://") if path is not None else create_engine(url), url)
        try:
            return cls(probe._readonly_engine(), url)
        finally:
            probe.engine.dispose()

    def close(self) -> None:
        """Release all connections."""
        self.engine.dispose()

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    @contextmanager
    def reader(self) -> Iterator[Reader]:
        """A Reader on one of this engine's connections (the
        search and compare read paths take a reader; the connection goes back to the pool)."""
        from crawler.catalog.reader import Reader

        raw = self.engine.raw_connection()
        try:
            with Reader(raw.driver_connection, self.dialect, owned=False) as reader:
                yield reader
        finally:
            raw.close()

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits when the block succeeds and rolls back when it raises."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except OperationalError as exc:
            session.rollback()
            raise CatalogError(f"database error: {exc.orig}") from exc
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    # -- schema ---------------------------------------------------------------------------------

    def _alembic_config(self) -> Any:
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(resource_dir("migrations")))
        cfg.set_main_option("sqlalchemy.url", self.url.replace("%", "%%"))
        return cfg

    def head_revision(self) -> str | None:
        """The newest migration this version of quants knows (tests hold it to Alembic's head)."""
        return SCHEMA_HEAD

    def current_revision(self) -> str | None:
        """The migration the database is at (None for an empty database).

        Read with plain SQL from Alembic's own table, so that opening a catalog at the head (every
        command, nearly every time) never imports Alembic (about 0.5 s of start-up).
        """
        try:
            with self.engine.connect() as conn:
                if not inspect(conn).has_table("alembic_version"):
                    return None
                rows = conn.execute(text("SELECT version_num FROM alembic_version")).all()
        except DBAPIError as exc:
            raise CatalogError(f"cannot read catalog {redact_url(self.url)}: {exc.orig}") from exc
        if len(rows) > 1:
            raise CatalogError(f"catalog {redact_url(self.url)} has several schema heads")
        return str(rows[0][0]) if rows else None

    def check_schema(self) -> None:
        """Raise SchemaOutOfDate unless the database is at this version's head."""
        current, head = self.current_revision(), self.head_revision()
        if current != head:
            raise SchemaOutOfDate(
                f"catalog schema is at {current or 'nothing'}, this quants needs {head}"
            )

    def upgrade(self, columns: ColumnsFn | None = None, *, replay: bool = True) -> str | None:
        """Apply pending migrations (idempotent); return the revision reached.

        An empty database gets the head schema from the migrations' recorded statements
        (crawler.catalog.fresh_schema: no Alembic to import, no migration to run), unless
        ``replay`` is False. Crossing 0003/0004 adds the search columns empty; ``columns`` fills
        them in the same transaction. Without it such a catalog is refused, never left
        half-indexed.
        """
        head = self.head_revision()
        current = self.current_revision()
        if current == head:
            return head
        if current is None and replay and head is not None and self._replayed(head):
            logger.info("catalog %s made at %s", redact_url(self.url), head)
            return head
        from alembic import command

        if current is not None and current < _SEARCH_COLUMNS_REVISION and columns is None:
            raise CatalogError(
                f"catalog schema {current} must have its search columns filled as it migrates:"
                " open it with the column function (every quants command passes it)"
            )
        cfg = self._alembic_config()
        try:
            with self._schema_change() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
                if current is not None and current < _SEARCH_COLUMNS_REVISION:
                    # Revisions 0003/0004 add the search columns without computing the model's
                    # values, and 0008 changed the model (a migration never calls live model
                    # code): fill them now, with the functions the crawl uses, in the
                    # migration's transaction.
                    from crawler.catalog.search_index import refresh_search_columns

                    assert columns is not None
                    refresh_search_columns(conn, columns)
        except DBAPIError as exc:
            # Another process may have migrated at the same moment; that is fine if we are at head.
            if self.current_revision() != head:
                raise CatalogError(f"migration failed: {exc.orig}") from exc
        except Exception as exc:
            if "Can't locate revision" in str(exc):
                raise SchemaOutOfDate(
                    f"catalog schema {current} is newer than this quants ({head}); upgrade quants"
                ) from exc
            raise
        logger.info("catalog %s upgraded from %s to %s", redact_url(self.url), current, head)
        return head

    @contextmanager
    def _schema_change(self) -> Iterator[Connection]:
        """One transaction for a change of the schema."""
        with self.engine.begin() as conn:
            if conn.dialect.name == "sqlite":
                # pysqlite begins transactions only before DML, so each CREATE would commit on
                # its own and a crash mid-migration would leave a half-made schema that no later
                # open can migrate (found by test_crash_safety). One transaction, a writer's
                # from its start: a second process making the same catalog waits for it.
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            yield conn

    def _replayed(self, head: str) -> bool:
        """Whether the recorded statements made the ``head`` schema (fresh_schema.replay); a
        failed replay leaves the database as it was."""
        from crawler.catalog.fresh_schema import replay

        try:
            with self._schema_change() as conn:
                return replay(conn, head)
        except Exception as exc:  # the driver's own error: the migrations then run
            first = str(exc).strip().splitlines()[:1] or [type(exc).__name__]
            logger.info("recorded schema not replayed (%s): migrating", first[0])
            return False

    # -- read-only user SQL ---------------------------------------------------------------------

    def _readonly_engine(self, *, timeout_s: float | None = None) -> Engine:
        """Connections that cannot write; ``timeout_s`` bounds each statement (None: no bound).

        PostgreSQL: every session defaults to read-only transactions, and every statement is a
        server-side prepared statement (``prepare_threshold=0``), which the server parses as ONE
        command ("cannot insert multiple commands into a prepared statement"): a COMMIT; BEGIN
        READ WRITE; ... sequence never reaches execution.
        """
        path = _sqlite_path(self.url)
        if path is not None:
            uri = f"{path.resolve().as_uri()}?mode=ro"

            def connect() -> sqlite3.Connection:
                conn = sqlite3.connect(uri, uri=True, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
                conn.execute("PRAGMA query_only=ON")
                # No ATTACH: a read-only main database must not open a writable second one.
                conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
                if timeout_s is not None:
                    deadline = time.monotonic() + timeout_s
                    # A nonzero return interrupts the statement ("interrupted").
                    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
                return conn

            return create_engine("sqlite://", creator=connect, poolclass=NullPool)
        options = "-c default_transaction_read_only=on"
        if timeout_s is not None:
            options += f" -c statement_timeout={max(1, int(timeout_s * 1000))}"
        return create_engine(
            self.url,
            poolclass=NullPool,
            connect_args={"options": options, "prepare_threshold": 0},
        )

    def query_readonly(
        self,
        sql: str,
        params: Mapping[str, Any] | None = None,
        *,
        max_rows: int = MAX_QUERY_ROWS,
        timeout_s: float | None = QUERY_TIMEOUT_S,
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run one read-only SQL statement; return (columns, rows).

        Refused before the database sees it: more than one statement, or one that does not
        start as a read (crawler/catalog/sql_guard.py). Then the connection itself cannot write
        (see _readonly_engine); more than ``max_rows`` rows or ``timeout_s`` seconds is an error.
        """
        from crawler.catalog.sql_guard import SqlRefused, check_readonly_sql

        try:
            statement = check_readonly_sql(sql, self.dialect)
        except SqlRefused as exc:
            raise ReadOnlyViolation(str(exc)) from None
        engine = self._readonly_engine(timeout_s=timeout_s)
        try:
            with engine.connect() as conn:
                if self.dialect == "postgresql":
                    conn.exec_driver_sql("SET TRANSACTION READ ONLY")
                try:
                    result = conn.execute(text(statement), dict(params or {}))
                    if not result.returns_rows:
                        return [], []
                    columns = list(result.keys())
                    rows = [tuple(r) for r in result.fetchmany(max_rows + 1)]
                finally:
                    conn.rollback()
        except DBAPIError as exc:
            message = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            if _is_readonly_error(message):
                raise ReadOnlyViolation(
                    f"refused: the catalog is read-only here ({message})"
                ) from exc
            if _is_timeout(message):
                raise QueryError(
                    f"query stopped after {timeout_s:g} s (the statement time limit)"
                ) from exc
            raise QueryError(f"query failed: {message}") from exc
        except SQLAlchemyError as exc:
            raise QueryError(f"query failed: {exc}") from exc
        finally:
            engine.dispose()
        if len(rows) > max_rows:
            raise QueryError(f"query returned more than {max_rows} rows; add a LIMIT")
        return columns, rows


def _is_timeout(message: str) -> bool:
    lowered = message.lower()
    return "statement timeout" in lowered or lowered == "interrupted"


def _is_readonly_error(message: str) -> bool:
    lowered = message.lower()
    return any(
        marker in lowered
        for marker in (
            "readonly",
            "read-only",
            "read only",
            "attempt to write",
            "query_only",
            "too many attached databases",
        )
    )


def redact_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<database url>"


def params_from_pairs(pairs: Sequence[str]) -> dict[str, Any]:
    """``["k=v", ...]`` -> dict; integers and floats become numbers so comparisons behave."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().isidentifier():
            raise QueryError(f"--param expects NAME=VALUE, got {pair!r}")
        out[key.strip()] = _coerce(value)
    return out


def _coerce(value: str) -> Any:
    for conv in (int, float):
        try:
            return conv(value)
        except ValueError:
            pass
    return value
