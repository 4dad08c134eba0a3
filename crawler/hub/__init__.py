"""Hub client (I/O): discover GGUF repos, list their files, read byte ranges of files.

May import: base.
Details: docs/internals/hub.md#overview
"""

from __future__ import annotations

from crawler.hub.client import (
    DEFAULT_AUTHORS,
    DEFAULT_SEARCH_TERMS,
    LISTING_EXPAND,
    LISTING_PAGE_SIZE,
    HubClient,
)
from crawler.hub.limiter import RateLimiter
from crawler.hub.reader import RangeReader
from crawler.hub.records import HubFile, HubStats, RepoListing

__all__ = [
    "DEFAULT_AUTHORS",
    "DEFAULT_SEARCH_TERMS",
    "LISTING_EXPAND",
    "LISTING_PAGE_SIZE",
    "HubClient",
    "HubFile",
    "HubStats",
    "RangeReader",
    "RateLimiter",
    "RepoListing",
]
