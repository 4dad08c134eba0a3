"""The search columns' refill after a migration (search_index.refresh_search_columns) and
migration 0016's rewrite of the shapes, on SQLite and PostgreSQL: the columns, shapes and name
pieces the crawl's write path stores, batch after batch; the pieces' triggers work after them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic import command
from sqlalchemy import text

from bench.bench_search_hub import build
from crawler.catalog import Catalog
from crawler.catalog import search_index as search_index_module
from crawler.catalog.reader import SCHEMA_HEAD
from crawler.catalog.search_index import refresh_search_columns
from crawler.crawl.catalogs import open_catalog
from crawler.ranking.columns import FIT_EXTRAS, stored_columns
from tests.pg import BOTH_DATABASES, built_catalog

_COLUMNS = ("id", "quality_score", "copy_key", *FIT_EXTRAS, "search_shape", "search_text")


@pytest.fixture(params=BOTH_DATABASES)
def hub_url(request, tmp_path) -> Iterator[str]:
    """A Hub-shaped catalog of 600 quants (bench/bench_search_hub.py), as the crawl writes them."""
    with built_catalog(
        request.param, tmp_path, "quants_refill", lambda url: build(url, 600)
    ) as url:
        yield url


def _rows(url: str) -> list[tuple]:
    with Catalog.open(url, upgrade=False, check=False) as catalog, catalog.engine.connect() as c:
        return [
            tuple(r)
            for r in c.exec_driver_sql(f"SELECT {', '.join(_COLUMNS)} FROM quants ORDER BY id")
        ]


def _pieces(url: str) -> set[tuple[str, str]]:
    with Catalog.open(url, upgrade=False, check=False) as catalog, catalog.engine.connect() as c:
        return {(str(g), str(s)) for g, s in c.exec_driver_sql("SELECT * FROM search_shape_grams")}


def _expected_pieces(rows: list[tuple]) -> set[tuple[str, str]]:
    """Every piece with a digit of every stored text, with its quant's shape, read in Python."""
    shape, text_at = _COLUMNS.index("search_shape"), _COLUMNS.index("search_text")
    return {
        (t[i : i + 3], row[shape])
        for row in rows
        if (t := row[text_at]) is not None and row[shape] is not None
        for i in range(len(t) - 2)
        if any(ch in "0123456789" for ch in t[i : i + 3])
    }


#: Drop the pieces of shapes no quant has.
_GONE = (
    "DELETE FROM search_shape_grams WHERE search_shape NOT IN"
    " (SELECT search_shape FROM quants WHERE search_shape IS NOT NULL)"
)


def _exec(url: str, sql: str, **params: object) -> None:
    with Catalog.open(url, upgrade=False, check=False) as catalog, catalog.engine.begin() as c:
        c.execute(text(sql), params)


def test_the_refill_writes_the_crawls_columns_shapes_and_pieces(hub_url, monkeypatch):
    monkeypatch.setattr(search_index_module, "_BATCH", 97)  # several batches, the last partial
    crawled = _rows(hub_url)
    assert len(crawled) == 600 and _pieces(hub_url) == _expected_pieces(crawled) != set()
    first, second = crawled[0][0], crawled[1][0]
    # A quant with no memory model keeps its columns; its shape is rewritten all the same.
    _exec(hub_url, "DELETE FROM memory_models WHERE quant_id = :id", id=first)
    _exec(hub_url, "UPDATE quants SET search_shape = 'stale' || CAST(id AS VARCHAR(12))")
    _exec(
        hub_url,
        "UPDATE quants SET quality_score = NULL, copy_key = NULL, fit_slot_bytes = NULL,"
        " fit_swa_cells = 1"
        " WHERE id <> :id",
        id=first,
    )
    # As a catalog whose rows were written so would hold: the pieces of the rows' shapes only.
    _exec(hub_url, _GONE)
    assert _pieces(hub_url) & _expected_pieces(crawled) == set()
    with Catalog.open(hub_url) as catalog, catalog.engine.begin() as conn:
        assert refresh_search_columns(conn, stored_columns) == 599
    assert _rows(hub_url) == crawled
    assert _pieces(hub_url) == _expected_pieces(crawled)
    # The triggers add what a later write brings (PostgreSQL's was off during the refill).
    _exec(
        hub_url, "UPDATE quants SET search_text = search_text || ' zz9x' WHERE id = :id", id=second
    )
    shape = crawled[1][_COLUMNS.index("search_shape")]
    assert {("z9x", shape), ("zz9", shape)} <= _pieces(hub_url)


def test_migration_0016_down_and_up_restores_columns_shapes_and_pieces(hub_url):
    crawled = _rows(hub_url)
    with Catalog.open(hub_url, upgrade=False, check=False) as catalog:
        command.downgrade(catalog._alembic_config(), "0015_search_shape_grams")
        assert catalog.current_revision() == "0015_search_shape_grams"
    with (
        Catalog.open(hub_url, upgrade=False, check=False) as catalog,
        catalog.engine.connect() as c,
    ):
        old = [str(r[0]) for r in c.exec_driver_sql("SELECT search_shape FROM quants ORDER BY id")]
    shape = _COLUMNS.index("search_shape")
    # Two columns fewer in every shape; the old shapes' pieces added by the rewrite.
    assert [s.count("|") + 2 for s in old] == [r[shape].count("|") for r in crawled]
    _exec(hub_url, _GONE)  # as a catalog at 0015 holds: no piece of the head's shapes
    assert _pieces(hub_url) & _expected_pieces(crawled) == set()
    with open_catalog(hub_url) as catalog:
        assert catalog.current_revision() == SCHEMA_HEAD
    assert _rows(hub_url) == crawled
    assert _pieces(hub_url) == _expected_pieces(crawled)
