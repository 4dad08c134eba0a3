"""The errors crawls recorded (scan_errors), counted by kind and listed newest first.

Read path of quants serve's scans page and /api/scans, through a Reader (plain SQL).
Details: docs/internals/catalog.md#scan_errors
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from crawler.catalog.history import iso_utc
from crawler.catalog.reader import Reader, as_datetime

__all__ = ["ScanErrorRecord", "error_counts", "recent_errors"]


@dataclass(frozen=True, slots=True)
class ScanErrorRecord:
    """One recorded error: which scan, where, what kind, the message."""

    scan_id: int
    repo_id: str | None
    path: str | None
    kind: str
    message: str
    at: datetime | None

    def to_json(self) -> dict[str, Any]:
        """One item of ``/api/scans``'s ``errors``."""
        return {
            "scan_id": self.scan_id,
            "repo": self.repo_id,
            "path": self.path,
            "kind": self.kind,
            "message": self.message,
            "at": iso_utc(self.at),
        }


def error_counts(reader: Reader) -> dict[str, int]:
    """Errors of all scans by kind, most frequent first."""
    rows = reader.rows(
        "SELECT kind, COUNT(*) FROM scan_errors GROUP BY kind ORDER BY COUNT(*) DESC, kind"
    )
    return {str(kind): int(n) for kind, n in rows}


def recent_errors(reader: Reader, *, limit: int) -> list[ScanErrorRecord]:
    """The newest ``limit`` errors."""
    rows = reader.rows(
        "SELECT scan_id, repo_id, path, kind, message, at FROM scan_errors"
        " ORDER BY id DESC LIMIT :limit",
        {"limit": limit},
    )
    return [
        ScanErrorRecord(scan_id, repo, path, kind, message, as_datetime(at))
        for scan_id, repo, path, kind, message, at in rows
    ]
