"""The crawl's bookkeeping in the catalog: scan records, their errors, and the crawl state.

Takes and returns frozen dataclasses; ORM rows never leave.
Details: docs/internals/catalog.md#scans
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from crawler.catalog import Catalog
from crawler.catalog.orm import conflict_insert
from crawler.catalog.tables import (
    CrawlState,
    Scan,
    ScanError,
)

__all__ = [
    "SCAN_COUNTERS",
    "ErrorRecord",
    "ScanSummary",
    "ScanTotals",
    "add_errors",
    "finish_scan",
    "get_state",
    "now_utc",
    "record_errors",
    "set_state",
    "start_scan",
]


def now_utc() -> datetime:
    """The time the catalog records (aware, UTC)."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    """One ``scan_errors`` row."""

    kind: str
    message: str
    repo_id: str | None = None
    path: str | None = None


@dataclass(frozen=True, slots=True)
class ScanTotals:
    """Counters written to the ``scans`` row (same names as its columns)."""

    repos_seen: int = 0
    repos_new: int = 0
    repos_changed: int = 0
    repos_unchanged: int = 0
    quants_analysed: int = 0
    files_analysed: int = 0
    requests: int = 0
    bytes_fetched: int = 0
    errors: int = 0

    def counters(self) -> dict[str, int]:
        """The counters by name, in field order (the JSON of ``crawl`` and ``scans``)."""
        return {name: getattr(self, name) for name in SCAN_COUNTERS}


#: The names of ScanTotals' counters (columns of ``scans``).
SCAN_COUNTERS = tuple(f.name for f in fields(ScanTotals))


@dataclass(frozen=True, slots=True, kw_only=True)
class ScanSummary(ScanTotals):
    """What one pass did (``crawler.crawl.scan.run_once``). ``to_json`` gives the keys of
    docs/crawling.md (and a few more)."""

    scan_id: int
    status: str
    #: Ranged GETs made for headers (redirect hops not counted) and bytes those returned.
    header_reads: int = 0
    header_bytes_fetched: int = 0
    #: Headers whose tokenizer came from a template (crawler/gguf/header_read.py); headers that took
    #: a third request or more, or whose prefix named a template they did not match (fall-backs).
    header_templated: int = 0
    header_fallbacks: int = 0
    #: Bytes the analysed headers span (what a perfect reader would fetch).
    header_bytes: int = 0
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The crawl summary JSON (sizes in bytes)."""
        return {
            "scan_id": self.scan_id,
            "status": self.status,
            **self.counters(),
            "header_reads": self.header_reads,
            "header_bytes": self.header_bytes,
            "header_templated": self.header_templated,
            "header_fallbacks": self.header_fallbacks,
        }


def get_state(catalog: Catalog, key: str) -> str | None:
    """A ``crawl_state`` value."""
    with catalog.session() as s:
        row = s.get(CrawlState, key)
        return row.value if row is not None else None


def set_state(catalog: Catalog, key: str, value: str, *, forward_only: bool = False) -> None:
    """Set a ``crawl_state`` value in one statement, so two crawls of one catalog both succeed.

    With ``forward_only`` a stored value that sorts after ``value`` is kept: for time cursors
    written as ``datetime.isoformat()`` of UTC times, byte order is time order, and a crawl that
    finishes second must not move a cursor back to the older time it read at its start. Byte
    order: SQLite's default; on PostgreSQL the "C" collation, whatever the database's locale.
    """
    with catalog.engine.begin() as conn:
        dialect = conn.dialect.name
        stmt = conflict_insert(dialect, CrawlState).values(key=key, value=value)
        stored = CrawlState.value.collate("C") if dialect == "postgresql" else CrawlState.value
        kept = stored < stmt.excluded.value if forward_only else None
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=[CrawlState.key], set_={"value": stmt.excluded.value}, where=kept
            )
        )


def start_scan(
    catalog: Catalog, *, trigger: str, endpoint: str | None, params: Mapping[str, Any]
) -> int:
    """Insert a ``running`` scan row; return its id.

    Callers hold the crawl lock, so any other ``running`` row belongs to a process that died
    (SIGKILL, power loss): it is closed as ``failed`` rather than left running forever.
    """
    with catalog.session() as s:
        for stale in s.scalars(select(Scan).where(Scan.status == "running")):
            stale.status = "failed"
            stale.finished_at = stale.finished_at or now_utc()
            stale.message = "abandoned: the crawl process ended without finishing"
        scan = Scan(
            started_at=now_utc(),
            status="running",
            trigger=trigger,
            endpoint=endpoint,
            params=dict(params),
        )
        s.add(scan)
        s.flush()
        return scan.id


def finish_scan(
    catalog: Catalog, scan_id: int, totals: ScanTotals, *, status: str, message: str | None
) -> None:
    """Record the pass's totals and final status (ok, interrupted, failed)."""
    with catalog.session() as s:
        scan = s.get(Scan, scan_id)
        if scan is None:
            return
        scan.finished_at = now_utc()
        scan.status = status
        scan.message = message
        for name, value in totals.counters().items():
            setattr(scan, name, value)


def record_errors(catalog: Catalog, scan_id: int, errors: Iterable[ErrorRecord]) -> None:
    """Insert ``scan_errors`` rows in their own transaction."""
    rows = list(errors)
    if not rows:
        return
    with catalog.session() as s:
        add_errors(s, scan_id, rows)


def add_errors(s: Any, scan_id: int, errors: Iterable[ErrorRecord]) -> None:
    at = now_utc()
    for e in errors:
        s.add(
            ScanError(
                scan_id=scan_id,
                repo_id=e.repo_id,
                path=e.path,
                kind=e.kind,
                message=e.message[:2000],
                at=at,
            )
        )
