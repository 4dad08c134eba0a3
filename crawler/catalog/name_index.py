"""The substring index of quants.search_text: the few quants a name query can match, found first.

SQLite FTS5 trigrams or PostgreSQL pg_trgm (migration 0011): it pre-selects, the matcher decides.
Details: docs/internals/catalog.md#name_index
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
from collections.abc import Sequence
from typing import Any

from crawler.catalog.reader import Reader
from crawler.ranking.query import QueryMatcher

__all__ = [
    "INDEXED_MIN",
    "by_ids",
    "escape_like",
    "fts_query",
    "indexed_tokens",
    "name_candidates",
]

#: Shortest token the index can look up: a trigram index holds 3-character sequences, and
#: "substrings consisting of fewer than 3 unicode characters do not match any rows when used
#: with a full-text query" (https://sqlite.org/fts5.html#the_trigram_tokenizer).
INDEXED_MIN = 3
#: pg_trgm takes trigrams from words, "ignoring non-word characters" (its word characters are
#: alphanumerics), and "a pattern with no extractable trigrams will degenerate to a full-index
#: scan" (https://www.postgresql.org/docs/current/pgtrgm.html): "3.6" has none.
_PG_WORD = re.compile(r"[^\W_]{3}")


def indexed_tokens(matcher: QueryMatcher, dialect: str = "sqlite") -> tuple[str, ...]:
    """The query's tokens the index looks up: those that must occur in ``search_text``
    (QueryMatcher.required_substrings, the tokens with digits) of 3 characters or more; on
    PostgreSQL, those with 3 alphanumerics in a row. The others are left to the LIKE test and
    the matcher, as without the index."""
    tokens = [t for t in matcher.required_substrings if len(t) >= INDEXED_MIN]
    if dialect == "postgresql":
        tokens = [t for t in tokens if _PG_WORD.search(t)]
    return tuple(tokens)


def escape_like(text: str) -> str:
    """``text`` as a literal inside a LIKE pattern with ``ESCAPE '\\'``."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def fts_query(tokens: Sequence[str]) -> str:
    """An FTS5 query for rows holding every trigram of every token (each quoted as a string,
    https://sqlite.org/fts5.html#fts5_strings). With ``detail=none`` the index knows which rows
    hold a trigram, not where: a superset of the rows holding the token, which the search's
    LIKE test on ``search_text`` then narrows exactly."""
    grams = sorted({t[i : i + 3] for t in tokens for i in range(len(t) - 2)})
    return " AND ".join('"' + g.replace('"', '""') + '"' for g in grams)


@functools.cache
def _sqlite_trigrams() -> bool:
    """Whether the SQLite Python links has FTS5 and its trigram tokenizer (3.34.0,
    https://sqlite.org/releaselog/3_34_0.html), as migration 0011 checks."""
    conn = sqlite3.connect(":memory:")
    try:
        options = {str(r[0]) for r in conn.execute("PRAGMA compile_options")}
    finally:
        conn.close()
    return sqlite3.sqlite_version_info >= (3, 34, 0) and "ENABLE_FTS5" in options


def _has_index(reader: Reader) -> bool:
    """Whether migration 0011 could make the index on this database (FTS5 with trigrams,
    pg_trgm), and this SQLite can read it (a file made elsewhere): else the search reads as
    before."""
    if reader.dialect == "sqlite":
        if not _sqlite_trigrams():
            return False
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'quants_search'"
    else:
        sql = "SELECT 1 WHERE to_regclass('ix_quants_search_trgm') IS NOT NULL"
    return bool(reader.rows(sql))


def name_candidates(reader: Reader, matcher: QueryMatcher, cap: int) -> list[int] | None:
    """Ids of every quant whose ``search_text`` may match ``matcher`` (each indexed token's
    trigrams, or no stored text), in id order; None when no token can be looked up, the index is
    missing, or more than ``cap`` quants hold the tokens (then the search reads by its sort
    order, testing names as it goes). Vanished quants included: the caller's filters drop them.
    """
    tokens = indexed_tokens(matcher, reader.dialect)
    if not tokens or not _has_index(reader):
        return None
    params: dict[str, object] = {"cap": cap + 1}
    if reader.dialect == "sqlite":
        sql = "SELECT rowid FROM quants_search WHERE quants_search MATCH :fts LIMIT :cap"
        params["fts"] = fts_query(tokens)
    else:
        # The search's own LIKE tests (crawler.catalog.candidates.filter_sql), served by the GIN
        # index; exact after its recheck.
        likes = []
        for i, tok in enumerate(tokens):
            likes.append(f"search_text LIKE :name{i} ESCAPE '\\'")
            params[f"name{i}"] = "%" + escape_like(tok) + "%"
        sql = f"SELECT id FROM quants WHERE {' AND '.join(likes)} LIMIT :cap"
    ids = {int(r[0]) for r in reader.rows(sql, params)}
    if len(ids) > cap:
        return None
    # Too long to store (crawler.catalog.search_index.search_text_sql): the matcher decides.
    ids.update(int(r[0]) for r in reader.rows("SELECT id FROM quants WHERE search_text IS NULL"))
    return sorted(ids) if len(ids) <= cap else None


def by_ids(reader: Reader, joined: str, ids: Sequence[int]) -> tuple[str, str, dict[str, Any]]:
    """``joined`` (a FROM clause with ``quants q``) read by id, the condition that ``q.id`` is
    one of ``ids``, and its parameter ``name_ids``.

    SQLite would otherwise walk an index led by ``live`` (every live quant); NOT INDEXED leaves
    it the rowid (https://sqlite.org/lang_indexedby.html). The ids are one JSON parameter there
    (an IN list of thousands of parameters compiles slowly), one array on PostgreSQL."""
    if reader.dialect == "sqlite":
        return (
            joined.replace("quants q", "quants q NOT INDEXED", 1),
            "q.id IN (SELECT value FROM json_each(:name_ids))",
            {"name_ids": json.dumps(list(ids))},
        )
    return joined, "q.id = ANY(:name_ids)", {"name_ids": list(ids)}
