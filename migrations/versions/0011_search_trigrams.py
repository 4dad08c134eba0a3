"""search trigrams: a substring index on quants.search_text for name queries

Revision ID: 0011_search_trigrams
Revises: 0010_search_shape
Create Date: 2026-12-06

A name query's tokens with digits must occur in ``quants.search_text`` (crawler.ranking.query).
This index finds the quants that hold them without reading every row, so the search ranks only
those (crawler.catalog.name_index):

* SQLite: ``quants_search``, an FTS5 table with the trigram tokenizer (SQLite 3.34.0 or later,
  https://sqlite.org/fts5.html#the_trigram_tokenizer) whose content is ``quants.search_text``
  (external content, https://sqlite.org/fts5.html#external_content_tables), kept by triggers on
  ``quants`` so every write path, raw SQL included, keeps it current. ``detail=none``: the
  search asks for rows holding each trigram of a token, and its LIKE test on ``search_text``
  decides. Where the SQLite that Python links has no FTS5 or no trigram tokenizer, nothing is
  made and the search reads as before.
* PostgreSQL: a GIN index with ``gin_trgm_ops`` (pg_trgm,
  https://www.postgresql.org/docs/current/pgtrgm.html#PGTRGM-INDEX), which serves the search's
  own ``search_text LIKE '%...%'`` tests. Where the extension cannot be created (not installed,
  no privilege), nothing is made.
* Both: a partial index of the quants whose ``search_text`` is NULL (too long to store: the
  matcher decides those), which the search always adds to the index's rows.
"""

from __future__ import annotations

import logging
import sqlite3

import sqlalchemy as sa
from alembic import op

revision = "0011_search_trigrams"
down_revision: str | None = "0010_search_shape"
branch_labels = None
depends_on = None

logger = logging.getLogger(__name__)

_SQLITE_UP = (
    "CREATE VIRTUAL TABLE quants_search USING fts5(search_text, content='quants',"
    " content_rowid='id', tokenize='trigram', detail=none, columnsize=0)",
    # An external-content table is told the old text to take out (the FTS5 'delete' command).
    "CREATE TRIGGER quants_search_insert AFTER INSERT ON quants"
    " WHEN new.search_text IS NOT NULL BEGIN"
    " INSERT INTO quants_search(rowid, search_text) VALUES (new.id, new.search_text); END",
    "CREATE TRIGGER quants_search_delete AFTER DELETE ON quants"
    " WHEN old.search_text IS NOT NULL BEGIN"
    " INSERT INTO quants_search(quants_search, rowid, search_text)"
    " VALUES ('delete', old.id, old.search_text); END",
    "CREATE TRIGGER quants_search_update AFTER UPDATE OF id, search_text ON quants"
    " WHEN old.search_text IS NOT new.search_text OR old.id <> new.id BEGIN"
    " INSERT INTO quants_search(quants_search, rowid, search_text)"
    " SELECT 'delete', old.id, old.search_text WHERE old.search_text IS NOT NULL;"
    " INSERT INTO quants_search(rowid, search_text)"
    " SELECT new.id, new.search_text WHERE new.search_text IS NOT NULL; END",
    "INSERT INTO quants_search(rowid, search_text)"
    " SELECT id, search_text FROM quants WHERE search_text IS NOT NULL",
)
_SQLITE_DOWN = (
    "DROP TRIGGER IF EXISTS quants_search_insert",
    "DROP TRIGGER IF EXISTS quants_search_delete",
    "DROP TRIGGER IF EXISTS quants_search_update",
    "DROP TABLE IF EXISTS quants_search",
)
#: The trigram tokenizer came with SQLite 3.34.0 (https://sqlite.org/releaselog/3_34_0.html).
_TRIGRAM_SQLITE = (3, 34, 0)


def _sqlite_has_trigrams(bind: sa.Connection) -> bool:
    version = tuple(
        int(x) for x in str(bind.exec_driver_sql("SELECT sqlite_version()").scalar()).split(".")
    )
    options = {str(r[0]) for r in bind.exec_driver_sql("PRAGMA compile_options")}
    return version >= _TRIGRAM_SQLITE and "ENABLE_FTS5" in options


def _pg_trgm(bind: sa.Connection) -> bool:
    """Create pg_trgm where it is missing; False where that cannot be done."""
    if bind.exec_driver_sql("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'").first():
        return True
    if not bind.exec_driver_sql(
        "SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'"
    ).first():
        return False
    try:
        with bind.begin_nested():  # a refusal (no privilege) must not abort the migration
            bind.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except sa.exc.DBAPIError as exc:
        logger.warning("pg_trgm not created (%s): name queries read without the index", exc.orig)
        return False
    return True


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        if _sqlite_has_trigrams(bind):
            for sql in _SQLITE_UP:
                op.execute(sql)
        else:
            logger.warning(
                "SQLite %s has no FTS5 trigram tokenizer: name queries read without the index",
                sqlite3.sqlite_version,
            )
    elif _pg_trgm(bind):
        op.execute(
            "CREATE INDEX ix_quants_search_trgm ON quants USING gin (search_text gin_trgm_ops)"
        )
    op.create_index(
        "ix_quants_search_text_null",
        "quants",
        ["id"],
        sqlite_where=sa.text("search_text IS NULL"),
        postgresql_where=sa.text("search_text IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_quants_search_text_null", table_name="quants")
    if op.get_bind().dialect.name == "sqlite":
        for sql in _SQLITE_DOWN:
            op.execute(sql)
    else:
        # pg_trgm stays: other objects of the database may use it.
        op.execute("DROP INDEX IF EXISTS ix_quants_search_trgm")
