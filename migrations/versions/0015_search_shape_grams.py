"""search shape grams: which search shapes hold a name's 3-character pieces, for broad name queries

Revision ID: 0015_search_shape_grams
Revises: 0014_partial_slot_bytes
Create Date: 2026-12-06

A name query's tokens with digits must occur in ``quants.search_text``. A broad query (more
quants than the substring index serves) is read shape by shape (crawler.catalog.ordered), and
each shape's read tests the name on every quant of the shape. ``search_shape_grams`` holds, for
each search shape, every 3-character piece with an ASCII digit of the ``search_text`` of its
quants: a shape lacking one of a token's pieces holds no quant the query matches, and is not
read (crawler.catalog.name_shapes). Only pieces with a digit: every token the test applies to
has one, and the others would make the table several times larger.

Kept by triggers on ``quants`` (insert, and an update that changes the text or the shape), so
every write path, raw SQL included, adds what a new text or shape brings. Nothing is taken out:
a piece of a quant gone or changed stays, so the table names a superset of the shapes (the
reads test the name exactly).
"""

from __future__ import annotations

from alembic import op

revision = "0015_search_shape_grams"
down_revision: str | None = "0014_partial_slot_bytes"
branch_labels = None
depends_on = None

#: SQLite: the longest text whose every piece is kept. The catalog stores at most 512 characters
#: (crawler.catalog.tables.SEARCH_TEXT_MAX, else NULL); SQLite does not enforce a VARCHAR's
#: length, so a raw write of a longer text is covered up to this.
_TEXT_MAX = 8192
#: SQLite: the start of every piece, 1 to _TEXT_MAX - 2 (its triggers take no WITH clause; a
#: JSON array of them, json_each, read twice as slowly). A piece's read stops at the text's end.
_STARTS = "CREATE TABLE search_gram_starts (i INTEGER NOT NULL PRIMARY KEY)"

_TABLE = (
    "CREATE TABLE search_shape_grams (gram VARCHAR(3) NOT NULL, search_shape VARCHAR(512) NOT NULL,"
    " CONSTRAINT pk_search_shape_grams PRIMARY KEY (gram, search_shape))"
)


def _sqlite_insert(row: str) -> str:
    return (
        "INSERT OR IGNORE INTO search_shape_grams (gram, search_shape)"
        f" SELECT DISTINCT substr({row}.search_text, p.i, 3), {row}.search_shape"
        f" FROM search_gram_starts p WHERE p.i <= length({row}.search_text) - 2"
        f" AND substr({row}.search_text, p.i, 3) GLOB '*[0-9]*'"
    )


_SQLITE_UP = (
    _TABLE + " WITHOUT ROWID",
    _STARTS,
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n"
    f" WHERE i < {_TEXT_MAX - 2}) INSERT INTO search_gram_starts (i) SELECT i FROM n",
    "CREATE TRIGGER search_shape_grams_insert AFTER INSERT ON quants"
    " WHEN new.search_text IS NOT NULL AND new.search_shape IS NOT NULL BEGIN "
    + _sqlite_insert("new")
    + "; END",
    "CREATE TRIGGER search_shape_grams_update AFTER UPDATE OF search_text, search_shape ON quants"
    " WHEN new.search_text IS NOT NULL AND new.search_shape IS NOT NULL"
    " AND (old.search_text IS NOT new.search_text OR old.search_shape IS NOT new.search_shape)"
    " BEGIN " + _sqlite_insert("new") + "; END",
    _sqlite_insert("quants").replace(" FROM search_gram_starts", " FROM quants, search_gram_starts")
    + " AND quants.search_text IS NOT NULL AND quants.search_shape IS NOT NULL",
)
_SQLITE_DOWN = (
    "DROP TRIGGER IF EXISTS search_shape_grams_insert",
    "DROP TRIGGER IF EXISTS search_shape_grams_update",
    "DROP TABLE IF EXISTS search_shape_grams",
    "DROP TABLE IF EXISTS search_gram_starts",
)


def _pg_insert(row: str) -> str:
    return (
        "INSERT INTO search_shape_grams (gram, search_shape)"
        f" SELECT DISTINCT substr({row}.search_text, p, 3), {row}.search_shape"
        f" FROM generate_series(1, length({row}.search_text) - 2) AS p"
        f" WHERE substr({row}.search_text, p, 3) ~ '[0-9]'"
    )


_PG_UP = (
    _TABLE,
    "CREATE FUNCTION search_shape_grams_add() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
    " IF NEW.search_text IS NOT NULL AND NEW.search_shape IS NOT NULL AND (TG_OP = 'INSERT'"
    " OR OLD.search_text IS DISTINCT FROM NEW.search_text"
    " OR OLD.search_shape IS DISTINCT FROM NEW.search_shape) THEN "
    + _pg_insert("NEW")
    + " ON CONFLICT DO NOTHING; END IF; RETURN NULL; END $$",
    "CREATE TRIGGER search_shape_grams_add AFTER INSERT OR UPDATE OF search_text, search_shape"
    " ON quants FOR EACH ROW EXECUTE FUNCTION search_shape_grams_add()",
    _pg_insert("q").replace(" FROM generate_series", " FROM quants q, generate_series")
    + " AND q.search_text IS NOT NULL AND q.search_shape IS NOT NULL ON CONFLICT DO NOTHING",
)
_PG_DOWN = (
    "DROP TRIGGER IF EXISTS search_shape_grams_add ON quants",
    "DROP FUNCTION IF EXISTS search_shape_grams_add()",
    "DROP TABLE IF EXISTS search_shape_grams",
)


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for sql in _SQLITE_UP if sqlite else _PG_UP:
        op.execute(sql)


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for sql in _SQLITE_DOWN if sqlite else _PG_DOWN:
        op.execute(sql)
