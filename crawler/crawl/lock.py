"""The crawl lock: one crawl pass per catalog at a time, for quants crawl and the scheduler.

An advisory flock, which the OS drops when its holder dies, so a lock is never stale.
Details: docs/internals/crawl.md#lock
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Self

from crawler.base.errors import LockHeld

if TYPE_CHECKING:
    from crawler.base.config import Settings

logger = logging.getLogger(__name__)

__all__ = ["CrawlLock", "LockHolder", "crawl_lock", "lock_path", "read_holder"]

# The holder record is a few hundred bytes; never read more from a file anyone could have written.
_MAX_HOLDER_BYTES = 4096


@dataclass(frozen=True, slots=True)
class LockHolder:
    """Who holds (or last held) a lock; read from the lock file."""

    pid: int | None
    host: str | None
    command: str | None
    started_at: str | None

    def describe(self) -> str:
        """One line for an error message, e.g. ``quants schedule (pid 4242 on box, since ...)``."""
        what = self.command or "another process"
        where = []
        if self.pid is not None:
            where.append(f"pid {self.pid}")
        if self.host:
            where.append(f"on {self.host}")
        if self.started_at:
            where.append(f"since {self.started_at}")
        return f"{what} ({' '.join(where)})" if where else what


def lock_path(db_url: str, data_dir: Path, name: str = "crawl") -> Path:
    """The lock file for ``db_url``.

    A SQLite file database gets its lock beside the database file, so every process that opens
    the same file meets the same lock whatever its data directory. Other URLs (PostgreSQL) get a
    file in ``data_dir/locks`` named by a hash of the URL (never the URL: it may hold a
    password); that protects one host only.
    """
    from crawler.catalog.database import catalog_identity

    sqlite_file, key = catalog_identity(db_url)
    if sqlite_file is not None:
        return sqlite_file.with_name(f"{sqlite_file.name}.{name}.lock")
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    return data_dir / "locks" / f"{name}-{digest}.lock"


def read_holder(path: Path) -> LockHolder | None:
    """The holder record in ``path``, or None when the file is missing, empty or unreadable."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(_MAX_HOLDER_BYTES)
    except OSError:
        return None
    return _parse_holder(raw)


def _parse_holder(raw: bytes) -> LockHolder | None:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    pid = data.get("pid")
    return LockHolder(
        pid=pid if isinstance(pid, int) else None,
        host=_str_or_none(data.get("host")),
        command=_str_or_none(data.get("command")),
        started_at=_str_or_none(data.get("started_at")),
    )


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


class CrawlLock:
    """An exclusive, non-blocking lock on ``path``; a context manager.

    ``acquire`` raises LockHeld naming the holder when another open
    lock (in this or another process) holds it. ``flock`` locks belong to the open file, so two
    ``CrawlLock`` objects in one process exclude each other too.
    """

    def __init__(self, path: Path, *, command: str) -> None:
        self.path = path
        self.command = command
        self._fh: IO[bytes] | None = None

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._fh is not None

    def acquire(self) -> None:
        """Take the lock or raise LockHeld; write this process's holder record."""
        import fcntl

        if self._fh is not None:
            raise RuntimeError("lock already held by this object")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # "a+b": create if missing, never truncate before we hold the lock (the holder's record
        # must stay readable for the contender's error message).
        fh = self.path.open("a+b")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = _parse_holder(fh.read(_MAX_HOLDER_BYTES))
            fh.close()
            who = holder.describe() if holder else "another process"
            raise LockHeld(
                f"the catalog is being crawled by {who}; lock file {self.path}",
                holder=who,
            ) from None
        except BaseException:
            fh.close()
            raise
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": self.command,
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        fh.truncate(0)
        fh.write(json.dumps(record).encode("utf-8"))
        fh.flush()
        self._fh = fh
        logger.debug("acquired lock %s", self.path)

    def release(self) -> None:
        """Release the lock (idempotent). The file stays; an unlocked file means 'free'."""
        import fcntl

        fh, self._fh = self._fh, None
        if fh is None:
            return
        try:
            # Empty the record first so nobody reads a released holder as current.
            fh.truncate(0)
            fh.flush()
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        finally:
            fh.close()
        logger.debug("released lock %s", self.path)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def crawl_lock(settings: Settings, *, command: str, name: str = "crawl") -> CrawlLock:
    """The crawl lock of the settings' catalog (not yet acquired); use it with ``with``.

    ``command`` is what a contender is told holds the lock (e.g. ``"quants crawl"``);
    ``name="schedule"`` gives the scheduler's own lock (one scheduler per catalog).
    """
    path = lock_path(settings.resolved_db_url, settings.resolved_data_dir, name)
    return CrawlLock(path, command=command)
