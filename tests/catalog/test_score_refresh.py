"""Upgrading a catalog across 0008 recomputes the stored quality scores: that revision came with
refitted sensitivities (crawler/ranking/quality.py), so scores stored before it are out of date."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from crawler.catalog import Catalog
from crawler.catalog.search_index import refresh_search_columns
from crawler.crawl.catalogs import open_catalog
from crawler.ranking.columns import stored_columns
from tests.catalog.populate import populate


def test_scores_stored_before_0008_are_recomputed_on_upgrade(catalog_url):
    populate(catalog_url)
    with Catalog.open(catalog_url) as catalog:
        with catalog.engine.begin() as conn:
            refresh_search_columns(conn, stored_columns)  # the scores the current model gives
            fresh = dict(conn.execute(text("SELECT id, quality_score FROM quants")).all())
        assert any(v is not None for v in fresh.values())
        command.downgrade(catalog._alembic_config(), "0005_repo_claims")
        with catalog.engine.begin() as conn:  # what the old model had stored
            conn.execute(text("UPDATE quants SET quality_score = -1"))
    with open_catalog(catalog_url) as catalog, catalog.engine.begin() as conn:
        after = dict(conn.execute(text("SELECT id, quality_score FROM quants")).all())
    assert after == fresh
