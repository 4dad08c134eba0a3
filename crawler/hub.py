"""Hub client (I/O): discover GGUF repos, list their files, read byte ranges of files.

The only module that talks to the Hugging Face Hub. It speaks the REST shapes huggingface_hub 2.4
sends (``hf_api.py`` ``list_models`` / ``list_repo_tree``, ``file_download.py`` ``hf_hub_url``)
over the library's shared httpx2 session (``utils/_http.py`` ``get_session``), and adds what a
crawler needs and the library lacks: one retry policy for every call (the library retries
listings but not ``model_info``; reference/hf-hub-api.md section 4.3), a client-side rate limiter
per Hub bucket, a global request/byte budget, per-request stats and logs, and errors from
:mod:`crawler.errors`. It never puts the token in a message or a log line.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final
from urllib.parse import quote, urlsplit

import httpx2
from huggingface_hub import get_session, hf_hub_url
from huggingface_hub.errors import OfflineModeIsEnabled

# Public in huggingface_hub.utils (its __init__ re-exports it lazily, which mypy cannot see).
from huggingface_hub.utils._http import parse_ratelimit_headers

from crawler import __version__
from crawler.config import Settings
from crawler.errors import (
    ConfigError,
    HubBudgetExhausted,
    HubError,
    HubGated,
    HubNotFound,
    HubRateLimited,
    HubUnavailable,
)

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_AUTHORS",
    "DEFAULT_SEARCH_TERMS",
    "LISTING_EXPAND",
    "HubClient",
    "HubFile",
    "HubStats",
    "RangeReader",
    "RateLimiter",
    "RepoListing",
]

#: Properties requested with ``expand`` when listing: enough to decide "unchanged" (``sha``,
#: ``lastModified``) and to record lineage (``cardData.base_model``, ``base_model:quantized:``
#: tags) without any per-repo call. ``gguf`` and ``siblings`` are left out on purpose: ``gguf``
#: carries the whole chat template (KBs per row) and describes one file only
#: (reference/hf-hub-api.md 1.5).
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

#: Authors that publish the quants the catalog is about (issue #5).
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

#: Search terms that find UD / Dynamic / MTP-preserving quants by other publishers (issue #5).
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

# Same statuses huggingface_hub retries (utils/_http.py _DEFAULT_RETRY_ON_STATUS_CODES).
_RETRY_STATUSES: Final = frozenset({408, 429, 500, 502, 503, 504})
# Same schedule as huggingface_hub's http_backoff: 1, 2, 4, 8, 8 s.
_BASE_WAIT_S: Final = 1.0
_MAX_BACKOFF_S: Final = 8.0
# A 429 asking for more than one rate-limit window (5 min, docs/hub/rate-limits.md) is not waited
# out inside a call: HubRateLimited goes up so the crawl can record it and move on.
_MAX_RATE_WAIT_S: Final = 300.0
# JSON replies (listings, trees) are small; a larger body is a broken or hostile server.
_MAX_JSON_BYTES: Final = 64 * 1024 * 1024
# How long a reader reuses the signed CDN URL of its first read. The Hub's are "signed and
# short-lived" (reference/hf-hub-api.md 3.1, lifetime not published); the reads of one header
# take seconds, and a refused URL falls back to the Hub anyway.
_CDN_URL_MAX_AGE_S: Final = 60.0

#: Quotas per 5-minute window (docs/hub/rate-limits.md, Sep 2025): anonymous per IP, and the
#: free-user tier for a token (the plan behind a token is unknown, so assume the smallest).
_QUOTAS_ANON: Final = {"api": 500, "resolvers": 3000}
_QUOTAS_TOKEN: Final = {"api": 1000, "resolvers": 5000}
_WINDOW_S: Final = 300.0

#: Query parameters as httpx2 takes them (repeated keys allowed, as the Hub wants for expand).
_Params = list[tuple[str, str | int | float | bool | None]]

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


# --------------------------------------------------------------------------- domain values


@dataclass(frozen=True, slots=True)
class RepoListing:
    """One model repo as the listing (or ``repo_info``) describes it; no per-file data."""

    repo_id: str
    sha: str | None
    last_modified: datetime | None
    created_at: datetime | None = None
    author: str | None = None
    private: bool = False
    #: ``None`` when not gated, else the Hub's mode (``"auto"`` or ``"manual"``).
    gated: str | None = None
    disabled: bool = False
    tags: tuple[str, ...] = ()
    #: ``cardData.base_model`` (a string or a list on the Hub), normalised to a tuple.
    card_base_models: tuple[str, ...] = ()
    #: ``cardData.base_model_relation`` (``"quantized"``, ``"finetune"``, ...), if set.
    base_model_relation: str | None = None
    downloads: int | None = None
    likes: int | None = None

    @property
    def quantized_from(self) -> tuple[str, ...]:
        """Base models named by ``base_model:quantized:<id>`` tags (the Hub derives them)."""
        prefix = "base_model:quantized:"
        return tuple(t[len(prefix) :] for t in self.tags if t.startswith(prefix))


@dataclass(frozen=True, slots=True)
class HubFile:
    """One file of a repo tree at a revision."""

    path: str
    size: int
    #: Git blob id (SHA-1 of the file, or of the LFS pointer for LFS files).
    blob_id: str
    #: sha256 of the content for LFS files (``lfs.oid``); equals ``X-Linked-Etag`` on resolve.
    lfs_oid: str | None = None

    @property
    def content_key(self) -> str:
        """Identity of the bytes: the LFS sha256 when there is one, else the git blob id."""
        return self.lfs_oid or self.blob_id


@dataclass(frozen=True, slots=True)
class HubStats:
    """Counters since the client was created (a snapshot)."""

    #: Every HTTP request sent, redirect hops included.
    requests: int = 0
    #: Requests to the Hub's ``/api/`` bucket.
    api_requests: int = 0
    #: Requests to ``/resolve/`` URLs (the Hub's "resolvers" bucket).
    resolver_requests: int = 0
    #: Requests that followed a redirect to another origin (the CDN).
    cdn_requests: int = 0
    #: Response body bytes received (JSON and file bytes).
    bytes_fetched: int = 0
    retries: int = 0
    #: Seconds spent waiting for the rate limiter, Retry-After and backoff.
    waited_s: float = 0.0
    #: Ranged reads answered with 200 and the whole file (served by streaming, then cut).
    range_ignored: int = 0


# --------------------------------------------------------------------------- rate limiting


class RateLimiter:
    """Client-side pacing per Hub bucket (``api``, ``resolvers``), thread-safe.

    A sliding-window log: never more than ``quota`` requests per bucket in any ``window_s``
    seconds, which keeps within the Hub's fixed 5-minute windows whatever their alignment. A
    bucket can also be blocked until a time the Hub named (``RateLimit: ...;r=0;t=T`` or
    ``Retry-After``), which pauses every thread that uses it.
    """

    def __init__(
        self,
        quotas: Mapping[str, int],
        *,
        window_s: float = _WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._quotas = dict(quotas)
        self._window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._log: dict[str, deque[float]] = {b: deque() for b in quotas}
        self._blocked_until: dict[str, float] = {}

    @classmethod
    def for_hub(
        cls, *, authenticated: bool, clock: Callable[[], float] = time.monotonic
    ) -> RateLimiter:
        """The Hub's published quotas: anonymous per IP, or the free-user tier with a token."""
        return cls(_QUOTAS_TOKEN if authenticated else _QUOTAS_ANON, clock=clock)

    def reserve(self, bucket: str) -> float:
        """Reserve a slot in ``bucket``; return how many seconds to sleep before sending."""
        with self._lock:
            now = self._clock()
            start = max(now, self._blocked_until.get(bucket, 0.0))
            quota = self._quotas.get(bucket)
            if quota is not None:
                log = self._log[bucket]
                while log and log[0] <= now - self._window_s:
                    log.popleft()
                if len(log) >= quota:
                    start = max(start, log[-quota] + self._window_s)
                log.append(start)
            return start - now

    def block(self, bucket: str, seconds: float) -> None:
        """Hold every request to ``bucket`` for ``seconds`` from now (the Hub asked us to)."""
        with self._lock:
            until = self._clock() + seconds
            self._blocked_until[bucket] = max(self._blocked_until.get(bucket, 0.0), until)


# --------------------------------------------------------------------------- the client


@dataclass(slots=True)
class _Counters:
    requests: int = 0
    api_requests: int = 0
    resolver_requests: int = 0
    cdn_requests: int = 0
    bytes_fetched: int = 0
    retries: int = 0
    waited_s: float = 0.0
    range_ignored: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(slots=True)
class _Reply:
    """A finished exchange: final status and headers, the Hub's own headers, the body."""

    status: int
    headers: httpx2.Headers
    hub_headers: httpx2.Headers
    body: bytes
    next_url: str | None
    #: HTTP requests this exchange took, retries and redirect hops included.
    requests: int = 0
    #: Where the body came from (the CDN URL after a redirect).
    final_url: str = ""


class _Retry(Exception):
    """Internal: this attempt failed in a way worth retrying after ``wait_s``."""

    def __init__(self, reason: str, *, wait_s: float | None = None, status: int | None = None):
        super().__init__(reason)
        self.reason = reason
        self.wait_s = wait_s
        self.status = status


class HubClient:
    """Discovery, file listing and ranged reads against the Hub named by ``settings.hf_endpoint``.

    Thread-safe: the crawl reads headers from several threads through one client. Every call
    retries 408/429/5xx, resets, timeouts and truncated bodies (backoff 1, 2, 4, 8, 8 s as
    huggingface_hub does, or the wait the Hub asked for), then raises a :class:`HubError`.
    ``sleep`` and ``clock`` are injectable so tests need not wait in real time.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        limiter: RateLimiter | None = None,
        max_retries: int = 5,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.endpoint = settings.hf_endpoint.rstrip("/")
        self._token = settings.hf_token
        self._timeout_s = settings.timeout_s
        self._max_requests = settings.max_requests
        self._max_bytes = settings.max_bytes
        self._max_retries = max_retries
        self._sleep = sleep
        self._clock = clock
        self._limiter = limiter or RateLimiter.for_hub(authenticated=bool(self._token), clock=clock)
        self._counters = _Counters()
        self._hub_origin = _origin(self.endpoint)

    # ----------------------------------------------------------------------- public API

    @property
    def stats(self) -> HubStats:
        """A snapshot of the request, byte, retry and wait counters."""
        c = self._counters
        with c.lock:
            return HubStats(
                requests=c.requests,
                api_requests=c.api_requests,
                resolver_requests=c.resolver_requests,
                cdn_requests=c.cdn_requests,
                bytes_fetched=c.bytes_fetched,
                retries=c.retries,
                waited_s=c.waited_s,
                range_ignored=c.range_ignored,
            )

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
        params: _Params = [("filter", f) for f in filters]
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
            listing = _parse_listing(item)
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
            remaining = None if limit is None else limit - len(seen)
            if remaining is not None and remaining <= 0:
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

        Raises HubNotFound, HubGated (never for metadata: the Hub serves gated repos' metadata),
        HubRateLimited, HubUnavailable, HubBudgetExhausted.
        """
        url = f"{self.endpoint}/api/models/{repo_id}"
        if revision is not None:
            url += f"/revision/{quote(revision, safe='')}"
        reply = self._fetch(
            "GET", url, params=[("expand", e) for e in LISTING_EXPAND], repo_id=repo_id
        )
        listing = _parse_listing(_json(reply, url, repo_id))
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
        for entry in self._paginate(
            url, [("recursive", "true"), ("expand", "false")], repo_id=repo_id
        ):
            if entry.get("type") != "file":
                continue
            hub_file = _parse_tree_file(entry)
            if hub_file is None:
                raise HubUnavailable(
                    "the Hub sent a malformed tree entry", repo_id=repo_id, url=url
                )
            files.append(hub_file)
        return tuple(files)

    def range_reader(self, repo_id: str, path: str, revision: str) -> RangeReader:
        """A ``ReadAt`` (``(offset, length) -> bytes``) over the file's resolve URL.

        Pin ``revision`` to the commit sha: the resolve URL is then immutable. The reader follows
        the Hub's redirect to the CDN (httpx2 drops ``Authorization`` when the redirect leaves the
        Hub's origin, ``_client.py`` ``_redirect_headers``), asks for exactly the bytes wanted and,
        if the server ignores ``Range``, streams and stops after them.
        """
        url = hf_hub_url(repo_id, path, revision=revision, endpoint=self.endpoint)
        return RangeReader(self, url, repo_id=repo_id)

    def read_range(self, repo_id: str, path: str, revision: str, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (fewer only at end of file); see :meth:`range_reader`."""
        return self.range_reader(repo_id, path, revision)(offset, length)

    # ----------------------------------------------------------------------- internals

    def _paginate(
        self, url: str, params: _Params, *, repo_id: str | None
    ) -> Iterator[dict[str, Any]]:
        """Yield JSON objects of a paginated list, following ``Link`` URLs verbatim (as
        huggingface_hub ``utils/_pagination.py`` does)."""
        next_url: str | None = url
        first = True
        while next_url is not None:
            reply = self._fetch("GET", next_url, params=params if first else None, repo_id=repo_id)
            first = False
            data = _json(reply, next_url, repo_id)
            if not isinstance(data, list):
                raise HubUnavailable("the Hub sent a non-list page", repo_id=repo_id, url=url)
            for item in data:
                if isinstance(item, dict):
                    yield item
            next_url = reply.next_url
            if next_url is not None and _origin(next_url) != self._hub_origin:
                # A Link pointing elsewhere would carry our token there; refuse it.
                raise HubUnavailable("pagination link leaves the Hub", repo_id=repo_id, url=url)

    def _headers(self) -> dict[str, str]:
        """User-agent and, with a token, ``Authorization`` (sent to the Hub origin only).

        Built here rather than with ``build_hf_headers``: that reads the token store and the
        environment behind Settings' back and, unless telemetry is disabled, fetches
        ``{huggingface.co}/api/agent-harnesses`` whatever endpoint we use
        (``utils/_headers.py`` ``_http_user_agent`` -> ``utils/_detect_agent.py``).
        """
        import huggingface_hub

        headers = {
            "user-agent": f"quants/{__version__}; hf_hub/{huggingface_hub.__version__}",
        }
        if self._token:
            headers["authorization"] = f"Bearer {self._token}"
        return headers

    def _bucket(self, url: str) -> str:
        if _origin(url) != self._hub_origin:
            return "cdn"  # not the Hub's: no Hub quota applies
        path = urlsplit(url).path
        return "resolvers" if "/resolve/" in path else "api"

    def _charge(self, **deltas: float) -> None:
        c = self._counters
        with c.lock:
            for key, value in deltas.items():
                setattr(c, key, getattr(c, key) + value)

    def _check_budget(self, url: str, repo_id: str | None) -> None:
        c = self._counters
        with c.lock:
            over_requests = self._max_requests is not None and c.requests >= self._max_requests
            over_bytes = self._max_bytes is not None and c.bytes_fetched >= self._max_bytes
        if over_requests:
            raise HubBudgetExhausted(
                f"request budget of {self._max_requests} spent", repo_id=repo_id, url=url
            )
        if over_bytes:
            raise HubBudgetExhausted(
                f"byte budget of {self._max_bytes} spent", repo_id=repo_id, url=url
            )

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._charge(waited_s=seconds)
            self._sleep(seconds)

    def _fetch(
        self,
        method: str,
        url: str,
        *,
        params: _Params | None,
        repo_id: str | None,
        byte_range: tuple[int, int] | None = None,
        token: bool = True,
    ) -> _Reply:
        """One logical request with retries; raises a HubError for a final failure.

        ``token=False`` sends no ``Authorization`` (requests straight to the CDN)."""
        bucket = self._bucket(url)
        backoff = _BASE_WAIT_S
        attempt = 0
        tally = [0]  # HTTP requests sent for this call, across attempts and hops
        while True:
            attempt += 1
            self._check_budget(url, repo_id)
            self._wait(self._limiter.reserve(bucket))
            try:
                reply = self._attempt(
                    method, url, params, repo_id, bucket, byte_range, tally, token
                )
                reply.requests = tally[0]
                return reply
            except _Retry as retry:
                if (
                    retry.status == 429
                    and retry.wait_s is not None
                    and retry.wait_s > _MAX_RATE_WAIT_S
                ):
                    raise HubRateLimited(
                        f"rate limited by the Hub for {retry.wait_s:.0f} s",
                        retry_after=retry.wait_s,
                        repo_id=repo_id,
                        url=url,
                        status=429,
                    ) from None
                if attempt > self._max_retries:
                    if retry.status == 429:
                        raise HubRateLimited(
                            f"still rate limited after {self._max_retries} retries",
                            retry_after=retry.wait_s,
                            repo_id=repo_id,
                            url=url,
                            status=429,
                        ) from None
                    raise HubUnavailable(
                        f"{retry.reason} (gave up after {self._max_retries} retries)",
                        repo_id=repo_id,
                        url=url,
                        status=retry.status,
                    ) from None
                wait = retry.wait_s if retry.wait_s is not None else backoff
                logger.warning("retrying %s %s in %.1f s: %s", method, url, wait, retry.reason)
                self._charge(retries=1)
                if retry.wait_s is not None:
                    # The Hub named the wait: block the bucket, so this thread (at its next
                    # reserve()) and every other thread on the bucket honour it.
                    self._limiter.block(bucket, wait)
                else:
                    self._wait(backoff)
                    backoff = min(_MAX_BACKOFF_S, backoff * 2)

    def _attempt(
        self,
        method: str,
        url: str,
        params: _Params | None,
        repo_id: str | None,
        bucket: str,
        byte_range: tuple[int, int] | None,
        tally: list[int],
        token: bool,
    ) -> _Reply:
        headers = self._headers()
        if not token:
            headers.pop("authorization", None)
        if byte_range is not None:
            start, length = byte_range
            headers["range"] = f"bytes={start}-{start + length - 1}"
            # As get_hf_file_metadata does: no transfer compression, so bytes on the wire are
            # the file's bytes and the budget counts what the CDN sent.
            headers["accept-encoding"] = "identity"
        started = time.monotonic()  # real time: the body deadline guards real sockets
        try:
            session = get_session()
            with session.stream(
                method, url, params=params, headers=headers, timeout=self._timeout_s
            ) as response:
                hub_response = response.history[0] if response.history else response
                tally[0] += self._count_hops(response, bucket)
                self._observe_ratelimit(bucket, hub_response.headers)
                status = response.status_code
                if status in _RETRY_STATUSES:
                    raise _Retry(
                        f"HTTP {status}",
                        wait_s=_retry_wait(response.headers, status),
                        status=status,
                    )
                if status >= 400 and status != 416:
                    raise _map_error(response, url, repo_id)
                body = self._read_body(response, byte_range, started, url, repo_id)
                next_url = response.links.get("next", {}).get("url")
                return _Reply(
                    status,
                    response.headers,
                    hub_response.headers,
                    body,
                    next_url,
                    final_url=str(response.url),
                )
        except httpx2.TimeoutException as exc:
            raise _Retry(f"timeout ({type(exc).__name__})") from None
        except (httpx2.NetworkError, httpx2.RemoteProtocolError) as exc:
            # Resets and bodies shorter than Content-Length land here (httpcore raises
            # RemoteProtocolError: "peer closed connection without sending complete message
            # body").
            raise _Retry(f"connection failed ({type(exc).__name__})") from None
        except OfflineModeIsEnabled:
            # HF_HUB_OFFLINE=1 makes the library's request hook refuse every request.
            raise ConfigError("HF_HUB_OFFLINE is set: the Hub cannot be reached") from None
        except RuntimeError as exc:
            # The shared session was closed by another caller (huggingface_hub's http_backoff
            # closes it on ConnectError); get_session() builds a new one on the next attempt.
            if "closed" not in str(exc):
                raise
            raise _Retry("session closed") from None

    def _count_hops(self, response: httpx2.Response, bucket: str) -> int:
        hops = [*response.history, response]
        cdn = sum(1 for r in hops if _origin(str(r.url)) != self._hub_origin)
        hub = len(hops) - cdn
        self._charge(
            requests=len(hops),
            cdn_requests=cdn,
            api_requests=hub if bucket == "api" else 0,
            resolver_requests=hub if bucket == "resolvers" else 0,
        )
        for hop in hops:
            # Log the Hub URL of each hop; CDN URLs are signed, so only their host is logged.
            shown = str(hop.url) if _origin(str(hop.url)) == self._hub_origin else hop.url.host
            logger.info('HTTP %s %s "%s"', hop.request.method, shown, hop.status_code)
        return len(hops)

    def _observe_ratelimit(self, bucket: str, headers: httpx2.Headers) -> None:
        # The Hub sends RateLimit on every response (reference/hf-hub-api.md 4.1): when a window
        # is spent (r=0), hold the bucket until it resets instead of collecting 429s.
        info = parse_ratelimit_headers(headers)
        if info is not None and info.remaining == 0:
            # The header names its bucket ("api", "resolvers", "pages"); trust it over the URL.
            self._limiter.block(info.resource_type or bucket, float(info.reset_in_seconds))

    def _read_body(
        self,
        response: httpx2.Response,
        byte_range: tuple[int, int] | None,
        started: float,
        url: str,
        repo_id: str | None,
    ) -> bytes:
        """Read the body, bounded: JSON up to a cap; a ranged read up to the bytes wanted.

        When the server ignored ``Range`` (200 and the whole file), stream from byte 0 and stop
        as soon as ``offset + length`` bytes have arrived, so no file is downloaded whole.
        """
        if byte_range is None:
            limit, skip = _MAX_JSON_BYTES, 0
        elif response.status_code == 416:
            return b""
        elif response.status_code == 206:
            first = _content_range_start(response.headers.get("content-range"))
            if first != byte_range[0]:
                raise _Retry(f"Content-Range does not start at {byte_range[0]}")
            limit, skip = byte_range[1], 0
        else:
            self._charge(range_ignored=1)
            logger.warning("server ignored Range for %s; streaming the prefix only", url)
            limit, skip = byte_range[0] + byte_range[1], byte_range[0]
        chunks: list[bytes] = []
        got = 0
        for chunk in response.iter_bytes():  # as received, so the deadline check runs
            take = chunk[: max(0, limit - got)]
            got += len(take)
            self._charge(bytes_fetched=len(chunk))
            chunks.append(take)
            if self._max_bytes is not None and self.stats.bytes_fetched > self._max_bytes:
                raise HubBudgetExhausted(
                    f"byte budget of {self._max_bytes} spent", repo_id=repo_id, url=url
                )
            if got >= limit:
                if byte_range is None:
                    raise HubUnavailable(
                        "the Hub sent an oversized reply", repo_id=repo_id, url=url
                    )
                break
            if time.monotonic() - started > self._timeout_s:
                raise _Retry("body too slow")
        body = b"".join(chunks)
        return body[skip:]


class RangeReader:
    """``ReadAt`` over one resolve URL: ``reader(offset, length) -> bytes``.

    Returns exactly ``length`` bytes, fewer only at end of file. After the first read it knows
    the file's ``size`` (from ``Content-Range``) and the Hub's ``etag`` (``X-Linked-Etag``, the
    sha256 of LFS content) and ``commit`` (``X-Repo-Commit``); a later read through the Hub that
    sees a different etag raises :class:`HubUnavailable` (the file changed under us). Counts its
    own requests and bytes for ``quants inspect``.

    Later reads go straight to the signed CDN URL the first read was redirected to (no token, no
    Hub request: it halves the requests of a multi-read header and spares the Hub's "resolvers"
    quota). The URL names the content (sha256 or Xet hash), so its bytes cannot change; it
    expires (reference/hf-hub-api.md 3.4), so it is used for a minute at most, and any
    refusal (401/403/404/410) sends the read back through the Hub.
    """

    def __init__(self, client: HubClient, url: str, *, repo_id: str) -> None:
        self.url = url
        self.repo_id = repo_id
        self.size: int | None = None
        self.etag: str | None = None
        self.commit: str | None = None
        self.requests = 0
        self.bytes_fetched = 0
        self._client = client
        self._cdn_url: str | None = None
        self._cdn_since = 0.0

    def __call__(self, offset: int, length: int) -> bytes:
        """Read ``length`` bytes at ``offset``."""
        if offset < 0 or length < 0:
            raise ValueError("offset and length must be non-negative")
        if length == 0 or (self.size is not None and offset >= self.size):
            return b""
        reply = self._from_cdn(offset, length)
        if reply is None:
            reply = self._client._fetch(
                "GET", self.url, params=None, repo_id=self.repo_id, byte_range=(offset, length)
            )
            self._count(reply)
            self._learn(reply)
            if reply.status == 206 and _origin(reply.final_url) != self._client._hub_origin:
                self._cdn_url, self._cdn_since = reply.final_url, time.monotonic()
        if reply.status == 416:
            return b""
        if len(reply.body) < length and (self.size is None or offset + len(reply.body) < self.size):
            raise HubUnavailable(
                f"short read: {len(reply.body)} of {length} bytes at {offset}",
                repo_id=self.repo_id,
                url=self.url,
            )
        return reply.body

    def _from_cdn(self, offset: int, length: int) -> _Reply | None:
        """The read from the remembered CDN URL, or None when there is none (any more)."""
        if self._cdn_url is None or time.monotonic() - self._cdn_since > _CDN_URL_MAX_AGE_S:
            self._cdn_url = None
            return None
        try:
            reply = self._client._fetch(
                "GET",
                self._cdn_url,
                params=None,
                repo_id=self.repo_id,
                byte_range=(offset, length),
                token=False,
            )
        except HubError as exc:
            if exc.status not in (401, 403, 404, 410):
                raise
            logger.info("CDN URL refused (HTTP %s); resolving again through the Hub", exc.status)
            self._cdn_url = None
            return None
        self._count(reply)
        total = _content_range_total(reply.headers.get("content-range"))
        if total is not None:
            self.size = total
        return reply

    def _count(self, reply: _Reply) -> None:
        self.requests += reply.requests
        self.bytes_fetched += len(reply.body)

    def _learn(self, reply: _Reply) -> None:
        hub = reply.hub_headers
        etag = _unquote_etag(hub.get("x-linked-etag") or hub.get("etag"))
        if etag is not None:
            if self.etag is not None and etag != self.etag:
                raise HubUnavailable(
                    "file changed between two reads", repo_id=self.repo_id, url=self.url
                )
            self.etag = etag
        self.commit = hub.get("x-repo-commit") or self.commit
        total = _content_range_total(reply.headers.get("content-range"))
        if total is None and reply.status == 200:
            linked = hub.get("x-linked-size") or reply.headers.get("content-length")
            total = int(linked) if linked and linked.isdigit() else None
        if total is not None:
            self.size = total


# --------------------------------------------------------------------------- parsing helpers


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme, 0)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


def _retry_wait(headers: httpx2.Headers, status: int) -> float | None:
    """The wait the server asked for, as huggingface_hub reads it (utils/_http.py
    ``_http_backoff_base``): ``RateLimit`` r=0 -> t + 1 s, else an integer ``Retry-After``."""
    if status == 429:
        info = parse_ratelimit_headers(headers)
        if info is not None and info.remaining == 0:
            return float(info.reset_in_seconds) + 1.0
    retry_after = (headers.get("retry-after") or "").strip()
    return float(retry_after) if retry_after.isdigit() else None


def _map_error(response: httpx2.Response, url: str, repo_id: str | None) -> HubError:
    """HTTP error -> our tree, by the rules of huggingface_hub ``hf_raise_for_status``
    (utils/_http.py): ``X-Error-Code`` first, then status. Messages never echo request headers."""
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


_NOT_FOUND_CODES: Final = {
    "RepoNotFound": "repo",
    "RevisionNotFound": "revision",
    "EntryNotFound": "file",
}


def _json(reply: _Reply, url: str, repo_id: str | None) -> Any:
    import json

    try:
        return json.loads(reply.body)
    except ValueError:
        raise HubUnavailable("the Hub sent invalid JSON", repo_id=repo_id, url=url) from None


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _str_tuple(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(v for v in value if isinstance(v, str))
    return ()


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _parse_listing(item: Any) -> RepoListing | None:
    """A listing / model_info JSON object -> RepoListing; None when it has no usable ``id``."""
    if not isinstance(item, dict):
        return None
    repo_id = item.get("id")
    if not isinstance(repo_id, str) or repo_id.count("/") != 1:
        return None
    card_data = item.get("cardData")
    card: dict[str, Any] = card_data if isinstance(card_data, dict) else {}
    gated = item.get("gated")
    sha = item.get("sha")
    relation = card.get("base_model_relation")
    return RepoListing(
        repo_id=repo_id,
        sha=sha if isinstance(sha, str) else None,
        last_modified=_parse_time(item.get("lastModified")),
        created_at=_parse_time(item.get("createdAt")),
        author=item.get("author") if isinstance(item.get("author"), str) else None,
        private=item.get("private") is True,
        gated=gated if isinstance(gated, str) else None,
        disabled=item.get("disabled") is True,
        tags=_str_tuple(item.get("tags")),
        card_base_models=_str_tuple(card.get("base_model")),
        base_model_relation=relation if isinstance(relation, str) else None,
        downloads=_opt_int(item.get("downloads")),
        likes=_opt_int(item.get("likes")),
    )


def _parse_tree_file(entry: Mapping[str, Any]) -> HubFile | None:
    """A tree entry of type "file" -> HubFile (``RepoFile`` requires path, size and oid)."""
    path, size, oid = entry.get("path"), _opt_int(entry.get("size")), entry.get("oid")
    if not isinstance(path, str) or not isinstance(oid, str) or size is None or size < 0:
        return None
    lfs = entry.get("lfs")
    lfs_oid = lfs.get("oid") if isinstance(lfs, dict) else None
    return HubFile(
        path=path,
        size=size,
        blob_id=oid,
        lfs_oid=lfs_oid if isinstance(lfs_oid, str) else None,
    )


def _content_range_start(value: str | None) -> int | None:
    match = _CONTENT_RANGE.fullmatch(value.strip()) if value else None
    return int(match.group(1)) if match else None


def _content_range_total(value: str | None) -> int | None:
    if not value:
        return None
    total = value.rsplit("/", 1)[-1].strip()
    return int(total) if total.isdigit() else None


def _unquote_etag(value: str | None) -> str | None:
    if not value:
        return None
    value = value.strip()
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"') or None
