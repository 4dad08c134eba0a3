"""The search shapes a broad name query can match, from migration 0015's search_shape_grams.

A shape lacking a piece of a token holds no quant the query matches: its quants are not read.
Details: docs/internals/catalog.md#name_shapes
"""

from __future__ import annotations

from crawler.catalog.reader import Reader, placeholders
from crawler.ranking.query import QueryMatcher

__all__ = ["name_grams", "name_shapes"]

_DIGITS = frozenset("0123456789")


def name_grams(matcher: QueryMatcher) -> tuple[str, ...]:
    """The 3-character pieces with an ASCII digit of the tokens the search's LIKE test requires
    in ``search_text`` (QueryMatcher.required_substrings): the pieces search_shape_grams keeps.
    A token of 3 characters or more with an ASCII digit has at least one; the others are left
    to the reads' own test."""
    grams = {
        tok[i : i + 3]
        for tok in matcher.required_substrings
        for i in range(len(tok) - 2)
        if _DIGITS.intersection(tok[i : i + 3])
    }
    return tuple(sorted(grams))


def name_shapes(reader: Reader, matcher: QueryMatcher) -> frozenset[str] | None:
    """Every search shape that may hold a quant ``matcher`` accepts: those whose quants' texts
    hold each of the query's pieces (name_grams), and those of quants with no stored text (too
    long: the matcher decides them). None when the query has no such piece (every shape may
    match).

    The table gains a shape's pieces in the transaction that writes its quants' text or shape
    and never loses any (migration 0015), so the set is exact or larger, never smaller."""
    grams = name_grams(matcher)
    if not grams:
        return None
    marks, params = placeholders("gram", grams)
    found = reader.rows(
        f"SELECT search_shape FROM search_shape_grams WHERE gram IN ({marks})"
        " GROUP BY search_shape HAVING COUNT(*) = :grams",
        {**params, "grams": len(grams)},
    )
    shapes = {str(r[0]) for r in found}
    shapes.update(
        str(r[0])
        for r in reader.rows(
            "SELECT DISTINCT search_shape FROM quants"
            " WHERE search_text IS NULL AND search_shape IS NOT NULL"
        )
    )
    return frozenset(shapes)
