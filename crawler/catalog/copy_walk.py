"""A run's best copies from ix_quants_copy_class: each shape's copy classes one seek each, each
class's quants best first, in place of ranking every copy of the run in SQL.
Details: docs/internals/catalog.md#copy_walk
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from crawler.catalog.candidates import Where
from crawler.catalog.reader import Reader

__all__ = ["best_copy_ids"]

#: Classes a shape may have for its copies to be walked class by class (a compound query of
#: as many parts); past that the run is ranked in SQL (crawler.ranking.copies.best_copies_sql).
_MAX_CLASSES = 32

#: Quants the walk may keep in all: the kept rows are then read by their ids (bound
#: parameters, which both databases cap: 32,766 on SQLite since 3.32,
#: https://www.sqlite.org/limits.html; 65,535 in PostgreSQL's Bind message, its parameter count
#: an Int16, https://www.postgresql.org/docs/current/protocol-message-formats.html). More
#: (copies tied on size and downloads, e.g. thousands with none) and the run is ranked in SQL.
_MAX_KEPT = 4096

#: A shape's copy classes, ascending: one index seek each (a loose index scan; the rows carry
#: a count so that both databases stop the recursion past :walk_max), then a NULL row if a live
#: quant of the shape has no class.
_CLASSES = (
    "WITH RECURSIVE walk(k, n) AS ("
    " SELECT MIN(copy_key), 1 FROM quants WHERE live = TRUE AND search_shape = :walk_shape"
    " UNION ALL SELECT (SELECT MIN(copy_key) FROM quants WHERE live = TRUE"
    " AND search_shape = :walk_shape AND copy_key > walk.k), walk.n + 1"
    " FROM walk WHERE walk.k IS NOT NULL AND walk.n <= :walk_max)"
    " SELECT k FROM walk WHERE k IS NOT NULL"
    " UNION ALL SELECT NULL FROM (SELECT 1 AS one FROM quants WHERE live = TRUE"
    " AND search_shape = :walk_shape AND copy_key IS NULL LIMIT 1) AS unclassed"
)
#: The quants of a shape that pass the request's filters (y: the index entry, q: the row).
_SOURCE = (
    " FROM quants y CROSS JOIN quants q JOIN repos r ON r.id = q.repo_pk"
    " JOIN memory_models m ON m.quant_id = q.id"
    " WHERE y.live = TRUE AND y.search_shape = :walk_shape AND q.id = y.id AND {where}"
)


def best_copy_ids(reader: Reader, w: Where, run: Sequence[str], copies: int) -> list[int] | None:
    """Ids of the quants of ``run`` (its shapes) that pass ``w``, less each copy class's quants
    that at least ``copies`` of its others beat on (size, downloads): the rows
    crawler.ranking.copies.best_copies_sql keeps, its classes taken within each shape (finer:
    the shape holds the MTP verdicts, copy_key the rest). None where a shape has a live quant
    without a class (a catalog not refilled since migration 0018, or no quality score: never
    left out), more than _MAX_CLASSES classes or more than _MAX_KEPT quants kept: the caller
    ranks the run in SQL.

    Within a class the index holds the quants in (size, downloads) order: the first
    ``copies`` that pass ``w`` and every quant tied with the last of them are kept (RANK keeps
    ties); every other is beaten by at least ``copies``. Three reads a shape at most: its
    classes, each class's first quants (one compound query), the ties of the full ones."""
    kept: list[int] = []
    for shape in run:
        args: dict[str, Any] = {**w.params, "walk_shape": shape, "walk_copies": copies}
        keys = [key for (key,) in reader.rows(_CLASSES, {**args, "walk_max": _MAX_CLASSES})]
        if None in keys or len(keys) > _MAX_CLASSES:
            return None
        if not keys:
            continue
        source = _SOURCE.format(where=w.sql)
        heads = _heads(reader.dialect, source, len(keys))
        args.update({f"walk_key{i}": key for i, key in enumerate(keys)})
        found: dict[int, list[tuple[Any, ...]]] = {}
        for row in reader.rows(heads, args):
            found.setdefault(int(row[0]), []).append(row)
        edges = []
        for i, rows in found.items():
            kept.extend(int(row[1]) for row in rows)
            if len(rows) == copies:  # full: its last quant's ties may lie beyond
                last = max(rows, key=lambda row: (-row[2], -row[3]))
                args.update({f"walk_size{i}": last[2], f"walk_downloads{i}": last[3]})
                edges.append(
                    f"(y.copy_key = :walk_key{i} AND y.size_bytes = :walk_size{i}"
                    f" AND y.repo_downloads = :walk_downloads{i})"
                )
        if edges:
            ties = reader.rows(f"SELECT y.id{source} AND ({' OR '.join(edges)})", args)
            kept.extend({int(row[0]) for row in ties} - set(kept))
        if len(kept) > _MAX_KEPT:
            return None
    return kept


def _heads(dialect: str, source: str, n_classes: int) -> str:
    """One statement for the first :walk_copies quants of each class (walk_class, id, size,
    downloads). PostgreSQL: a LATERAL subquery per row of the classes' VALUES, so the
    request's filter is planned once, not once per class (planning was most of this read's
    time: 3.7 ms a statement against 0.5 ms of execution on a 6,000-quant catalog). SQLite has no
    LATERAL: a compound query of one part per class."""

    def head(key: str, label: str = "") -> str:
        return (
            f"SELECT {label}y.id, y.size_bytes, y.repo_downloads{source} AND y.copy_key = {key}"
            " ORDER BY y.size_bytes DESC, y.repo_downloads DESC LIMIT :walk_copies"
        )

    if dialect == "postgresql":
        values = ", ".join(f"({i}, CAST(:walk_key{i} AS BIGINT))" for i in range(n_classes))
        return (
            "SELECT c.walk_class, h.id, h.size_bytes, h.repo_downloads"
            f" FROM (VALUES {values}) AS c(walk_class, walk_key)"
            f" CROSS JOIN LATERAL ({head('c.walk_key')}) AS h"
        )
    return " UNION ALL ".join(
        f"SELECT * FROM ({head(f':walk_key{i}', f'{i} AS walk_class, ')}) AS head{i}"
        for i in range(n_classes)
    )
