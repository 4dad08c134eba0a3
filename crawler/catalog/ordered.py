"""Streamed, ordered candidates for every --sort (the search's read path).

Read in chunks by a value or an upper bound of it, so ranking stops once nothing can rank higher.
Details: docs/internals/catalog.md#ordered
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

from crawler.catalog.candidates import (
    JOINED,
    PARTIAL_COLUMNS,
    STREAM_CHUNK,
    Where,
    bounded,
    desc_key,
    partial_candidate,
)
from crawler.catalog.name_index import by_ids, name_candidates
from crawler.catalog.name_shapes import name_shapes
from crawler.catalog.quality_runs import keyed_run
from crawler.catalog.reader import Reader, placeholders
from crawler.catalog.shape_runs import names_match, read_copies, read_runs
from crawler.catalog.size_order import ram_condition, size_by_shape
from crawler.ranking.bounds import bound_sql, ctx_bound_sql, margin_bound_sql
from crawler.ranking.copies import copy_class_sql, prunable
from crawler.ranking.model import (
    BOUNDED_SORTS,
    EARLY_STOP_SORTS,
    Budget,
    Candidate,
    Filters,
    RunSpec,
    mtp_by_speed,
)
from crawler.ranking.query import QueryMatcher
from crawler.ranking.speed_bound import speed_bound_sql

__all__ = ["stream_candidates"]

#: Rows of the first page of a computed order (margin, ctx); later pages grow eightfold. Each
#: page costs a scan of the index, so the first is large (its top-N sort costs little more).
_FIRST_PAGE = 2048

_ORDER = {
    "quality": "q.quality_score DESC NULLS LAST",
    "size": "q.size_bytes DESC",
    "downloads": "r.downloads DESC NULLS LAST",
    "updated": "r.last_modified DESC NULLS LAST",
}
#: The stored sort values that may be missing (they sort last).
_NULLABLE = {"quality": "q.quality_score", "downloads": "r.downloads", "updated": "r.last_modified"}
_PARTIAL = f"{PARTIAL_COLUMNS} FROM {JOINED}"
# Repo-level orders walk the repos' index and each repo's quants: SQLite keeps the left table of
# a CROSS JOIN outermost (without it, it sorts every candidate: ~0.8 s at 200k quants); for
# PostgreSQL it is an inner join like any other.
_BY_REPO = (
    f"{PARTIAL_COLUMNS} FROM repos r CROSS JOIN quants q JOIN memory_models m ON m.quant_id = q.id"
)


def stream_candidates(
    reader: Reader,
    spec: RunSpec,
    budget: Budget,
    filters: Filters,
    sort: str,
    *,
    by_shape: bool = True,
    by_name: bool = True,
    copies: int | None = None,
    memo: dict[Any, Any] | None = None,
) -> Generator[Candidate, None, None]:
    """Partial candidates in crawler.ranking.order.pre_key order, read lazily.

    Complete them with crawler.catalog.candidates.materializer; close the iterator when
    done. ``--sort speed`` needs ``budget.bandwidth_gb_s``. ``by_shape`` False reads quant by
    quant also where shapes serve the sort, ``by_name`` False never reads a name query's quants
    through the name index nor its shapes (the tests compare the reads). ``copies`` (ranking's
    limit): speed, margin and ctx read by shape leave out the quants that at least this many of
    their copies beat (crawler.ranking.copies), so the stream no longer holds every candidate.
    ``memo``: one dict for the streams of one search in one read transaction, which may then
    share what they read (crawler.catalog.quality_runs.keyed_run).
    """
    if sort not in EARLY_STOP_SORTS + BOUNDED_SORTS:
        raise ValueError(f"unknown sort {sort!r}")
    # The bound is not true where fit_* are NULL (memory rules not modelled).
    w = bounded(filters, spec, budget)
    matcher = filters.matcher()
    reader.without_jit()
    named = _by_name(reader, w, matcher, spec, budget, sort) if matcher and by_name else None
    if named is not None:  # the quants the name index finds, if few
        yield from _matching(named, matcher)
        return
    # A broad name query reads only the shapes whose quants' texts hold its pieces
    # (crawler.catalog.name_shapes); None: every shape may match.
    by_shapes = by_shape and sort in (*_SHAPE_SORTS, "size")
    only = name_shapes(reader, matcher) if matcher and by_name and by_shapes else None
    # Without those, with a name query `quality` walks its index testing the name on the
    # entries: shape by shape it would fetch every row of the best shapes to test it (slower at
    # 1M quants). The bounded sorts read shape by shape either way: per quant, each page computes
    # the bound on every index entry. `size` reads the shapes that pass the bound, without a
    # name query only (each shape's read would test the name on every table row of the shape).
    unnamed = matcher is None or only is not None
    shaped = by_shape and sort in _SHAPE_SORTS and (unnamed or sort in BOUNDED_SORTS)
    if copies is not None and not (sort in _COPY_SORTS and prunable(filters, spec)):
        copies = None
    by_ids = matcher is None or only is not None
    rows = (
        _by_shape(
            reader, w, spec, budget, sort, only, copies, by_ids=by_ids, memo=memo, matcher=matcher
        )
        if shaped
        else None
    )
    if rows is None and by_shape and sort == "size" and unnamed:
        rows = size_by_shape(reader, w, spec, budget, only)
    if rows is None:
        if sort in BOUNDED_SORTS:
            rows = _computed_order(reader, w, spec, budget, sort)
        else:
            rows = ((row, None) for row in _walk(reader, w, sort))
    yield from _matching(rows, matcher)


def _matching(
    rows: Iterator[tuple[tuple[Any, ...], float | None]], matcher: QueryMatcher | None
) -> Iterator[Candidate]:
    """Partial candidates of the (row, bound) pairs whose names the query's matcher accepts."""
    for row, hint in rows:
        if matcher is not None and not names_match(matcher, row):
            continue
        yield partial_candidate(row, hint)


#: A name query whose index finds at most this many quants reads them all, ordered by the
#: database (~3.5 us a quant on SQLite, read twice a search: ranking and the fit count); the
#: rows ranking does not reach are never converted. More, and the reads by the sort's order
#: (which test names as they go) were as fast or faster at 200k quants.
_BY_NAME_MAX = 4000


def _by_name(
    reader: Reader, w: Where, matcher: QueryMatcher, spec: RunSpec, budget: Budget, sort: str
) -> Iterator[tuple[tuple[Any, ...], float | None]] | None:
    """(row, bound) of a name query's quants in pre_key order (then repo and path), from the
    quants the name index finds (crawler.catalog.name_index); None when it finds too many or
    cannot serve the query (the other reads then test names as they go).

    The rows pass the same SQL as on the other reads (filters, memory bound, the LIKE test) and
    the caller's matcher; a bounded sort's bound is computed on each row."""
    ids = name_candidates(reader, matcher, _BY_NAME_MAX)
    if ids is None:
        return None
    hinted = sort in BOUNDED_SORTS
    if hinted:
        key, params = _BOUND_SQL[sort](spec, budget)
        order = [f"{key} DESC", *(_ORDER[k] for k in ("quality", "size", "downloads"))]
    else:
        key, params = "NULL", {}
        tie_breaks = ("quality", "size", "downloads")
        order = [_ORDER[k] for k in (sort, *(t for t in tie_breaks if t != sort))]
    joined, in_ids, id_params = by_ids(reader, JOINED, ids)
    sql = (
        f"{PARTIAL_COLUMNS}, {key} AS name_key FROM {joined} WHERE {in_ids} AND {w.sql}"
        f" ORDER BY {', '.join(order)}, r.repo_id, q.path"
    )
    rows = reader.stream(sql, {**w.params, **params, **id_params}, chunk=STREAM_CHUNK)
    return ((row[:-1], float(row[-1]) if hinted and row[-1] is not None else None) for row in rows)


def _walk(reader: Reader, w: Where, sort: str) -> Iterator[tuple[Any, ...]]:
    """Rows in the order of a stored column (an index walk; the database does not sort)."""
    tie_breaks = ("quality", "size", "downloads")
    order = [_ORDER[k] for k in (sort, *(t for t in tie_breaks if t != sort))]
    column = _NULLABLE.get(sort)
    if column is not None:
        # Two reads, so each is one index-ordered walk: the values (plain DESC: on PostgreSQL
        # that is NULLS FIRST, the order a backward scan of an index gives, and there are no
        # NULLs in this part), then the quants without one. One read ordered NULLS LAST makes
        # PostgreSQL sort every candidate (~0.5 s at 200k quants).
        parts = [
            (f"{column} IS NOT NULL", [f"{column} DESC", *order[1:]]),
            (f"{column} IS NULL", order[1:]),
        ]
    else:
        parts = [("TRUE", order)]
    by_repo = sort in ("downloads", "updated")
    for part, part_order in parts:
        sql = (
            f"{_BY_REPO} WHERE q.repo_pk = r.id AND" if by_repo else f"{_PARTIAL} WHERE"
        ) + f" {w.sql} AND {part} ORDER BY {', '.join(part_order)}, r.repo_id, q.path"
        yield from reader.stream(sql, w.params, chunk=STREAM_CHUNK)


#: Bounded sorts whose shape reads leave out the copies that cannot enter the answer: their
#: bound ties or beats the best results' values over thousands of copies.
_COPY_SORTS = ("speed", "margin", "ctx")
#: Sorts whose runs are read whole until ranking has read this many times ``copies`` rows of
#: one run without stopping. ctx's bound is often tight (ranking stops within the first rows),
#: and ranking the copies of its long runs of equal bounds from the first would cost more than
#: it saves (280 against 87 ms on the 1M generator catalog); where it is not (a model whose
#: layers or experts the tier keeps in RAM), ranking would read thousands of copies.
_LAZY_COPIES = {"ctx": 4}
#: Sorts whose order is a function of the shape (crawler.catalog.candidates.SHAPE_COLUMNS)
#: first: they are read shape by shape.
_SHAPE_SORTS = ("quality", *BOUNDED_SORTS)
#: Most shapes one read of a run of equal sort keys names (else the search reads per quant).
_MAX_SHAPES_PER_READ = 4000
#: Shapes whose sort keys differ by less than this (relative) are read together: SQLite writes
#: 15 significant digits into the shape text, so quants of one shape may differ past them.
_SAME_KEY = 1e-9
#: The distinct shapes of live quants: a loose index scan (one seek of ix_quants_search_shape
#: a shape), then one row of each shape for its columns.
_SHAPES = (
    "WITH RECURSIVE s(k) AS ("
    "SELECT MIN(search_shape) FROM quants WHERE live = TRUE"
    " UNION ALL SELECT (SELECT MIN(x.search_shape) FROM quants x"
    " WHERE x.live = TRUE AND x.search_shape > s.k) FROM s WHERE s.k IS NOT NULL)"
    " SELECT q.search_shape, {key} AS shape_key, q.quality_score FROM s JOIN quants q ON q.id ="
    " (SELECT y.id FROM quants y WHERE y.live = TRUE AND y.search_shape = s.k LIMIT 1)"
    " WHERE {bound} <= :bound_limit{ram}"
)


def _by_shape(
    reader: Reader,
    w: Where,
    spec: RunSpec,
    budget: Budget,
    sort: str,
    only: frozenset[str] | None = None,
    copies: int | None = None,
    *,
    by_ids: bool = True,
    memo: dict[Any, Any] | None = None,
    matcher: QueryMatcher | None = None,
) -> Iterator[tuple[tuple[Any, ...], float | None]] | None:
    """(row, bound) in pre_key order, read shape by shape (of ``only``, if given: the others
    hold no row ``w`` passes); None when a live quant has no shape yet (the per-quant reads
    serve it).

    The memory bound and the sort key (quality, or the bound of speed, margin, ctx) depend only
    on the shape's columns, so the database computes them once per distinct shape; ranking then
    reads the quants of the best shapes only, each run of equal keys in the rest of the order
    (quality, size, downloads, repo, path), so it can stop inside a run of copies. ``by_ids``
    False: no run is read ids first (with a name query and every shape, one whose copies the
    name rules out would be read in many batches of none). ``copies``: see read_copies, with
    the name query's ``matcher``."""
    if reader.rows("SELECT 1 FROM quants WHERE live = TRUE AND search_shape IS NULL LIMIT 1"):
        return None
    expr, params = bound_sql(spec, budget)
    key, key_params = (
        ("q.quality_score", {}) if sort == "quality" else _BOUND_SQL[sort](spec, budget)
    )
    params = {**params, **key_params}
    ram, ram_params = ram_condition(spec, budget)
    shapes = reader.rows(_SHAPES.format(key=key, bound=expr, ram=ram), {**params, **ram_params})
    if only is not None:
        shapes = [s for s in shapes if s[0] in only]
    shapes.sort(key=lambda s: (*desc_key(s[1]), *desc_key(s[2])))
    runs: list[list[str]] = []
    prev: tuple[Any, Any] | None = None
    for shape, value, quality in shapes:
        if prev is None or not (_close(prev[0], value) and _close(prev[1], quality)):
            runs.append([])
        runs[-1].append(shape)
        prev = (value, quality)
    if any(len(run) > _MAX_SHAPES_PER_READ for run in runs):
        return None
    exact = {shape: value for shape, value, _q in shapes} if sort in _EXACT_KEYS else None
    lazy = _LAZY_COPIES.get(sort)
    # A name query's test is Python's: its copies are left out by read_copies only.
    by_classes = copies is not None and lazy is None and matcher is None
    if by_classes and _classes_by_ids(reader, w, spec, budget, exact):
        assert exact is not None and copies is not None
        return _keyed_copies(reader, w, runs, exact, copies, memo)
    keys = {shape: value for shape, value, _quality in shapes} if by_ids else {}
    if copies is not None:
        partition, copy_params = copy_class_sql(sort, spec, budget)
        params = {**params, **copy_params, "copies": copies}
        return read_copies(
            reader, w, params, key, runs, keys, partition, matcher, lazy and lazy * copies,
            exact=exact, memo=memo,
        )  # fmt: skip
    return read_runs(
        reader, w, params, key, runs, keys, hinted=sort != "quality", exact=exact, memo=memo
    )


#: Sorts whose key (margin_bound_sql, ctx_bound_sql) reads only integer and boolean shape
#: columns, which the shape text holds exactly: a shape's quants all have its key, so a run
#: reads the key the shape listing computed instead of computing it on every row (the bound's
#: SQL is long: ~1 us a row, 8,642 copies in one run at 1M quants). Not speed: it reads
#: floats (fit_type_eff, fit_verify_experts), which the text may round.
_EXACT_KEYS = ("margin", "ctx")


def _classes_by_ids(
    reader: Reader, w: Where, spec: RunSpec, budget: Budget, exact: dict[str, Any] | None
) -> bool:
    """Whether a run's copies are left out from its ids (quality_runs.keyed_run with copies):
    SQLite, an exact key for every shape, and no filter but the live flag and the memory bound,
    which every live quant of a listed shape passes (so the ids need no table row). Not where
    MTP auto weighs heads by speed: its classes (the memory model's) would hold quants whose
    heads' choices differ."""
    return (
        reader.dialect == "sqlite"
        and not mtp_by_speed(spec, budget)
        and exact is not None
        and all(v is not None for v in exact.values())
        and w.sql == bounded(Filters(), spec, budget).sql
    )


def _keyed_copies(
    reader: Reader,
    w: Where,
    runs: list[list[str]],
    exact: dict[str, Any],
    copies: int,
    memo: dict[Any, Any] | None,
) -> Iterator[tuple[tuple[Any, ...], float | None]]:
    for run in runs:
        yield from keyed_run(reader, w, run, exact, copies, memo)


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(float(a) - float(b)) <= _SAME_KEY * max(abs(float(a)), abs(float(b)))


def _computed_order(
    reader: Reader, w: Where, spec: RunSpec, budget: Budget, sort: str
) -> Iterator[tuple[tuple[Any, ...], float | None]]:
    """(row, bound) by a bound the database computes per request, in pre_key order: pages of
    quant ids in (bound, quality, size) order from the quants alone, then each run of equal
    (bound, quality, size) completed and ordered by downloads, repo and path here (ordering by
    the repo's downloads in SQL would join every quant of the catalog to its repo)."""
    key, params = _BOUND_SQL[sort](spec, budget)
    repo_join = " JOIN repos r ON r.id = q.repo_pk" if w.repo else ""
    head = (
        f"SELECT q.id, {key} AS bound_key, q.quality_score, q.size_bytes FROM quants q{repo_join}"
        f" WHERE {w.sql} ORDER BY bound_key DESC, q.quality_score DESC NULLS LAST,"
        " q.size_bytes DESC, q.id LIMIT :page_limit OFFSET :page_offset"
    )

    def pages() -> Iterator[tuple[Any, ...]]:
        offset, size = 0, _FIRST_PAGE
        while True:
            page = reader.rows(
                head, {**w.params, **params, "page_limit": size, "page_offset": offset}
            )
            yield from page
            if len(page) < size:
                return
            offset, size = offset + size, size * 8

    sent: set[int] = set()  # pages are read apart: never send a quant twice
    run: list[tuple[Any, ...]] = []
    for item in pages():
        if item[0] in sent:
            continue
        sent.add(item[0])
        if run and tuple(item[1:]) != tuple(run[0][1:]):
            yield from _completed_run(reader, run)
            run = []
        run.append(item)
    yield from _completed_run(reader, run)


def _completed_run(
    reader: Reader, run: list[tuple[Any, ...]]
) -> Iterator[tuple[tuple[Any, ...], float | None]]:
    """The rows of a run of equal (bound, quality, size), by downloads (high first, missing
    last), repo and path: the rest of pre_key, then ranking's final order."""
    found: dict[int, tuple[Any, ...]] = {}
    for i in range(0, len(run), STREAM_CHUNK):
        marks, ids = placeholders("id", [item[0] for item in run[i : i + STREAM_CHUNK]])
        found.update(
            (row[0], row) for row in reader.rows(f"{_PARTIAL} WHERE q.id IN ({marks})", ids)
        )
    rows = [(found[item[0]], float(item[1])) for item in run if item[0] in found]
    # CANDIDATE_COLUMNS: 1 repo_id, 2 path, 17 downloads
    rows.sort(key=lambda rb: (rb[0][17] is None, -(rb[0][17] or 0), rb[0][1], rb[0][2]))
    yield from rows


_BOUND_SQL = {"margin": margin_bound_sql, "ctx": ctx_bound_sql, "speed": speed_bound_sql}
