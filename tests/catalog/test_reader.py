"""crawler.catalog.reader: the driver-level read path of search and compare."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.base.errors import CatalogError, SchemaOutOfDate
from crawler.catalog import Catalog
from crawler.catalog.reader import SCHEMA_HEAD, Reader
from crawler.crawl.catalogs import reading


def test_schema_head_is_the_newest_migration(sqlite_url):
    # SCHEMA_HEAD stands in for Alembic's head at run time (no Alembic import at the head): it
    # must be the one head of the migrations folder, and a new catalog is migrated to it.
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from crawler.catalog import resource_dir

    cfg = Config()
    cfg.set_main_option("script_location", str(resource_dir("migrations")))
    assert ScriptDirectory.from_config(cfg).get_heads() == [SCHEMA_HEAD]
    with Catalog.open(sqlite_url) as catalog:
        assert catalog.head_revision() == SCHEMA_HEAD == catalog.current_revision()


def test_a_missing_sqlite_file_is_refused_and_not_created(tmp_path):
    path = tmp_path / "nothing.sqlite"
    with pytest.raises(CatalogError, match="no catalog"):
        Reader.open(f"sqlite:///{path}")
    assert not path.exists()


@pytest.mark.parametrize("url", ["sqlite://", "mysql://u@h/db", "sqlite:///x.db?mode=rw"])
def test_urls_it_does_not_serve_are_catalog_errors(url):
    with pytest.raises(CatalogError):
        Reader.open(url)


def test_an_older_schema_is_refused_and_reading_migrates_it(catalog_url):
    from alembic import command

    with Catalog.open(catalog_url) as catalog:
        command.downgrade(catalog._alembic_config(), "0003")
    with pytest.raises(SchemaOutOfDate, match="0003"):
        Reader.open(catalog_url)
    with reading(catalog_url) as reader:  # falls back to Catalog.open, which migrates
        assert reader.revision() == SCHEMA_HEAD
        assert reader.rows("SELECT COUNT(*) FROM quants") == [(0,)]
    with Reader.open(catalog_url) as reader:
        assert reader.revision() == SCHEMA_HEAD


def test_the_catalog_alone_never_migrates_into_empty_search_columns(catalog_url):
    """The catalog computes no search column: across 0003/0004 it needs its opener's function,
    and without one it refuses and stays at the old revision."""
    from alembic import command

    with Catalog.open(catalog_url) as catalog:
        command.downgrade(catalog._alembic_config(), "0003")
    with pytest.raises(CatalogError, match="search columns"):
        Catalog.open(catalog_url)
    with Catalog.open(catalog_url, upgrade=False, check=False) as catalog:
        assert catalog.current_revision() == "0003"


def test_it_cannot_write(catalog_url):
    with Catalog.open(catalog_url):
        pass
    with Reader.open(catalog_url) as reader, pytest.raises(CatalogError, match="database error"):
        reader.rows("INSERT INTO crawl_state (key, value) VALUES ('k', 'v')")
    with Reader.open(catalog_url) as reader:
        assert reader.rows("SELECT COUNT(*) FROM crawl_state") == [(0,)]


def test_parameters_and_percent_signs_reach_the_driver_intact(catalog_url):
    with Catalog.open(catalog_url):
        pass
    with Reader.open(catalog_url) as reader:
        rows = reader.rows(
            "SELECT :a || '%', :b, :a LIKE :pattern ESCAPE '\\'",
            {"a": "50%", "b": 7, "pattern": "50\\%"},
        )
        assert rows == [("50%%", 7, True)] or rows == [("50%%", 7, 1)]
        streamed = list(reader.stream("SELECT :n + 1", {"n": 41}))
        assert streamed == [(42,)]
        # A statement read again with other values (PostgreSQL: its $n form is kept), and one
        # without a value for a name it uses: an error of the catalog, not of the driver.
        assert reader.rows("SELECT :b, :a", {"a": 1, "b": 2, "unused": 3}) == [(2, 1)]
        assert reader.rows("SELECT :b, :a", {"a": 5, "b": 6}) == [(6, 5)]
        with pytest.raises(CatalogError):
            reader.rows("SELECT :b, :a", {"a": 1})


def test_catalog_reader_borrows_a_pooled_connection(sqlite_url, tmp_path: Path):
    with Catalog.open(sqlite_url) as catalog:
        with catalog.reader() as reader:
            assert reader.dialect == "sqlite" and reader.revision() == SCHEMA_HEAD
        with catalog.session() as s:  # the pool still works after the reader gave it back
            assert s.connection().exec_driver_sql("SELECT 1").scalar() == 1


def test_a_reader_sees_one_snapshot_while_a_crawl_commits(catalog_url):
    # A search reads pages, rows and siblings in several statements: they must agree.
    count = "SELECT COUNT(*) FROM crawl_state"
    with Catalog.open(catalog_url) as catalog:
        with Reader.open(catalog_url) as reader:
            assert reader.rows(count) == [(0,)]
            with catalog.engine.begin() as conn:
                conn.exec_driver_sql("INSERT INTO crawl_state (key, value) VALUES ('k', 'v')")
            assert reader.rows(count) == [(0,)]
        with Reader.open(catalog_url) as reader:
            assert reader.rows(count) == [(1,)]
