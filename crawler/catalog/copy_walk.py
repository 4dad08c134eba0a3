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

#: Classes a shape may have for its copies to be walked class by class (two reads a class);
#: past that the run is ranked in SQL (crawler.ranking.copies.best_copies_sql).
_MAX_CLASSES = 32

#: A shape's copy classes, ascending: one index seek each (a loose index scan; the rows carry
#: a count so that both databases stop the recursion at :walk_max).
_CLASSES = (
    "WITH RECURSIVE walk(k, n) AS ("
    " SELECT MIN(copy_key), 1 FROM quants WHERE live = TRUE AND search_shape = :walk_shape"
    " UNION ALL SELECT (SELECT MIN(copy_key) FROM quants WHERE live = TRUE"
    " AND search_shape = :walk_shape AND copy_key > walk.k), walk.n + 1"
    " FROM walk WHERE walk.k IS NOT NULL AND walk.n <= :walk_max)"
    " SELECT k FROM walk WHERE k IS NOT NULL"
)
_UNCLASSED = (
    "SELECT 1 FROM quants WHERE live = TRUE AND search_shape = :walk_shape"
    " AND copy_key IS NULL LIMIT 1"
)
#: A class's quants that pass the request's filters (y: the index entry, q: the row).
_SOURCE = (
    " FROM quants y CROSS JOIN quants q JOIN repos r ON r.id = q.repo_pk"
    " JOIN memory_models m ON m.quant_id = q.id"
    " WHERE y.live = TRUE AND y.search_shape = :walk_shape AND y.copy_key = :walk_key"
    " AND q.id = y.id AND {where}"
)


def best_copy_ids(reader: Reader, w: Where, run: Sequence[str], copies: int) -> list[int] | None:
    """Ids of the quants of ``run`` (its shapes) that pass ``w``, less each copy class's quants
    that at least ``copies`` of its others beat on (size, downloads): the rows
    crawler.ranking.copies.best_copies_sql keeps, its classes taken within each shape (finer:
    the shape holds the MTP verdicts, copy_key the rest). None where a shape has a live quant
    without a class (a catalog not refilled since migration 0018, or no quality score: never
    left out) or more than _MAX_CLASSES classes: the caller ranks the run in SQL.

    Within a class the index holds the quants in (size, downloads) order: the first
    ``copies`` that pass ``w`` and every quant tied with the last of them are kept (RANK keeps
    ties); every other is beaten by at least ``copies``."""
    kept: list[int] = []
    for shape in run:
        args: dict[str, Any] = {"walk_shape": shape}
        if reader.rows(_UNCLASSED, args):
            return None
        classes = reader.rows(_CLASSES, {**args, "walk_max": _MAX_CLASSES})
        if len(classes) > _MAX_CLASSES:
            return None
        source = _SOURCE.format(where=w.sql)
        for (key,) in classes:
            found = {**w.params, **args, "walk_key": key, "walk_copies": copies}
            head = reader.rows(
                f"SELECT y.id, y.size_bytes, y.repo_downloads{source}"
                " ORDER BY y.size_bytes DESC, y.repo_downloads DESC LIMIT :walk_copies",
                found,
            )
            ids = {int(row[0]) for row in head}
            if len(head) == copies:
                edge = {"walk_size": head[-1][1], "walk_downloads": head[-1][2]}
                ties = reader.rows(
                    f"SELECT y.id{source}"
                    " AND y.size_bytes = :walk_size AND y.repo_downloads = :walk_downloads",
                    {**found, **edge},
                )
                ids.update(int(row[0]) for row in ties)
            kept.extend(ids)
    return kept
