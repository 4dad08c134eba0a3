"""Shared fixtures: catalog URLs for SQLite (always) and PostgreSQL (if QUANTS_TEST_PG_URL is set).

``.ci/run`` starts a PostgreSQL server and sets QUANTS_TEST_PG_URL, so CI runs the catalog tests on
both. Each PostgreSQL test gets a fresh database, dropped afterwards.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator

import pytest

# huggingface_hub reads these once, at import (constants.py): no telemetry fetch from
# huggingface.co (utils/_detect_agent.py), no token from the developer's login, a throwaway cache.
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="quants-test-hf-home-")
atexit.register(shutil.rmtree, os.environ["HF_HOME"], True)

PG_ADMIN_URL = os.environ.get("QUANTS_TEST_PG_URL")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--online", action="store_true", help="run tests that reach the real Hub")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--online"):
        return
    skip = pytest.mark.skip(reason="needs --online")
    for item in items:
        if "online" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    """A catalog URL for a new SQLite file."""
    return f"sqlite:///{tmp_path / 'catalog.sqlite'}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A new, empty PostgreSQL database (skipped when no server is configured)."""
    if not PG_ADMIN_URL:
        pytest.skip("no PostgreSQL server: set QUANTS_TEST_PG_URL (.ci/pg.sh starts one)")
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"quants_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def catalog_url(request) -> str:
    """A fresh catalog URL, once on SQLite and once on PostgreSQL."""
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return request.getfixturevalue(name)
