"""What quants sql accepts before a database sees it (pure): one statement that only reads.

The first of three guards, the one that gives a clear refusal; the database's own guarantee follows.
Details: docs/internals/catalog.md#sql_guard
"""

from __future__ import annotations

import re

__all__ = ["READ_KEYWORDS", "SqlRefused", "check_readonly_sql", "split_statements"]

#: First keywords of statements that only read (EXPLAIN ANALYZE of a write still runs inside a
#: read-only transaction, which refuses it). PRAGMA only on SQLite and only without ``=``.
READ_KEYWORDS = frozenset({"SELECT", "WITH", "VALUES", "TABLE", "EXPLAIN", "SHOW", "PRAGMA"})

_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")
_WORD = re.compile(r"[A-Za-z_]+")


class SqlRefused(ValueError):
    """The text is not one statement that only reads."""


def _skip(sql: str, i: int) -> int:
    """Index just past the quoted string, identifier or comment starting at ``i`` (or ``i``)."""
    n = len(sql)
    c = sql[i]
    if c in "'\"":
        backslash = c == "'" and i > 0 and sql[i - 1] in "eE"
        j = i + 1
        while j < n:
            if backslash and sql[j] == "\\":
                j += 2
                continue
            if sql[j] == c:
                if j + 1 < n and sql[j + 1] == c:  # doubled quote
                    j += 2
                    continue
                return j + 1
            j += 1
        return n
    if sql.startswith("--", i):
        j = sql.find("\n", i)
        return n if j < 0 else j + 1
    if sql.startswith("/*", i):
        depth, j = 1, i + 2
        while j < n and depth:
            if sql.startswith("/*", j):
                depth, j = depth + 1, j + 2
            elif sql.startswith("*/", j):
                depth, j = depth - 1, j + 2
            else:
                j += 1
        return j
    if c == "$" and (i == 0 or not (sql[i - 1].isalnum() or sql[i - 1] == "_")):
        m = _DOLLAR.match(sql, i)
        if m:
            end = sql.find(m.group(), m.end())
            return n if end < 0 else end + len(m.group())
    return i


def split_statements(sql: str) -> list[str]:
    """The statements of ``sql`` (stripped, empty ones dropped), split at top-level ``;``."""
    out: list[str] = []
    start = i = 0
    n = len(sql)
    while i < n:
        j = _skip(sql, i)
        if j != i:
            i = j
            continue
        if sql[i] == ";":
            out.append(sql[start:i])
            start = i + 1
        i += 1
    out.append(sql[start:])
    return [s.strip() for s in out if _code(s).strip()]


def _code(sql: str) -> str:
    """``sql`` without comments (strings kept), for finding the first keyword."""
    parts: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        j = _skip(sql, i)
        if j != i:
            if not sql.startswith(("--", "/*"), i):
                parts.append(sql[i:j])
            else:
                parts.append(" ")
            i = j
            continue
        parts.append(sql[i])
        i += 1
    return "".join(parts)


def check_readonly_sql(sql: str, dialect: str) -> str:
    """``sql`` as one statement if it only reads; raise SqlRefused otherwise."""
    statements = split_statements(sql)
    if not statements:
        raise SqlRefused("refused: no SQL statement given")
    if len(statements) > 1:
        raise SqlRefused(
            f"refused: quants sql runs one statement per call ({len(statements)} given)"
        )
    code = _code(statements[0]).lstrip(" \t\r\n(")
    m = _WORD.match(code)
    keyword = m.group().upper() if m else ""
    if keyword not in READ_KEYWORDS or (
        keyword == "PRAGMA" and (dialect != "sqlite" or "=" in code)
    ):
        shown = keyword or code[:20]
        raise SqlRefused(
            f"refused: quants sql only reads (SELECT, WITH, VALUES, TABLE, EXPLAIN, SHOW); "
            f"{shown!r} is not allowed"
        )
    return statements[0]
