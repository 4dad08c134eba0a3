"""Hub client (I/O): discover GGUF repos, list their files, read byte ranges of files.

The only code that talks to the Hugging Face Hub. It speaks the REST shapes huggingface_hub 2.4
sends (``hf_api.py`` ``list_models`` / ``list_repo_tree``, ``file_download.py`` ``hf_hub_url``)
over the library's shared httpx2 session (``utils/_http.py`` ``get_session``), and adds what a
crawler needs and the library lacks: one retry policy for every call (the library retries
listings but not ``model_info``; huggingface_hub utils/_http.py), a client-side rate limiter
per Hub bucket, a global request/byte budget, per-request stats and logs, and errors from
crawler.errors. It never puts the token in a message or a log line.

Modules: ``client`` (HubClient), ``reader`` (RangeReader), ``transport`` (one
request: retries, limiter, budget, stats), ``limiter`` (RateLimiter), ``records`` (the
values and the parsing of the Hub's JSON), ``status`` (what statuses and headers mean).
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
