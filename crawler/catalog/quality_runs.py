"""``--sort quality`` (and margin, ctx) read by shape on SQLite: a run's ids ordered from the
shape index first.

Only the rows ranking reaches are read whole, a batch at a time (as size_order does by size).
Details: docs/internals/catalog.md#quality_runs
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from crawler.catalog.candidates import PARTIAL_COLUMNS, STREAM_CHUNK, Where, desc_key
from crawler.catalog.reader import Reader, placeholders

__all__ = ["keyed_run", "quality_run"]

#: Rows completed at first (then four times more a batch, up to STREAM_CHUNK): ranking takes
#: its first ``--limit`` rows, the fit count at most 128.
_HEAD = 16


def quality_run(reader: Reader, w: Where, shapes: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    """The live quants of ``shapes`` that pass ``w``, in the quality read's order (quality,
    size, downloads, repo, path).

    Their ids first, from ix_quants_search_shape (live, search_shape, size_bytes,
    quality_score, repo_pk) and each one's repo (SQLite keeps the left table of a CROSS JOIN
    outermost): a shape's copies are often thousands, whose order is their repos' downloads,
    and sorting their ids costs far less than sorting their rows (5,500 copies at 1M quants:
    ~45 ms a read of the rows). Then the rows, a batch at a time, each batch ending where the
    order's key changes, so ties on (quality, size, downloads, repo) are completed and ordered
    here."""
    marks, names = placeholders("quality_shape", list(shapes))
    ids = (
        "SELECT y.id, y.quality_score, y.size_bytes, r.downloads, r.repo_id"
        " FROM quants y CROSS JOIN repos r"
        f" WHERE y.live = TRUE AND y.search_shape IN ({marks}) AND r.id = y.repo_pk"
        " ORDER BY y.quality_score DESC NULLS LAST, y.size_bytes DESC,"
        " r.downloads DESC NULLS LAST, r.repo_id"
    )
    batch: list[tuple[Any, ...]] = []
    size = _HEAD
    for item in reader.stream(ids, names, chunk=STREAM_CHUNK):
        if len(batch) >= size and tuple(item[1:]) != tuple(batch[-1][1:]):
            yield from _rows(reader, w, batch)
            batch, size = [], min(size * 4, STREAM_CHUNK)
        batch.append(item)
    yield from _rows(reader, w, batch)


def keyed_run(
    reader: Reader, w: Where, shapes: Sequence[str], keys: Mapping[str, float]
) -> Iterator[tuple[tuple[Any, ...], float]]:
    """(row, key) of the live quants of ``shapes`` that pass ``w``, in the order of a bounded
    sort whose key is a function of the shape (``keys``: each shape's, the shape listing's;
    crawler.catalog.ordered._EXACT_KEYS): key, then quality_run's order. Read as quality_run
    reads: the ids, their keys and tie-breaks from the shape index and the repos, then the rows
    ranking reaches, a batch at a time (6,000-9,000 copies of a shape at 1M quants, of which
    the fit count reads 128)."""
    marks, names = placeholders("keyed_shape", list(shapes))
    values = {f"keyed_value{i}": float(keys[shape]) for i, shape in enumerate(shapes)}
    arms = " ".join(f"WHEN :keyed_shape{i} THEN :keyed_value{i}" for i in range(len(shapes)))
    ids = (
        f"SELECT y.id, (CASE y.search_shape {arms} END) AS keyed, y.quality_score, y.size_bytes,"
        " r.downloads, r.repo_id FROM quants y CROSS JOIN repos r"
        f" WHERE y.live = TRUE AND y.search_shape IN ({marks}) AND r.id = y.repo_pk"
        " ORDER BY keyed DESC, y.quality_score DESC NULLS LAST, y.size_bytes DESC,"
        " r.downloads DESC NULLS LAST, r.repo_id"
    )
    batch: list[tuple[Any, ...]] = []
    size = _HEAD
    for item in reader.stream(ids, {**names, **values}, chunk=STREAM_CHUNK):
        if len(batch) >= size and tuple(item[1:]) != tuple(batch[-1][1:]):
            yield from _keyed_rows(reader, w, batch)
            batch, size = [], min(size * 4, STREAM_CHUNK)
        batch.append(item)
    yield from _keyed_rows(reader, w, batch)


def _keyed_rows(
    reader: Reader, w: Where, batch: list[tuple[Any, ...]]
) -> Iterator[tuple[tuple[Any, ...], float]]:
    """keyed_run's rows of a batch of (id, key, ...) items, in its order."""
    key_of = {item[0]: float(item[1]) for item in batch}
    rows = [(row, key_of[row[0]]) for row in _rows(reader, w, batch)]
    rows.sort(key=lambda rk: -rk[1])  # stable: quality_run's order within one key
    yield from rows


def _quality_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """The read's ORDER BY as a Python key (CANDIDATE_COLUMNS: 3 size, 17 downloads, 1 repo,
    2 path; 25 quality_score)."""
    return (desc_key(row[25]), -int(row[3]), desc_key(row[17]), row[1], row[2])


def _rows(reader: Reader, w: Where, batch: list[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    """The rows of a batch of ids that pass ``w``, in the read's order (the batch holds every
    tie of its last key, so sorting it here keeps the order across batches)."""
    if not batch:
        return
    marks, names = placeholders("quality_id", [item[0] for item in batch])
    # The ids outermost (a CROSS JOIN): with w's `q.live = TRUE` SQLite otherwise walks an
    # index of every live quant.
    sql = (
        f"{PARTIAL_COLUMNS} FROM quants y CROSS JOIN quants q"
        " JOIN repos r ON r.id = q.repo_pk JOIN memory_models m ON m.quant_id = q.id"
        f" WHERE y.id IN ({marks}) AND q.id = y.id AND {w.sql}"
    )
    yield from sorted(reader.rows(sql, {**w.params, **names}), key=_quality_key)
