"""The crawl lock within one process: exclusion, holder info, lock paths. Across processes (a
second holder, a killed one): tests/reliability/test_lock_processes.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crawler.base.config import Settings
from crawler.base.errors import LockHeld
from crawler.crawl.lock import CrawlLock, crawl_lock, lock_path, read_holder


def test_second_lock_in_same_process_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.lock"
    with CrawlLock(path, command="quants crawl") as first:
        assert first.held
        with pytest.raises(LockHeld) as info:
            CrawlLock(path, command="quants schedule").acquire()
        assert "quants crawl" in str(info.value)
        assert f"pid {os.getpid()}" in str(info.value)
        assert info.value.holder is not None and "quants crawl" in info.value.holder
    # Released: a new holder gets it, and the old record is gone.
    assert read_holder(path) is None
    with CrawlLock(path, command="quants schedule"):
        holder = read_holder(path)
        assert holder is not None and holder.command == "quants schedule"


def test_release_is_idempotent_and_reacquire_works(tmp_path: Path) -> None:
    lock = CrawlLock(tmp_path / "sub" / "c.lock", command="quants crawl")
    lock.acquire()
    with pytest.raises(RuntimeError):
        lock.acquire()
    lock.release()
    lock.release()
    assert not lock.held
    lock.acquire()
    assert lock.held
    lock.release()


def test_garbage_in_lock_file_does_not_break_the_error(tmp_path: Path) -> None:
    path = tmp_path / "c.lock"
    path.write_bytes(b"\xff\x00 not json")
    assert read_holder(path) is None
    with CrawlLock(path, command="quants crawl"):
        assert read_holder(path) is not None
    path.write_bytes(b"[1, 2]")
    assert read_holder(path) is None
    assert read_holder(tmp_path / "missing.lock") is None


def test_lock_path_sqlite_sits_beside_the_database(tmp_path: Path) -> None:
    db = tmp_path / "data" / "catalog.sqlite"
    path = lock_path(f"sqlite:///{db}", tmp_path / "elsewhere")
    assert path == db.with_name("catalog.sqlite.crawl.lock")
    assert lock_path(f"sqlite:///{db}", tmp_path, "schedule").name == "catalog.sqlite.schedule.lock"


def test_lock_path_server_database_hides_the_password(tmp_path: Path) -> None:
    url = "postgresql+psycopg://user:s3cret@db.example:5432/quants"
    path = lock_path(url, tmp_path)
    assert path.parent == tmp_path / "locks"
    assert "s3cret" not in str(path) and "example" not in str(path)
    other = lock_path("postgresql+psycopg://user:s3cret@db.example:5432/other", tmp_path)
    assert other != path
    # The driver does not make another catalog.
    assert lock_path("postgresql://user:s3cret@db.example:5432/quants", tmp_path) == path


def test_crawl_lock_follows_settings(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    lock = crawl_lock(settings, command="quants crawl")
    assert lock.path == tmp_path / "catalog.sqlite.crawl.lock"
    with lock, pytest.raises(LockHeld):
        crawl_lock(settings, command="quants schedule").acquire()
    # The scheduler's own lock is another file: a scheduler never blocks itself from crawling.
    assert crawl_lock(settings, command="x", name="schedule").path != lock.path
