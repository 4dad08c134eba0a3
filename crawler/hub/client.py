"""``HubClient``: discovery (``list_models``), repo info, file trees, range readers."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote

from huggingface_hub import hf_hub_url

from crawler.base.config import Settings
from crawler.base.errors import HubNotFound, HubUnavailable
from crawler.hub.limiter import RateLimiter
from crawler.hub.reader import RangeReader
from crawler.hub.records import (
    HubFile,
    HubStats,
    RepoListing,
    parse_listing,
    parse_tree_file,
)
from crawler.hub.status import origin
from crawler.hub.transport import Params, Reply, Transport

logger = logging.getLogger(__name__)

#: Properties requested with ``expand`` when listing: enough to decide "unchanged" (``sha``,
#: ``lastModified``) and to record lineage (``cardData.base_model``, ``base_model:quantized:``
#: tags) without any per-repo call. ``gguf`` and ``siblings`` are left out on purpose: ``gguf``
#: carries the whole chat template (KBs per row) and describes one file only
#: (huggingface_hub hf_api.py, ``expand``).
LISTING_EXPAND: Final = (
    "author",
    "sha",
    "lastModified",
    "createdAt",
    "private",
    "gated",
    "disabled",
    "tags",
    "cardData",
    "downloads",
    "likes",
)

#: Authors that publish the quants the catalog is about (docs/crawling.md).
DEFAULT_AUTHORS: Final = (
    "unsloth",
    "bartowski",
    "mradermacher",
    "lmstudio-community",
    "ggml-org",
    "ubergarm",
    "havenoammo",
    "localweights",
    "AesSedai",
)

#: Search terms that find UD / Dynamic / MTP-preserving quants by other publishers
#: (docs/crawling.md).
DEFAULT_SEARCH_TERMS: Final = (
    "UD",
    "Dynamic",
    "MTP",
    "nextn",
    "imatrix",
    "i1-GGUF",
    "heretic",
    "abliterated",
)

# huggingface.js pages model listings by 500 (packages/hub/src/lib/list-models.ts); the Hub
# carries ``limit`` into the ``Link: rel="next"`` URL as the page size.
LISTING_PAGE_SIZE: Final = 500


class HubClient:
    """Discovery, file listing and ranged reads against the Hub named by ``settings.hf_endpoint``.

    Thread-safe: the crawl reads headers from several threads through one client. Every call
    retries 408/429/5xx, resets, timeouts and truncated bodies (``settings.retries`` times, with a
    back-off of 1, 2, 4, 8, 8 s as huggingface_hub does, scaled by ``settings.backoff_s``, or the
    wait the Hub asked for), then raises a HubError. ``max_retries`` overrides the setting;
    ``sleep`` and ``clock`` are injectable so tests need not wait in real time. ``fail_fast``
    (a person is waiting): a Hub that has not answered one request of this client and lets the
    first one time out, or refuses the connection, is unreachable at once (no retries).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        limiter: RateLimiter | None = None,
        max_retries: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        fail_fast: bool = False,
    ) -> None:
        retries = settings.retries if max_retries is None else max_retries
        self._transport = Transport(
            settings,
            limiter=limiter,
            max_retries=retries,
            sleep=sleep,
            clock=clock,
            fail_fast=fail_fast,
        )
        self.endpoint = self._transport.endpoint

    @property
    def stats(self) -> HubStats:
        """A snapshot of the request, byte, retry and wait counters."""
        return self._transport.stats

    def iter_models(
        self,
        *,
        search: str | None = None,
        author: str | None = None,
        filters: Iterable[str] = ("gguf",),
        since: datetime | None = None,
        limit: int | None = None,
        expand: Iterable[str] = LISTING_EXPAND,
    ) -> Iterator[RepoListing]:
        """Yield model repos, most recently modified first (``sort=lastModified``).

        The request is the one ``HfApi.list_models(filter=..., author=..., search=...,
        sort="last_modified", limit=..., expand=[...])`` sends; pages (``Link: rel="next"``) are
        fetched lazily, so stopping early saves requests. With ``since`` (timezone-aware), the
        listing stops at the first repo last modified strictly before it: pass the previous
        watermark minus an overlap. ``limit`` caps the number of repos yielded.
        """
        if since is not None and since.tzinfo is None:
            since = since.replace(tzinfo=UTC)  # the Hub's times are UTC ("...Z")
        params: Params = [("filter", f) for f in filters]
        if author:
            params.append(("author", author))
        if search:
            params.append(("search", search))
        params.append(("sort", "lastModified"))
        page = LISTING_PAGE_SIZE if limit is None else max(1, min(limit, LISTING_PAGE_SIZE))
        params.append(("limit", str(page)))
        params.extend(("expand", e) for e in expand)
        yielded = 0
        for item in self._paginate(f"{self.endpoint}/api/models", params, repo_id=None):
            listing = parse_listing(item)
            if listing is None:
                continue
            if since is not None and listing.last_modified and listing.last_modified < since:
                return
            yield listing
            yielded += 1
            if limit is not None and yielded >= limit:
                return

    def discover(
        self,
        *,
        authors: Iterable[str] = (),
        searches: Iterable[str] = (),
        base_models: Iterable[str] = (),
        since: datetime | None = None,
        limit: int | None = None,
    ) -> Iterator[RepoListing]:
        """Yield GGUF repos from several listings, each repo once (first seen wins).

        One listing per author, per search term and per base model (``filter=base_model:
        quantized:<id>``); with none given, one listing of every GGUF repo. ``since`` and
        ``limit`` apply to each listing and to the total respectively.
        """
        queries: list[dict[str, Any]] = [{"author": a} for a in authors]
        queries += [{"search": s} for s in searches]
        queries += [{"filters": ("gguf", f"base_model:quantized:{b}")} for b in base_models]
        if not queries:
            queries = [{}]
        seen: set[str] = set()
        for query in queries:
            if limit is not None and len(seen) >= limit:
                return
            for listing in self.iter_models(since=since, **query):
                if listing.repo_id in seen:
                    continue
                seen.add(listing.repo_id)
                yield listing
                if limit is not None and len(seen) >= limit:
                    return

    def repo_info(self, repo_id: str, revision: str | None = None) -> RepoListing:
        """One repo's listing fields (``GET /api/models/{repo}[/revision/{rev}]?expand=...``).

        Raises HubNotFound, HubRateLimited, HubUnavailable, HubBudgetExhausted (never HubGated:
        the Hub serves gated repos' metadata).
        """
        url = f"{self.endpoint}/api/models/{repo_id}"
        if revision is not None:
            url += f"/revision/{quote(revision, safe='')}"
        params: Params = [("expand", e) for e in LISTING_EXPAND]
        listing = parse_listing(
            _json(self._transport.fetch(url, params=params, repo_id=repo_id), repo_id)
        )
        if listing is None:
            raise HubUnavailable("the Hub sent a malformed repo record", repo_id=repo_id, url=url)
        return listing

    def list_files(self, repo_id: str, revision: str) -> tuple[HubFile, ...]:
        """Every file of the repo at ``revision`` (pass the commit sha), folders descended.

        The request ``HfApi.list_repo_tree(repo_id, recursive=True, revision=...)`` sends:
        ``GET /api/models/{repo}/tree/{rev}?recursive=true&expand=false``, paginated by ``Link``.
        """
        url = f"{self.endpoint}/api/models/{repo_id}/tree/{quote(revision, safe='')}"
        files: list[HubFile] = []
        params: Params = [("recursive", "true"), ("expand", "false")]
        for entry in self._paginate(url, params, repo_id=repo_id):
            if entry.get("type") != "file":
                continue
            hub_file = parse_tree_file(entry)
            if hub_file is None:
                raise HubUnavailable(
                    "the Hub sent a malformed tree entry", repo_id=repo_id, url=url
                )
            if not is_safe_repo_path(hub_file.path):
                # The Hub's git never lists such paths; an HTTP client would normalise "a/../b"
                # into another URL on the same host, token attached. Skip them.
                logger.warning("skipping unsafe path %r in %s", hub_file.path, repo_id)
                continue
            files.append(hub_file)
        return tuple(files)

    def range_reader(self, repo_id: str, path: str, revision: str) -> RangeReader:
        """A ``ReadAt`` (``(offset, length) -> bytes``) over the file's resolve URL.

        Pin ``revision`` to the commit sha: the resolve URL is then immutable. The reader follows
        the Hub's redirect to the CDN (httpx2 drops ``Authorization`` when the redirect leaves the
        Hub's origin, ``_client.py`` ``_redirect_headers``), asks for exactly the bytes wanted and,
        if the server ignores ``Range``, streams and stops after them.
        """
        if not is_safe_repo_path(path):
            raise HubNotFound(f"refusing the unsafe path {path!r}", repo_id=repo_id)
        url = hf_hub_url(repo_id, path, revision=revision, endpoint=self.endpoint)
        return RangeReader(self._transport, url, repo_id=repo_id)

    def read_range(self, repo_id: str, path: str, revision: str, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (fewer only at end of file); see range_reader."""
        return self.range_reader(repo_id, path, revision)(offset, length)

    def _paginate(
        self, url: str, params: Params, *, repo_id: str | None
    ) -> Iterator[dict[str, Any]]:
        """Yield JSON objects of a paginated list, following ``Link`` URLs verbatim (as
        huggingface_hub ``utils/_pagination.py`` does)."""
        next_url: str | None = url
        first = True
        while next_url is not None:
            reply = self._transport.fetch(
                next_url, params=params if first else None, repo_id=repo_id
            )
            first = False
            data = _json(reply, repo_id)
            if not isinstance(data, list):
                raise HubUnavailable("the Hub sent a non-list page", repo_id=repo_id, url=url)
            for item in data:
                if isinstance(item, dict):
                    yield item
            next_url = reply.next_url
            if next_url is not None and origin(next_url) != self._transport.hub_origin:
                # A Link pointing elsewhere would carry our token there; refuse it.
                raise HubUnavailable("pagination link leaves the Hub", repo_id=repo_id, url=url)


def _json(reply: Reply, repo_id: str | None) -> Any:
    try:
        return json.loads(reply.body)
    except ValueError:
        raise HubUnavailable(
            "the Hub sent invalid JSON", repo_id=repo_id, url=reply.final_url
        ) from None


def is_safe_repo_path(path: str) -> bool:
    """A relative path without empty, ``.`` or ``..`` segments or backslashes.

    Other odd characters (terminal escapes included) are legal in Hub file names: they are
    percent-quoted in the URL, stored intact and printed escaped.
    """
    if not path or path.startswith("/") or "\\" in path:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))
