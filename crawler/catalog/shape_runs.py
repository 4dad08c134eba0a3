"""A search shape's runs of equal sort keys read from the catalog (the bounded sorts' rows,
whole or less the copies ranking cannot reach): the rows crawler.catalog.ordered streams.
Details: docs/internals/catalog.md#shape_runs
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

from crawler.catalog.candidates import JOINED, PARTIAL_COLUMNS, STREAM_CHUNK, Where
from crawler.catalog.copy_walk import best_copy_ids
from crawler.catalog.quality_runs import keyed_run, quality_run
from crawler.catalog.reader import Reader, placeholders
from crawler.catalog.size_order import shape_by_size
from crawler.ranking.copies import best_copies_sql
from crawler.ranking.query import QueryMatcher

__all__ = ["BY_IDS", "names_match", "read_copies", "read_runs", "run_key"]


def run_key(
    run: list[str], exact: dict[str, Any], alias: str = "y"
) -> tuple[str, dict[str, Any]] | None:
    """The key of a run's rows from their shapes' keys (``alias``: the row's index entry or
    quant); None when a shape has none."""
    if any(exact.get(shape) is None for shape in run):
        return None
    params = {f"run_key{i}": float(exact[shape]) for i, shape in enumerate(run)}
    if len(run) == 1:
        return "CAST(:run_key0 AS DOUBLE PRECISION)", params
    arms = " ".join(f"WHEN :shape{i} THEN :run_key{i}" for i in range(len(run)))
    return f"(CASE {alias}.search_shape {arms} END)", params


#: Databases whose long single-shape runs are read ids first (crawler.catalog.size_order).
BY_IDS = ("postgresql",)


def read_runs(
    reader: Reader,
    w: Where,
    params: dict[str, Any],
    key: str,
    runs: list[list[str]],
    keys: dict[str, Any],
    *,
    hinted: bool,
    exact: dict[str, Any] | None = None,
    memo: dict[Any, Any] | None = None,
) -> Generator[tuple[tuple[Any, ...], float | None], None, None]:
    # ``keys``: the sort key of each shape a run of its own may read ids first (BY_IDS).
    # PostgreSQL reads a stream through a server-side cursor: three round trips a read, and a
    # statement the driver cannot prepare. Once a run has come back in under one chunk, the next
    # runs are read with a plain query of at most one chunk (LIMIT), and only a run that fills
    # it streams the rest (OFFSET): the same rows in the same order. Long runs (a catalog of
    # many copies) keep the stream alone.
    short = heads = False
    for run in runs:
        if not hinted and reader.dialect == "sqlite":
            # `quality` (its key is stored): the run's ids from the shape index, then only the
            # rows ranking reaches (crawler.catalog.quality_runs).
            yield from ((row, None) for row in quality_run(reader, w, run))
            continue
        if reader.dialect == "sqlite" and keys and exact is not None:
            # margin, ctx: each shape's key is exact (_EXACT_KEYS), so the run's order is its
            # ids' (crawler.catalog.quality_runs.keyed_run): only the rows ranking reaches.
            yield from keyed_run(reader, w, run, exact, memo=memo)
            continue
        if reader.dialect in BY_IDS and not short and len(run) == 1 and run[0] in keys:
            # One shape's quants share its key (PostgreSQL writes a float's shortest exact text:
            # equal text, equal values) and its quality: its order is size_order's. Its ids come
            # from the shape index alone and its rows a batch at a time, where one read of every
            # row joined to its memory model (~6,000 copies of a shape at 1M quants) takes
            # ~100 ms before the first row.
            if not heads:
                reader.for_short_reads()
                heads = True
            hint = float(keys[run[0]]) if hinted else None
            read = 0
            for row in shape_by_size(reader, w, run[0]):
                read += 1
                yield row, hint
            short = read < STREAM_CHUNK
            continue
        keyed = run_key(run, exact) if exact is not None else None
        row_key, key_params = keyed if keyed is not None else (key, {})
        source, names = run_source(w, run)
        sql = (
            f"{PARTIAL_COLUMNS}, {row_key} AS shape_key FROM {source} ORDER BY shape_key DESC,"
            " q.quality_score DESC NULLS LAST, q.size_bytes DESC, r.downloads DESC NULLS LAST,"
            " r.repo_id, q.path"
        )
        args = {**w.params, **params, **names, **key_params}
        rows: Iterator[tuple[Any, ...]]
        if short and reader.dialect == "postgresql":
            if not heads:
                reader.for_short_reads()
                heads = True
            rows = head_then_rest(reader, sql, args)
        else:
            rows = reader.stream(sql, args, chunk=STREAM_CHUNK)
        read = 0
        for row in rows:
            read += 1
            yield row[:-1], (float(row[-1]) if hinted else None)  # the rows end on the key
        short = read < STREAM_CHUNK


def run_source(w: Where, run: list[str]) -> tuple[str, dict[str, str]]:
    """FROM and WHERE of a run's quants (the shapes in ``run``), and the shapes' parameters.
    The shapes' quants come from their index first (SQLite keeps the left table of a CROSS JOIN
    outermost; otherwise it walks a sort index and tests every entry)."""
    marks, names = placeholders("shape", run)
    source = (
        "quants y CROSS JOIN quants q"
        " JOIN repos r ON r.id = q.repo_pk JOIN memory_models m ON m.quant_id = q.id"
        f" WHERE y.live = TRUE AND y.search_shape IN ({marks}) AND q.id = y.id AND {w.sql}"
    )
    return source, names


def read_copies(
    reader: Reader,
    w: Where,
    params: dict[str, Any],
    key: str,
    runs: list[list[str]],
    keys: dict[str, Any],
    partition: str,
    matcher: QueryMatcher | None,
    lazy: int | None,
    *,
    exact: dict[str, Any] | None = None,
    memo: dict[Any, Any] | None = None,
) -> Iterator[tuple[tuple[Any, ...], float | None]]:
    """read_runs less each copy class's quants (``partition``) that ``:copies`` of its others
    beat (crawler.ranking.copies.best_copies_sql): best_of_run's read of each run, or, where it
    cannot tell (a name query that rules out one of the copies it kept), the whole run. With
    ``lazy``, the runs are read whole until ranking has read that many rows of one."""
    # PostgreSQL: the windows' reads are plain queries (no cursor) planned for their own
    # parameters, without parallel workers, as the runs' reads were as streams.
    reader.for_short_reads()
    for run in runs:
        if lazy is None:
            best = best_of_run(reader, w, params, key, run, partition, matcher, exact)
            yield from (
                best
                if best is not None
                else read_runs(
                    reader, w, params, key, [run], keys, hinted=True, exact=exact, memo=memo
                )
            )
            continue
        whole = read_runs(reader, w, params, key, [run], keys, hinted=True, exact=exact, memo=memo)
        sent: set[int] = set()
        for row, hint in whole:
            if len(sent) == lazy:  # ranking did not stop within the run's first rows
                lazy = None
                best = best_of_run(reader, w, params, key, run, partition, matcher, exact)
                if best is not None:
                    whole.close()
                    # Same order, fewer rows: those not sent yet (all of the run's rows up
                    # to here were).
                    yield from (item for item in best if item[0][0] not in sent)
                    break
            if lazy is not None:
                sent.add(row[0])
            yield row, hint


def best_of_run(
    reader: Reader,
    w: Where,
    params: dict[str, Any],
    key: str,
    run: list[str],
    partition: str,
    matcher: QueryMatcher | None,
    exact: dict[str, Any] | None,
) -> list[tuple[tuple[Any, ...], float]] | None:
    """(row, bound) of a run's quants less each copy class's that ``:copies`` of its others
    beat, in the run's order; None when a name query's ``matcher`` rules out one of them. The
    kept ids from crawler.catalog.copy_walk (its stored classes), else from the window over
    the run (``partition``'s classes).

    A copy left out ranks below at least ``:copies`` of its class's quants, all of them read
    here: with no name query, or one that matches all of them, they are ranking's candidates,
    so the copy cannot enter the answer. A query that rules one out may need a copy left out in
    its place (its name test is Python's: the database cannot tell which)."""
    # The columns are read for the kept quants only, named q (not their index entries y).
    keyed = run_key(run, exact, "q") if exact is not None else None
    row_key, key_params = keyed if keyed is not None else (key, {})
    columns = f"{PARTIAL_COLUMNS}, {row_key} AS shape_key"
    source, names = run_source(w, run)  # the key's CASE names the run's shapes
    ids = best_copy_ids(reader, w, run, int(params["copies"]))
    if ids is not None:
        if not ids:
            return []
        marks, id_names = placeholders("best_id", ids)
        names = {**names, **id_names}
        sql = (
            f"{columns} FROM quants y CROSS JOIN {JOINED} WHERE y.id IN ({marks})"
            f" AND q.id = y.id AND {w.sql} ORDER BY shape_key DESC,"
            " q.quality_score DESC NULLS LAST, q.size_bytes DESC, r.downloads DESC NULLS LAST,"
            " r.repo_id, q.path"
        )
        tail = 1  # the rows end on the key
    else:
        order = (
            "c.shape_key DESC, c.quality_score DESC NULLS LAST, c.size_bytes DESC,"
            " c.downloads DESC NULLS LAST, c.repo_id, c.path"
        )
        sql = best_copies_sql(columns, source, JOINED, partition, order)
        tail = 2  # the rows end on the key and the copy's rank
    rows = reader.rows(sql, {**w.params, **params, **names, **key_params})
    if matcher is not None and not all(names_match(matcher, row) for row in rows):
        return None
    return [(row[:-tail], float(row[-tail])) for row in rows]


def names_match(matcher: QueryMatcher, row: tuple[Any, ...]) -> bool:
    """Whether ``matcher`` accepts the names of a row that starts with CANDIDATE_COLUMNS."""
    return matcher.matches_names(row[1], row[6], row[2], row[4], row[5])


def head_then_rest(reader: Reader, sql: str, args: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    """The rows of ``sql``: one chunk by a plain query, then, only if it came back full, the
    rest streamed. The order is total (it ends on repo and path, unique for a quant) and the read
    transaction one snapshot, so OFFSET resumes exactly where LIMIT stopped."""
    args = {**args, "run_head": STREAM_CHUNK}
    head = reader.rows(f"{sql} LIMIT :run_head", args)
    yield from head
    if len(head) == STREAM_CHUNK:
        yield from reader.stream(f"{sql} OFFSET :run_head", args, chunk=STREAM_CHUNK)
