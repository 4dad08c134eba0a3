"""``--sort size`` read by search shape: the shapes that pass the memory bound, merged by size.

The memory bound reads a quant's shape only, so its quants pass or fail it together.
Details: docs/internals/catalog.md#size_order
"""

from __future__ import annotations

import heapq
from collections.abc import Generator, Iterator
from typing import Any

from crawler.catalog.candidates import PARTIAL_COLUMNS, STREAM_CHUNK, Where, desc_key
from crawler.catalog.reader import Reader, placeholders
from crawler.ranking.bounds import bound_sql, ram_bound_sql
from crawler.ranking.model import Budget, RunSpec

__all__ = ["ram_condition", "size_by_shape"]


#: The distinct shapes of live quants that may pass the memory bound, each with its largest
#: live quant: a loose index scan (as crawler.catalog.ordered lists shapes), and one seek of
#: ix_quants_search_shape (live, search_shape, size_bytes) for the size. The bound is tested
#: on one quant of the shape with a relative slack (its copies may differ past the 15 digits of
#: the shape text); the reads of the shape's quants test it exactly.
_SIZE_SHAPES = (
    "WITH RECURSIVE s(k) AS ("
    "SELECT MIN(search_shape) FROM quants WHERE live = TRUE"
    " UNION ALL SELECT (SELECT MIN(x.search_shape) FROM quants x"
    " WHERE x.live = TRUE AND x.search_shape > s.k) FROM s WHERE s.k IS NOT NULL)"
    " SELECT q.search_shape, (SELECT MAX(z.size_bytes) FROM quants z"
    " WHERE z.live = TRUE AND z.search_shape = s.k) FROM s JOIN quants q ON q.id ="
    " (SELECT y.id FROM quants y WHERE y.live = TRUE AND y.search_shape = s.k LIMIT 1)"
    " WHERE {bound} <= :shape_limit{ram}"
)
#: Relative slack of the per-shape bound test (SQLite writes 15 significant digits).
_SHAPE_SLACK = 1e-9


def ram_condition(spec: RunSpec, budget: Budget) -> tuple[str, dict[str, Any]]:
    """(" AND condition", params) of crawler.ranking.bounds.ram_bound_sql for the shape
    listings, or nothing. It reads shape columns only, so it is tested once per shape; the
    per-quant reads leave it to the estimate (there it would read a column the walks' indexes
    do not cover, on every entry)."""
    found = ram_bound_sql(spec, budget)
    if found is None:
        return "", {}
    return f" AND {found[0]}", found[1]


#: Rows of a shape completed at first (then four times more a batch, up to STREAM_CHUNK):
#: most shapes opened by a size search give a few rows before another shape's are larger.
_SIZE_HEAD = 16


def size_by_shape(
    reader: Reader, w: Where, spec: RunSpec, budget: Budget, only: frozenset[str] | None = None
) -> Iterator[tuple[tuple[Any, ...], float | None]] | None:
    """(row, None) in ``--sort size`` order (size, quality, downloads, repo, path), read by
    shape (of ``only``, if given: the others hold no row ``w`` passes); None when a live quant
    has no shape yet (the size walk serves it).

    The memory bound does not read the file size: it is a function of the shape alone
    (crawler.ranking.bounds.bound_sql reads only the shape's fit_* columns), so a shape's
    quants pass or fail it together. The size walk tests every index entry above the first
    quant that fits (at 1M quants, hundreds of thousands); here only the shapes that pass are
    read, each from its largest quant down, merged by size."""
    if reader.rows("SELECT 1 FROM quants WHERE live = TRUE AND search_shape IS NULL LIMIT 1"):
        return None
    expr, params = bound_sql(spec, budget)
    limit = params["bound_limit"]
    ram, ram_params = ram_condition(spec, budget)
    params = {**params, **ram_params, "shape_limit": limit + abs(limit) * _SHAPE_SLACK}
    shapes = [
        (str(s), int(m))
        for s, m in reader.rows(_SIZE_SHAPES.format(bound=expr, ram=ram), params)
        if m is not None and (only is None or s in only)
    ]
    return ((row, None) for row in _merged_by_size(reader, w, shapes))


def _merged_by_size(
    reader: Reader, w: Where, shapes: list[tuple[str, int]]
) -> Iterator[tuple[Any, ...]]:
    """The live quants of ``shapes`` (shape, largest size) that pass ``w``, merged in size
    order. A shape is read only once its largest size is the next in order, and only as far
    as the merge goes."""
    # Entries (key, n, shape, row or None): an unopened shape's key (-largest,) sorts before
    # every row of that size, so it is opened before any such row is sent.
    heap: list[tuple[tuple[Any, ...], int, str, tuple[Any, ...] | None]] = [
        ((-largest,), i, shape, None) for i, (shape, largest) in enumerate(shapes)
    ]
    heapq.heapify(heap)
    n = len(heap)
    streams: dict[str, Generator[tuple[Any, ...], None, None]] = {}
    if heap:
        reader.for_short_reads()
    try:
        while heap:
            _key, _n, shape, row = heapq.heappop(heap)
            if row is not None:
                yield row
            else:
                streams[shape] = _shape_by_size(reader, w, shape)
            following = next(streams[shape], None)
            if following is not None:
                n += 1
                heapq.heappush(heap, (_size_key(following), n, shape, following))
    finally:
        for stream in streams.values():
            stream.close()


def _size_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """The size read's ORDER BY as a Python key (CANDIDATE_COLUMNS: 3 size, 17 downloads,
    1 repo, 2 path; 25 quality_score). Ties on size, quality and downloads may come in either
    order (ranking reads every tie of pre_key)."""
    return (-int(row[3]), desc_key(row[25]), desc_key(row[17]), row[1], row[2])


def _shape_by_size(reader: Reader, w: Where, shape: str) -> Generator[tuple[Any, ...], None, None]:
    """One shape's quants that pass ``w`` in size order.

    Its ids first, from ix_quants_search_shape (live, search_shape, size_bytes, quality_score,
    repo_pk) and each one's repo (SQLite keeps the left table of a CROSS JOIN outermost): a
    shape's copies are often thousands of one size, whose order is their repos' downloads, and
    sorting their ids is ~7 times cheaper than sorting their rows (19,438 copies at 1M quants:
    7 ms, not 54). Then the rows, a batch at a time, each batch ending where the order's key
    changes, so ties on (size, quality, downloads, repo) are completed and ordered here."""
    ids = (
        "SELECT y.id, y.size_bytes, y.quality_score, r.downloads, r.repo_id"
        " FROM quants y CROSS JOIN repos r"
        " WHERE y.live = TRUE AND y.search_shape = :size_shape AND r.id = y.repo_pk"
        " ORDER BY y.size_bytes DESC, y.quality_score DESC NULLS LAST,"
        " r.downloads DESC NULLS LAST, r.repo_id"
    )
    batch: list[tuple[Any, ...]] = []
    size = _SIZE_HEAD
    for item in reader.stream(ids, {"size_shape": shape}, chunk=STREAM_CHUNK):
        if len(batch) >= size and tuple(item[1:]) != tuple(batch[-1][1:]):
            yield from _size_rows(reader, w, batch)
            batch, size = [], min(size * 4, STREAM_CHUNK)
        batch.append(item)
    yield from _size_rows(reader, w, batch)


def _size_rows(reader: Reader, w: Where, batch: list[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    """The rows of a batch of ids that pass ``w``, in the size read's order (the batch holds
    every tie of its last key, so sorting it here keeps the order across batches)."""
    if not batch:
        return
    marks, names = placeholders("size_id", [item[0] for item in batch])
    # The ids outermost (a CROSS JOIN): with w's `q.live = TRUE` SQLite otherwise walks an
    # index of every live quant (120 ms a batch at 1M quants).
    sql = (
        f"{PARTIAL_COLUMNS} FROM quants y CROSS JOIN quants q"
        " JOIN repos r ON r.id = q.repo_pk JOIN memory_models m ON m.quant_id = q.id"
        f" WHERE y.id IN ({marks}) AND q.id = y.id AND {w.sql}"
    )
    yield from sorted(reader.rows(sql, {**w.params, **names}), key=_size_key)
