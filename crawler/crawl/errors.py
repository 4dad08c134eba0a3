"""What went wrong in a crawl, as scan_errors rows: the kind of an exception and the row.

The crawl records one row per failed repo or file and goes on.
Details: docs/internals/crawl.md#errors
"""

from __future__ import annotations

from crawler.base.errors import (
    GGUFError,
    HubBudgetExhausted,
    HubError,
    HubGated,
    HubNotFound,
    HubRateLimited,
    HubUnavailable,
)
from crawler.catalog.scans import ErrorRecord

__all__ = ["ContentChanged", "error_kind", "error_record"]


def error_kind(exc: BaseException, *, during: str = "read") -> str:
    """The ``scan_errors.kind`` of an exception (see ``catalog/tables.py`` ScanError).

    ``during`` is ``"list"`` for the tree listing (a missing repo there has vanished) or
    ``"read"`` for a header read.
    """
    text = str(exc).lower()
    if isinstance(exc, HubBudgetExhausted):
        return "budget"
    if isinstance(exc, HubRateLimited):
        return "http_429"
    if isinstance(exc, HubGated):
        return "gated"
    if isinstance(exc, HubNotFound):
        if text.startswith("revision not found"):
            return "changed"
        if during == "list":
            # Listed a moment ago, now 404 (or, anonymously, 401: the Hub answers the same for
            # deleted and private repos, hub._map_error): gone from public view either way.
            return "vanished"
        return "private" if "private" in text else "not_found"
    if isinstance(exc, ContentChanged) or "changed" in text:
        return "changed"
    if isinstance(exc, HubUnavailable):
        for marker, kind in (
            ("http 5", "http_5xx"),
            ("http 429", "http_429"),
            ("timeout", "timeout"),
            ("too slow", "timeout"),
            # httpcore: a body shorter than Content-Length ("peer closed connection without
            # sending complete message body") is a RemoteProtocolError.
            ("remoteprotocolerror", "truncated"),
            ("connection", "reset"),
            ("session closed", "reset"),
            ("short read", "truncated"),
            ("content-range", "range_ignored"),
        ):
            if marker in text:
                return kind
        return "other"
    if isinstance(exc, GGUFError):
        return "malformed_gguf"
    if isinstance(exc, HubError):
        return "http_5xx" if "http 5" in text else "other"
    return "other"


class ContentChanged(HubError):
    """The bytes served are not the ones the tree listed (re-upload during the crawl)."""


def error_record(
    kind: str, message: object, repo_id: str | None, path: str | None = None
) -> ErrorRecord:
    """A ``scan_errors`` row (messages are the exceptions' one-line texts)."""
    return ErrorRecord(kind=kind, message=str(message), repo_id=repo_id, path=path)
