"""What the Hub's answers mean: retryable statuses, the wait a 429 asks for, error codes mapped
to crawler.base.errors, and the header values (Content-Range, ETag) the readers rely on."""

from __future__ import annotations

import re
from typing import Any, Final
from urllib.parse import urlsplit

import httpx2

# Public in huggingface_hub.utils (its __init__ re-exports it lazily, which mypy cannot see).
from huggingface_hub.utils._http import parse_ratelimit_headers

from crawler.base.errors import ConfigError, HubError, HubGated, HubNotFound

#: Same statuses huggingface_hub retries (utils/_http.py ``_DEFAULT_RETRY_ON_STATUS_CODES``).
RETRY_STATUSES: Final = frozenset({408, 429, 500, 502, 503, 504})

_NOT_FOUND_CODES: Final = {
    "RepoNotFound": "repo",
    "RevisionNotFound": "revision",
    "EntryNotFound": "file",
}
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) with the scheme's default port: what "same origin" compares."""
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme, 0)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


def retry_wait(headers: httpx2.Headers, status: int) -> float | None:
    """The wait the server asked for, as huggingface_hub reads it (utils/_http.py
    ``_http_backoff_base``): ``RateLimit`` r=0 -> t + 1 s, else an integer ``Retry-After``."""
    if status == 429:
        info = parse_ratelimit_headers(headers)
        if info is not None and info.remaining == 0:
            return float(info.reset_in_seconds) + 1.0
    retry_after = (headers.get("retry-after") or "").strip()
    return float(retry_after) if retry_after.isdigit() else None


def map_error(response: httpx2.Response, url: str, repo_id: str | None) -> HubError:
    """HTTP error -> our tree, by the rules of huggingface_hub ``hf_raise_for_status``
    (utils/_http.py): ``X-Error-Code`` first, then status. Messages never echo request headers.

    Raises ConfigError (instead of returning) when the Hub rejects the token itself.
    """
    code = response.headers.get("x-error-code")
    message = response.headers.get("x-error-message") or ""
    status = response.status_code
    where = repo_id or url
    fields: dict[str, Any] = {"repo_id": repo_id, "url": url, "status": status, "code": code}
    if code == "GatedRepo":
        return HubGated(f"{where} is gated: accept its terms with a token", **fields)
    if code in _NOT_FOUND_CODES:
        return HubNotFound(f"{_NOT_FOUND_CODES[code]} not found: {where}", **fields)
    if message == "Access to this resource is disabled.":
        return HubNotFound(f"{where} is disabled", **fields)
    if status == 401:
        if message == "Invalid credentials in Authorization header":
            raise ConfigError("the Hub rejected the HF token (HF_TOKEN)")
        # The Hub answers 401 without a code for private and missing repos alike.
        return HubNotFound(f"not found or private: {where}", **fields)
    if status == 403:
        return HubGated(f"access denied: {where}", **fields)
    if status == 404:
        return HubNotFound(f"not found: {where}", **fields)
    return HubError(f"HTTP {status} from the Hub for {where}", **fields)


def content_range_start(value: str | None) -> int | None:
    """First byte of ``Content-Range: bytes a-b/n``."""
    match = _CONTENT_RANGE.fullmatch(value.strip()) if value else None
    return int(match.group(1)) if match else None


def content_range_total(value: str | None) -> int | None:
    """The total size in ``Content-Range`` (``bytes a-b/n`` or ``bytes */n``)."""
    if not value:
        return None
    total = value.rsplit("/", 1)[-1].strip()
    return int(total) if total.isdigit() else None


def unquote_etag(value: str | None) -> str | None:
    """``"abc"`` / ``W/"abc"`` -> ``abc``."""
    if not value:
        return None
    value = value.strip()
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"') or None
