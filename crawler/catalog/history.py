"""Scan history read from the catalog: the scans list and "since" windows over it.

The read path of quants scans; returns frozen dataclasses, never ORM rows.
Details: docs/internals/catalog.md#history
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any

from sqlalchemy import select

from crawler.base.errors import UsageError
from crawler.catalog import Catalog
from crawler.catalog.scans import SCAN_COUNTERS, ScanTotals
from crawler.catalog.tables import Scan

__all__ = [
    "ScanRecord",
    "iso_utc",
    "list_scans",
    "parse_since",
    "resolve_since",
    "utc",
]


def utc(value: datetime | None) -> datetime | None:
    """``value`` as an aware UTC datetime (None stays None)."""
    # SQLite hands back naive datetimes; everything the catalog writes is UTC.
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def iso_utc(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a ``Z``, to the second (None stays None)."""
    return None if value is None else value.isoformat(timespec="seconds").replace("+00:00", "Z")


# -- scans -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ScanRecord(ScanTotals):
    """One row of ``quants scans``: its counters and when, why and how it ran."""

    id: int
    started_at: datetime
    finished_at: datetime | None
    status: str
    trigger: str
    message: str | None

    @property
    def duration_s(self) -> float | None:
        """Seconds from start to end; None while running (or when a crash left no end)."""
        if self.finished_at is None:
            return None
        return round((self.finished_at - self.started_at).total_seconds(), 3)

    def to_json(self) -> dict[str, Any]:
        """The stable ``quants scans --json`` shape."""
        return {
            "id": self.id,
            "started_at": iso_utc(self.started_at),
            "finished_at": iso_utc(self.finished_at),
            "duration_s": self.duration_s,
            "status": self.status,
            "trigger": self.trigger,
            **self.counters(),
            "message": self.message,
        }


def _scan_record(row: Scan) -> ScanRecord:
    started = utc(row.started_at)
    assert started is not None
    return ScanRecord(
        id=row.id,
        started_at=started,
        finished_at=utc(row.finished_at),
        status=row.status,
        trigger=row.trigger,
        **{name: getattr(row, name) or 0 for name in SCAN_COUNTERS},
        message=row.message,
    )


def list_scans(catalog: Catalog, *, limit: int | None = None) -> list[ScanRecord]:
    """Scans, newest first."""
    stmt = select(Scan).order_by(Scan.id.desc())
    if limit is not None:
        stmt = stmt.limit(limit)
    with catalog.session() as session:
        return [_scan_record(row) for row in session.scalars(stmt)]


def parse_since(text: str) -> int | datetime:
    """``"12"`` -> scan id 12; ``"2026-05-01"`` / ISO date-time -> UTC datetime (naive = UTC)."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    try:
        if len(value) == 10:
            moment = datetime.combine(date.fromisoformat(value), time())
        else:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--since {text!r}: give a scan id (see `quants scans`) or a date like 2026-05-01"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def resolve_since(
    catalog: Catalog, since: str | None
) -> tuple[datetime | None, int | None, tuple[int, ...]]:
    """(window start, scan id given, ids of the scans in the window).

    No ``since``: the changes of the latest scan. A scan id S: from the start of the first scan
    after S (nothing when S is the latest). A date: from that moment.
    """
    with catalog.session() as session:
        scans = [
            (row.id, utc(row.started_at))
            for row in session.execute(select(Scan.id, Scan.started_at).order_by(Scan.id))
        ]
    if since is None:
        if not scans:
            return None, None, ()
        last_id, last_start = scans[-1]
        return last_start, None, (last_id,)
    target = parse_since(since)
    if isinstance(target, int):
        if target not in {scan_id for scan_id, _ in scans}:
            raise UsageError(f"--since {target}: no such scan (see `quants scans`)")
        later = [(scan_id, start) for scan_id, start in scans if scan_id > target]
        start = later[0][1] if later else None
        return start, target, tuple(scan_id for scan_id, _ in later)
    in_window = tuple(scan_id for scan_id, start in scans if start is not None and start >= target)
    return target, None, in_window
