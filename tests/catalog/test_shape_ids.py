"""A shape's run read ids first (PostgreSQL, crawler.catalog.shape_runs.BY_IDS) against the one
read of the run's rows, on the Hub-shaped catalog (bench/bench_search_hub.py), on SQLite and
PostgreSQL: the same candidates with the same hints in the same pre_key order, the same results.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic import command
from sqlalchemy import inspect

from bench.bench_search_hub import TIERS, build
from crawler.catalog import Catalog, ordered, shape_runs
from crawler.catalog.reader import SCHEMA_HEAD, Reader
from crawler.cli.search_cmd import request_from_argv
from crawler.ranking.columns import stored_columns
from crawler.ranking.model import BOUNDED_SORTS
from crawler.ranking.rank import pre_key
from tests.catalog.reads import ranked, streamed
from tests.pg import BOTH_DATABASES, built_catalog


@pytest.fixture(scope="module", params=BOTH_DATABASES)
def hub_url(request, tmp_path_factory) -> Iterator[str]:
    """The Hub-shaped catalog, built once per module and database (the tests only read it)."""
    with built_catalog(request.param, tmp_path_factory.mktemp("hub"), "quants_shape_ids",
                       _build) as url:  # fmt: skip
        yield url


def _build(url: str) -> None:
    build(url, 1500)
    with Catalog.open(url):  # the schema check a real search does
        pass


def _reads(reader: Reader, req, by_ids: bool, monkeypatch) -> tuple[list, list]:
    """(candidates streamed, results) with every single-shape run read ids first (a run
    counts as short only when empty: one chunk is one row) or none."""
    with monkeypatch.context() as m:
        if by_ids:
            m.setattr(ordered, "STREAM_CHUNK", 1)
        m.setattr(shape_runs, "BY_IDS", (reader.dialect,) if by_ids else ())
        return streamed(reader, req, by_shape=True), ranked(reader, req, by_shape=True)


def test_runs_read_by_ids_equal_the_runs_read_whole(hub_url, monkeypatch):
    with Reader.open(hub_url) as reader:
        checked = 0
        for query in (None, "qwen3.6 27b"):
            for _tier, targs in TIERS:
                for sort in ("quality", *BOUNDED_SORTS):
                    argv = ([query] if query else []) + [*targs, "--sort", sort, "--limit", "7"]
                    req = request_from_argv(argv)
                    by_ids, ranked_ids = _reads(reader, req, True, monkeypatch)
                    whole, ranked_whole = _reads(reader, req, False, monkeypatch)
                    keys = [pre_key(sort, c) for c in by_ids]
                    assert keys == [pre_key(sort, c) for c in whole] == sorted(keys)
                    # Ties on pre_key may come in either order (ranking reads all of a tie).
                    assert sorted(zip(keys, (c.quant_id for c in by_ids), strict=True)) == sorted(
                        (pre_key(sort, c), c.quant_id) for c in whole
                    )
                    assert ranked_ids == ranked_whole
                    checked += len(by_ids) > 100 and bool(ranked_ids)
        assert checked >= 10  # most requests read many candidates and have results


def test_runs_keyed_by_their_shapes_equal_runs_keyed_row_by_row(hub_url, monkeypatch):
    """margin and ctx runs take each shape's key from the shape listing (ordered._EXACT_KEYS;
    on SQLite the runs without copies are read ids first: quality_runs.keyed_run) against
    the bound computed on every row: the same candidates, hints and order, the same results,
    with and without the copies left out."""
    # Copies of runs not read from their ids are left out by the SQL window, the read
    # keyed_run's classes equal (crawler.catalog.copy_walk's are finer).
    monkeypatch.setattr(shape_runs, "best_copy_ids", lambda *_a: None)
    with Reader.open(hub_url) as reader:
        checked = 0
        for query in (None, "qwen3.6 27b"):
            for _tier, targs in TIERS:
                for sort in ("margin", "ctx"):
                    argv = ([query] if query else []) + [*targs, "--sort", sort, "--limit", "7"]
                    req = request_from_argv(argv)
                    with monkeypatch.context() as m:
                        m.setattr(ordered, "_EXACT_KEYS", ())
                        per_row = streamed(reader, req, by_shape=True)
                        per_row_copies = streamed(reader, req, by_shape=True, copies=7)
                        ranked_per_row = ranked(reader, req, by_shape=True)
                        ranked_copies = ranked(reader, req, by_shape=True, copies=7)
                    keyed = streamed(reader, req, by_shape=True)
                    keyed_copies = streamed(reader, req, by_shape=True, copies=7)
                    for new, old in ((keyed, per_row), (keyed_copies, per_row_copies)):
                        keys = [pre_key(sort, c) for c in new]
                        assert keys == [pre_key(sort, c) for c in old] == sorted(keys)
                        assert sorted(zip(keys, (c.quant_id for c in new), strict=True)) == (
                            sorted((pre_key(sort, c), c.quant_id) for c in old)
                        )
                    assert ranked(reader, req, by_shape=True) == ranked_per_row
                    assert ranked(reader, req, by_shape=True, copies=7) == ranked_copies
                    checked += len(keyed) > 100 and bool(ranked_per_row)
        assert checked >= 4


def test_shape_index_carries_the_id_on_postgresql_and_downgrades(catalog_url):
    """0017: on PostgreSQL ix_quants_search_shape INCLUDEs the quant id (the ids read is then
    index-only); its downgrade drops it and a new upgrade adds it back. SQLite: unchanged."""

    def shape_index(catalog: Catalog) -> tuple[list[str], list[str]]:
        found = inspect(catalog.engine).get_indexes("quants")
        (ix,) = [ix for ix in found if ix["name"] == "ix_quants_search_shape"]
        include = ix.get("dialect_options", {}).get("postgresql_include", [])
        return [str(c) for c in ix["column_names"]], [str(c) for c in include]

    columns = ["live", "search_shape", "size_bytes", "quality_score", "repo_pk"]
    with Catalog.open(catalog_url) as catalog:
        pg = catalog.dialect == "postgresql"
        assert shape_index(catalog) == (columns, ["id"] if pg else [])
        command.downgrade(catalog._alembic_config(), "0016_swa_window_cells")
        assert shape_index(catalog) == (columns, [])
        assert catalog.upgrade(stored_columns) == catalog.head_revision() == SCHEMA_HEAD
        assert shape_index(catalog) == (columns, ["id"] if pg else [])
