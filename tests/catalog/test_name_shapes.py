"""A broad name query read by the shapes that may hold it (migration 0015: search_shape_grams)
against the reads without it, on SQLite and PostgreSQL: same rows in the same order and the
same fit count for every sort and tier, the shapes a superset of those matched after every
write, migration down and up.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import delete, select, text, update

from bench.bench_search_hub import SORTS, TIERS, build
from crawler.catalog import Catalog
from crawler.catalog import ordered as ordered_module
from crawler.catalog.candidates import materializer
from crawler.catalog.name_shapes import name_shapes
from crawler.catalog.ordered import stream_candidates
from crawler.catalog.reader import SCHEMA_HEAD, Reader
from crawler.catalog.search_index import refresh_live_rows, refresh_search_columns
from crawler.catalog.store import refresh_live
from crawler.catalog.tables import Quant, Repo
from crawler.cli.search_cmd import request_from_argv
from crawler.crawl.catalogs import open_catalog
from crawler.library.search_request import COUNT_CAP, validate_request
from crawler.ranking.columns import stored_columns
from crawler.ranking.query import QueryMatcher
from crawler.ranking.rank import count_fitting
from tests.catalog.populate import add_newcomer, populate
from tests.catalog.reads import by_name_agrees
from tests.pg import BOTH_DATABASES, built_catalog

#: Queries: broad ("qwen3.6 27b", "a3b": one family, several), several tokens, digits in a word
#: of the file name, none ("9z9"), and one with no piece to look up ("8b": every shape).
_QUERIES = ("qwen3.6 27b", "a3b", "27b q4", "3.6 8b", "qwen3.6-27b-instruct", "9z9", "8b")


@pytest.fixture(scope="module", params=BOTH_DATABASES)
def hub_url(request, tmp_path_factory) -> Iterator[str]:
    """A Hub-shaped catalog of 1,200 quants (bench/bench_search_hub.py), built once a database."""
    with built_catalog(request.param, tmp_path_factory.mktemp("shapes"), "quants_name_shapes",
                       lambda url: build(url, 1200)) as url:  # fmt: skip
        yield url


@pytest.fixture
def broad(monkeypatch) -> None:
    """Every query too broad for the substring index (at 1M quants, "qwen3.6 27b" finds ~86,000:
    the index serves at most crawler.catalog.ordered._BY_NAME_MAX), as in 1,200 quants none is."""
    monkeypatch.setattr(ordered_module, "_BY_NAME_MAX", 0)


def _matched_shapes(reader: Reader, query: str) -> set[str]:
    """The shapes of the live quants the query's matcher accepts, every quant read."""
    matcher = QueryMatcher(query)
    rows = reader.rows(
        "SELECT q.search_shape, r.repo_id, COALESCE(q.base_model, r.base_model), q.path,"
        " q.quant_label, q.architecture FROM quants q JOIN repos r ON r.id = q.repo_pk"
        " WHERE q.live = TRUE"
    )
    return {str(row[0]) for row in rows if matcher.matches_names(*row[1:])}


def test_shapes_hold_every_match_and_leave_out_others(hub_url):
    with Reader.open(hub_url) as reader:
        every = {str(r[0]) for r in reader.rows("SELECT DISTINCT search_shape FROM quants")}
        for query in _QUERIES:
            shapes = name_shapes(reader, QueryMatcher(query))
            if query == "8b":
                assert shapes is None  # no piece of 3 characters: every shape may match
                continue
            assert shapes is not None and _matched_shapes(reader, query) <= shapes, query
        broad = name_shapes(reader, QueryMatcher("qwen3.6 27b"))
        assert broad and len(broad) < len(every) / 5  # one family of the catalog's dozen
        assert name_shapes(reader, QueryMatcher("9z9")) == frozenset()


@pytest.mark.parametrize("targs", [t for _tier, t in TIERS], ids=[n for n, _t in TIERS])
def test_reads_by_name_shape_equal_the_reads_without_them(hub_url, broad, targs):
    with Reader.open(hub_url) as reader:
        compared = 0
        # The dialects differ in the SQL of the reads, not in which query they serve: on
        # PostgreSQL broad queries, a narrow one and one no shape holds.
        pg = reader.dialect == "postgresql"
        queries = ("qwen3.6 27b", "a3b", "27b q4", "9z9") if pg else _QUERIES
        for query in queries:
            for sort in SORTS:
                argv = [query, *targs, "--sort", sort, "--limit", "7"]
                compared += by_name_agrees(reader, argv)
                req = request_from_argv(argv)
                assert _fit_count(reader, req, True) == _fit_count(reader, req, False), argv
        assert compared >= (10 if pg else 20)  # of 28 / 49: what has results is compared


def _fit_count(reader: Reader, req: object, by_name: bool) -> tuple[int, int, bool]:
    """What the search counts as fitting beyond its rows (crawler.library.search)."""
    budget, _, spec = validate_request(req)  # type: ignore[arg-type]
    filters, sort = req.filters, req.sort  # type: ignore[attr-defined]
    stream = stream_candidates(reader, spec, budget, filters, sort, by_name=by_name)
    try:
        return count_fitting(
            stream, budget, spec, filters, materialize=materializer(reader), cap=COUNT_CAP
        )
    finally:
        stream.close()


def _shapes(url: str, query: str) -> frozenset[str]:
    with Reader.open(url) as reader:
        found = name_shapes(reader, QueryMatcher(query))
    assert found is not None
    return found


def _shape_of(url: str, quant_id: int) -> str:
    with Catalog.open(url) as catalog, catalog.session() as s:
        shape = s.scalar(select(Quant.search_shape).where(Quant.id == quant_id))
    assert shape is not None
    return shape


def test_the_shapes_follow_every_write(catalog_url):
    populate(catalog_url)
    with Catalog.open(catalog_url) as catalog:
        refresh_live(catalog)  # the search text and shape, as the crawl's write path sets them
    with Reader.open(catalog_url) as reader:
        assert _matched_shapes(reader, "27b") and _matched_shapes(reader, "27b") <= _shapes(
            catalog_url, "27b"
        )

    # A new repo and quant, written and refreshed as a crawl does: a new name and a new shape.
    repo_pk, zeta_id = add_newcomer(catalog_url, quality_score=0.123456)
    shape = _shape_of(catalog_url, zeta_id)
    assert shape in _shapes(catalog_url, "9.75b")
    assert shape not in _shapes(catalog_url, "27b")

    # An update of the names (the search text follows the base model), then of the shape.
    with Catalog.open(catalog_url) as catalog, catalog.session() as s:
        s.execute(update(Repo).where(Repo.id == repo_pk).values(base_model="org/Omega-7.25B"))
        s.execute(update(Quant).where(Quant.id == zeta_id).values(base_model=None))
        refresh_live_rows(s, [repo_pk])
    assert shape in _shapes(catalog_url, "7.25b")
    with Catalog.open(catalog_url) as catalog, catalog.session() as s:
        s.execute(update(Quant).where(Quant.id == zeta_id).values(quality_score=0.654321))
        refresh_live_rows(s, [repo_pk])
    moved = _shape_of(catalog_url, zeta_id)
    assert moved != shape and moved in _shapes(catalog_url, "7.25b")

    # Raw SQL that writes a text: the triggers keep the pieces.
    with Catalog.open(catalog_url) as catalog, catalog.engine.begin() as conn:
        conn.execute(
            text("UPDATE quants SET search_text = search_text || ' zz9x' WHERE id = :id"),
            {"id": zeta_id},
        )
    assert _shapes(catalog_url, "zz9x") == {moved}
    # Longer than the catalog stores: SQLite does not enforce the column's length.
    if catalog_url.startswith("sqlite"):
        with Catalog.open(catalog_url) as catalog, catalog.engine.begin() as conn:
            conn.execute(
                text("UPDATE quants SET search_text = :t WHERE id = :id"),
                {"t": "x" * 600 + " zz8y", "id": zeta_id},
            )
        assert _shapes(catalog_url, "zz8y") == {moved}

    # Too long to store: NULL search text, its shape always among the shapes.
    with Catalog.open(catalog_url) as catalog, catalog.session() as s:
        s.execute(update(Quant).where(Quant.id == zeta_id).values(search_text=None))
    assert moved in _shapes(catalog_url, "404z")

    # Deleted: a shape's pieces stay (a superset: the reads test the name exactly).
    with Catalog.open(catalog_url) as catalog, catalog.session() as s:
        s.execute(delete(Quant).where(Quant.id == zeta_id))
    assert moved in _shapes(catalog_url, "zz9x")


def test_a_refill_of_the_search_columns_drops_the_pieces_of_shapes_gone(catalog_url):
    populate(catalog_url)
    with Catalog.open(catalog_url) as catalog, catalog.session() as s:
        refresh_live(catalog)
        s.execute(update(Quant).values(quality_score=0.5))
        refresh_live_rows(s, list(s.scalars(select(Repo.id))))  # new shapes, old pieces kept
    assert _pieces(catalog_url) > _expected_pieces(catalog_url)
    with Catalog.open(catalog_url) as catalog, catalog.engine.begin() as conn:
        refresh_search_columns(conn, stored_columns)  # what an upgrade across 0014 runs
    assert _pieces(catalog_url) == _expected_pieces(catalog_url) != set()


def _pieces(url: str) -> set[tuple[str, str]]:
    with Catalog.open(url, upgrade=False, check=False) as catalog, catalog.engine.connect() as c:
        return {(str(g), str(s)) for g, s in c.exec_driver_sql("SELECT * FROM search_shape_grams")}


def _expected_pieces(url: str) -> set[tuple[str, str]]:
    """Every piece with a digit of every stored text, with its quant's shape, read in Python."""
    with Catalog.open(url) as catalog, catalog.session() as s:
        rows = s.execute(
            select(Quant.search_text, Quant.search_shape).where(
                Quant.search_text.is_not(None), Quant.search_shape.is_not(None)
            )
        ).all()
    return {
        (t[i : i + 3], shape)
        for t, shape in rows
        for i in range(len(t) - 2)
        if any(ch in "0123456789" for ch in t[i : i + 3])
    }


def test_migration_down_and_up(catalog_url):
    from alembic import command

    populate(catalog_url)
    with Catalog.open(catalog_url) as catalog:
        refresh_live(catalog)
        assert _pieces(catalog_url) == _expected_pieces(catalog_url)
        command.downgrade(catalog._alembic_config(), "0014_partial_slot_bytes")
    with Catalog.open(catalog_url, upgrade=False, check=False) as catalog:
        with catalog.engine.connect() as c:
            sql = (
                "SELECT name FROM sqlite_master"
                if c.dialect.name == "sqlite"
                else "SELECT tablename FROM pg_tables"
            )
            assert "search_shape_grams" not in set(c.execute(text(sql)).scalars())
        with catalog.session() as s:  # written while the table is gone: the upgrade reads it
            s.execute(update(Quant).values(search_text=Quant.search_text + " zz9x"))
    with open_catalog(catalog_url) as catalog:
        assert catalog.current_revision() == SCHEMA_HEAD
    assert _pieces(catalog_url) == _expected_pieces(catalog_url)
    with Reader.open(catalog_url) as reader:
        every = {str(r[0]) for r in reader.rows("SELECT DISTINCT search_shape FROM quants")}
    assert _shapes(catalog_url, "zz9x") == every
