"""Throwaway PostgreSQL databases on the test server that QUANTS_TEST_PG_URL names.

``.ci/pg.sh`` starts that server and ``.ci/run`` sets the variable; without it the test that asks
for a database is skipped.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ADMIN_URL = os.environ.get("QUANTS_TEST_PG_URL")


@contextmanager
def databases(prefix: str) -> Iterator[Callable[..., str]]:
    """A maker of URLs of new databases named ``prefix_<random>`` (empty, or a copy of
    ``template``); all dropped at exit."""
    if not ADMIN_URL:
        pytest.skip("no PostgreSQL server: set QUANTS_TEST_PG_URL (.ci/pg.sh starts one)")
    from sqlalchemy.engine import make_url

    made: list[str] = []

    def new(template: str | None = None) -> str:
        """A new database; with ``template`` (a URL), a copy of that one (nobody may be on it)."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        like = f' TEMPLATE "{make_url(template).database}"' if template else ""
        _admin(f'CREATE DATABASE "{name}"{like}')
        made.append(name)
        return _url(name)

    try:
        yield new
    finally:
        _admin(*(_DROP.format(name) for name in made))


#: ``params`` of a fixture that runs its tests on SQLite and on PostgreSQL.
BOTH_DATABASES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@contextmanager
def built_catalog(
    dialect: str, directory: Path, prefix: str, build: Callable[[str], object]
) -> Iterator[str]:
    """The URL of a catalog ``build`` filled, the caller's own: an SQLite file in ``directory``,
    or a new PostgreSQL database named ``prefix_<random>`` (dropped at exit).

    ``build`` runs once per test run for each ``prefix`` (builds are seeded: every call gives
    the same catalog), whichever pytest-xdist worker asks first; each use is a copy (SQLite's
    backup API, PostgreSQL's CREATE DATABASE .. TEMPLATE). The workers share out a module's
    tests, and each one built every module's catalog again before."""
    run = os.environ.get(RUN_VARIABLE)
    if dialect == "sqlite":
        url = f"sqlite:///{directory / 'catalog.sqlite'}"
        if run is None:
            build(url)
        else:
            with _built_once(run, f"{prefix}.sqlite") as (root, made):
                source = root / f"{prefix}.sqlite"
                if not made:
                    for end in ("", "-wal", "-shm", "-journal"):  # of a build that failed
                        Path(f"{source}{end}").unlink(missing_ok=True)
                    build(f"sqlite:///{source}")
                _copy_sqlite(source, directory / "catalog.sqlite")
        yield url
        return
    with databases(prefix) as new:
        if run is None:
            url = new()
            build(url)
        else:
            with _built_once(run, f"{prefix}.postgresql") as (_root, made):
                template = f"{prefix}_{TEMPLATE_MARK}{run}"
                template_url = _url(template)
                if not made:
                    _admin(f'CREATE DATABASE "{template}"')
                    try:
                        build(template_url)
                    except BaseException:
                        _admin(_DROP.format(template))
                        raise
                    # CREATE DATABASE .. TEMPLATE refuses a template with connections: end any
                    # the build left open.
                    _admin(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        f" WHERE datname = '{template}' AND pid <> pg_backend_pid()"
                    )
                url = new(template=template_url)
        yield url


#: The variable that names a test run (set by tests/conftest.py in pytest's main process, so the
#: xdist workers it starts share it): the directory and database names of built_catalog's builds.
RUN_VARIABLE = "QUANTS_TEST_RUN"
#: Between a template database's prefix and its run name (tests/conftest.py drops them).
TEMPLATE_MARK = "tpl_"


def run_directory(run: str) -> Path:
    """Where one test run's workers keep the SQLite catalogs built_catalog built."""
    return Path(tempfile.gettempdir()) / f"quants-test-built-{run}"


@contextmanager
def _built_once(run: str, name: str) -> Iterator[tuple[Path, bool]]:
    """(the run's directory, whether ``name`` was built), under a lock no other worker holds:
    the caller builds it if not, and the mark is written only when it returns without error."""
    root = run_directory(run)
    root.mkdir(exist_ok=True)
    mark = root / f"{name}.built"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield root, mark.exists()
        mark.touch()


def _copy_sqlite(source: Path, target: Path) -> None:
    """A copy through SQLite itself (what a WAL file holds included)."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


#: Drops a database whoever is on it.
_DROP = 'DROP DATABASE IF EXISTS "{}" WITH (FORCE)'


def _url(database: str) -> str:
    """The URL of ``database`` on the test server."""
    from sqlalchemy.engine import make_url

    assert ADMIN_URL
    return make_url(ADMIN_URL).set(database=database).render_as_string(hide_password=False)


def _admin(*statements: str) -> list[Any]:
    """Run ``statements`` on the test server outside a transaction (CREATE and DROP DATABASE
    cannot run in one); the first column of the last one's rows."""
    from sqlalchemy import create_engine, text

    assert ADMIN_URL
    engine = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    rows: list[Any] = []
    try:
        with engine.connect() as conn:
            for sql in statements:
                result = conn.execute(text(sql))
                rows = list(result.scalars()) if result.returns_rows else []
    finally:
        engine.dispose()
    return rows


def drop_templates(run: str) -> None:
    """Drop the template databases built_catalog made in ``run`` (pytest's main process, at
    its end; nothing without a server)."""
    if not ADMIN_URL:
        return
    suffix = f"_{TEMPLATE_MARK}{run}"
    names = _admin(
        f"SELECT datname FROM pg_database WHERE RIGHT(datname, {len(suffix)}) = '{suffix}'"
    )
    if names:
        _admin(*(_DROP.format(name) for name in names))
