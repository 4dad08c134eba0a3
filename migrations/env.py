"""Alembic environment: batch mode for SQLite, metadata from crawler.catalog.tables.

quants passes an open connection in ``config.attributes["connection"]``; the ``alembic`` CLI in a
checkout falls back to ``QUANTS_DB`` (or the config's sqlalchemy.url).
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine

from crawler.catalog.orm import Base, in_metadata

config = context.config
target_metadata = Base.metadata


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite has almost no ALTER: batch mode rebuilds tables ("Running Batch Migrations").
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        # The name index's FTS5 table and GIN index are raw DDL (migration 0011).
        include_name=in_metadata,
    )
    with context.begin_transaction():
        context.run_migrations()


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    url = os.environ.get("QUANTS_DB") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("set QUANTS_DB to the catalog URL")
    engine = create_engine(url)
    with engine.begin() as conn:
        _configure(conn)


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported; use `quants db upgrade`")
run()
