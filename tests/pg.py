"""Throwaway PostgreSQL databases on the test server that QUANTS_TEST_PG_URL names.

``.ci/pg.sh`` starts that server and ``.ci/run`` sets the variable; without it the test that asks
for a database is skipped.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ADMIN_URL = os.environ.get("QUANTS_TEST_PG_URL")


@contextmanager
def databases(prefix: str) -> Iterator[Callable[..., str]]:
    """A maker of URLs of new databases named ``prefix_<random>`` (empty, or a copy of
    ``template``); all dropped at exit."""
    if not ADMIN_URL:
        pytest.skip("no PostgreSQL server: set QUANTS_TEST_PG_URL (.ci/pg.sh starts one)")
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    made: list[str] = []

    def new(template: str | None = None) -> str:
        """A new database; with ``template`` (a URL), a copy of that one (nobody may be on it)."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        like = f' TEMPLATE "{make_url(template).database}"' if template else ""
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"{like}'))
        made.append(name)
        return make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)

    try:
        yield new
    finally:
        with admin.connect() as conn:
            for name in made:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


#: ``params`` of a fixture that runs its tests on SQLite and on PostgreSQL.
BOTH_DATABASES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@contextmanager
def built_catalog(
    dialect: str, directory: Path, prefix: str, build: Callable[[str], object]
) -> Iterator[str]:
    """The URL of a catalog ``build`` filled: an SQLite file in ``directory``, or a new
    PostgreSQL database named ``prefix_<random>`` (dropped at exit)."""
    if dialect == "sqlite":
        url = f"sqlite:///{directory / 'catalog.sqlite'}"
        build(url)
        yield url
        return
    with databases(prefix) as new:
        url = new()
        build(url)
        yield url
