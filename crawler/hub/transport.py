"""One logical Hub request: retries, rate limiting, budget, stats and logs over the library's
HTTP session (huggingface_hub get_session: httpx2, redirects followed).
Details: docs/internals/hub.md#transport
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

import httpx2
from huggingface_hub import get_session
from huggingface_hub.errors import OfflineModeIsEnabled

# Public in huggingface_hub.utils (its __init__ re-exports it lazily, which mypy cannot see).
from huggingface_hub.utils._http import parse_ratelimit_headers

from crawler import __version__
from crawler.base.config import Settings
from crawler.base.errors import (
    ConfigError,
    HubBudgetExhausted,
    HubRateLimited,
    HubUnavailable,
    HubUnreachable,
)
from crawler.base.tally import Tally
from crawler.hub.limiter import RateLimiter
from crawler.hub.records import HubStats
from crawler.hub.status import (
    RETRY_STATUSES,
    content_range_start,
    map_error,
    origin,
    retry_wait,
)

logger = logging.getLogger("crawler.hub")

#: Query parameters as httpx2 takes them (repeated keys allowed, as the Hub wants for expand).
Params = list[tuple[str, str | int | float | bool | None]]

# The back-off doubles from Settings.backoff_s up to this many times it: with the default 1 s,
# huggingface_hub's http_backoff schedule (1, 2, 4, 8, 8 s).
_MAX_BACKOFF_FACTOR: Final = 8.0
# A 429 asking for more than one rate-limit window (5 min, docs/hub/rate-limits.md) is not waited
# out inside a call: HubRateLimited goes up so the crawl can record it and move on.
_MAX_RATE_WAIT_S: Final = 300.0
# A whole body may take this many timeouts (30 s at the default 10 s): QUANTS_TIMEOUT bounds the
# connect and each read, a body as a whole gets longer.
_BODY_DEADLINE_FACTOR: Final = 3.0
# JSON replies (listings, trees) are small; a larger body is a broken or hostile server.
_MAX_JSON_BYTES: Final = 64 * 1024 * 1024


@dataclass(slots=True)
class Reply:
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
    """This attempt failed in a way worth retrying after ``wait_s`` (None: backoff)."""

    def __init__(self, reason: str, *, wait_s: float | None = None, status: int | None = None):
        super().__init__(reason)
        self.reason = reason
        self.wait_s = wait_s
        self.status = status


class Transport:
    """Sends requests for one client: thread-safe, with shared stats, limiter and budget."""

    def __init__(
        self,
        settings: Settings,
        *,
        limiter: RateLimiter | None,
        max_retries: int,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
        fail_fast: bool = False,
    ) -> None:
        self.endpoint = settings.hf_endpoint.rstrip("/")
        self.hub_origin = origin(self.endpoint)
        self._token = settings.hf_token
        # Connect and each read (the first byte included) wait at most timeout_s; a body as a
        # whole gets a longer deadline, so a large header on a slow line still arrives.
        self._timeout_s = settings.timeout_s
        self._body_deadline_s = _BODY_DEADLINE_FACTOR * settings.timeout_s
        self._fail_fast = fail_fast
        self._answered = False  # any response from the server, on this transport
        self._max_requests = settings.max_requests
        self._max_bytes = settings.max_bytes
        self._max_retries = max_retries
        self._backoff_s = settings.backoff_s
        self._sleep = sleep
        self._limiter = limiter or RateLimiter.for_hub(authenticated=bool(self._token), clock=clock)
        self._stats = Tally(HubStats())

    @property
    def stats(self) -> HubStats:
        """A snapshot of the counters."""
        return self._stats.value

    def fetch(
        self,
        url: str,
        *,
        params: Params | None,
        repo_id: str | None,
        byte_range: tuple[int, int] | None = None,
        token: bool = True,
    ) -> Reply:
        """GET ``url`` with retries; raise a HubError for a final failure.

        ``byte_range=(offset, length)`` asks for those bytes (a 416 comes back as a Reply with
        an empty body). ``token=False`` sends no ``Authorization`` (requests straight to the
        CDN).
        """
        bucket = self._bucket(url)
        backoff = self._backoff_s
        attempt = 0
        tally = [0]  # HTTP requests sent for this call, across attempts and hops
        while True:
            attempt += 1
            self._check_budget(url, repo_id)
            self._wait(self._limiter.reserve(bucket))
            try:
                reply = self._attempt(url, params, repo_id, bucket, byte_range, tally, token)
                reply.requests = tally[0]
                return reply
            except _Retry as retry:
                self._give_up_or_wait(retry, attempt, bucket, backoff, url, repo_id)
                if retry.wait_s is None:
                    backoff = min(_MAX_BACKOFF_FACTOR * self._backoff_s, backoff * 2)

    # --- one attempt ------------------------------------------------------------------------

    def _give_up_or_wait(
        self,
        retry: _Retry,
        attempt: int,
        bucket: str,
        backoff: float,
        url: str,
        repo_id: str | None,
    ) -> None:
        if retry.status == 429 and retry.wait_s is not None and retry.wait_s > _MAX_RATE_WAIT_S:
            raise HubRateLimited(
                f"rate limited by the Hub for {retry.wait_s:.0f} s",
                retry_after=retry.wait_s,
                repo_id=repo_id,
                url=url,
                status=429,
            )
        if attempt > self._max_retries:
            if retry.status == 429:
                raise HubRateLimited(
                    f"still rate limited after {self._max_retries} retries",
                    retry_after=retry.wait_s,
                    repo_id=repo_id,
                    url=url,
                    status=429,
                )
            raise HubUnavailable(
                f"{retry.reason} (gave up after {self._max_retries} retries)",
                repo_id=repo_id,
                url=url,
                status=retry.status,
            )
        wait = retry.wait_s if retry.wait_s is not None else backoff
        logger.warning("retrying GET %s in %.1f s: %s", url, wait, retry.reason)
        self._stats.add(retries=1)
        if retry.wait_s is not None:
            # The Hub named the wait: block the bucket, so this thread (at its next reserve())
            # and every other thread on the bucket honour it.
            self._limiter.block(bucket, wait)
        else:
            self._wait(backoff)

    def _attempt(
        self,
        url: str,
        params: Params | None,
        repo_id: str | None,
        bucket: str,
        byte_range: tuple[int, int] | None,
        tally: list[int],
        token: bool,
    ) -> Reply:
        headers = self._headers(token)
        if byte_range is not None:
            start, length = byte_range
            headers["range"] = f"bytes={start}-{start + length - 1}"
            # As get_hf_file_metadata does: no transfer compression, so bytes on the wire are
            # the file's bytes and the budget counts what the CDN sent.
            headers["accept-encoding"] = "identity"
        started = time.monotonic()  # real time: the body deadline guards real sockets
        try:
            with get_session().stream(
                "GET", url, params=params, headers=headers, timeout=self._timeout_s
            ) as response:
                self._answered = True
                hub_response = response.history[0] if response.history else response
                tally[0] += self._count_hops(response, bucket)
                self._observe_ratelimit(bucket, hub_response.headers)
                status = response.status_code
                if status in RETRY_STATUSES:
                    wait = retry_wait(response.headers, status)
                    raise _Retry(f"HTTP {status}", wait_s=wait, status=status)
                if status >= 400 and status != 416:
                    raise map_error(response, url, repo_id)
                body = self._read_body(response, byte_range, started, url, repo_id)
                return Reply(
                    status,
                    response.headers,
                    hub_response.headers,
                    body,
                    response.links.get("next", {}).get("url"),
                    final_url=str(response.url),
                )
        except httpx2.TimeoutException as exc:
            if self._fail_fast and not self._answered:
                raise HubUnreachable(
                    f"the Hub at {self.endpoint} did not answer within {self._timeout_s:g} s"
                    " (QUANTS_TIMEOUT)",
                    repo_id=repo_id,
                    url=url,
                ) from None
            raise _Retry(f"timeout ({type(exc).__name__})") from None
        except httpx2.ConnectError as exc:
            if self._fail_fast and not self._answered:
                raise HubUnreachable(
                    f"cannot reach the Hub at {self.endpoint} ({exc or type(exc).__name__})",
                    repo_id=repo_id,
                    url=url,
                ) from None
            raise _Retry(f"connection failed ({type(exc).__name__})") from None
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
            first = content_range_start(response.headers.get("content-range"))
            if first != byte_range[0]:
                raise _Retry(f"Content-Range does not start at {byte_range[0]}")
            limit, skip = byte_range[1], 0
        else:
            self._stats.add(range_ignored=1)
            logger.warning("server ignored Range for %s; streaming the prefix only", url)
            limit, skip = byte_range[0] + byte_range[1], byte_range[0]
        chunks: list[bytes] = []
        got = 0
        for chunk in response.iter_bytes():  # as received, so the deadline check runs
            take = chunk[: max(0, limit - got)]
            got += len(take)
            self._stats.add(bytes_fetched=len(chunk))
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
            if time.monotonic() - started > self._body_deadline_s:
                raise _Retry("body too slow")
        return b"".join(chunks)[skip:]

    # --- bookkeeping ------------------------------------------------------------------------

    def _headers(self, token: bool) -> dict[str, str]:
        """User-agent and, with a token, ``Authorization`` (sent to the Hub origin only).

        Built here rather than with ``build_hf_headers``: that reads the token store and the
        environment behind Settings' back and, unless telemetry is disabled, fetches
        ``{huggingface.co}/api/agent-harnesses`` whatever endpoint we use
        (``utils/_headers.py`` ``_http_user_agent`` -> ``utils/_detect_agent.py``).
        """
        import huggingface_hub

        headers = {"user-agent": f"quants/{__version__}; hf_hub/{huggingface_hub.__version__}"}
        if token and self._token:
            headers["authorization"] = f"Bearer {self._token}"
        return headers

    def _bucket(self, url: str) -> str:
        if origin(url) != self.hub_origin:
            return "cdn"  # not the Hub's: no Hub quota applies
        return "resolvers" if "/resolve/" in urlsplit(url).path else "api"

    def _check_budget(self, url: str, repo_id: str | None) -> None:
        c = self._stats.value
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
            self._stats.add(waited_s=seconds)
            self._sleep(seconds)

    def _count_hops(self, response: httpx2.Response, bucket: str) -> int:
        hops = [*response.history, response]
        cdn = sum(1 for r in hops if origin(str(r.url)) != self.hub_origin)
        hub = len(hops) - cdn
        self._stats.add(
            requests=len(hops),
            cdn_requests=cdn,
            api_requests=hub if bucket == "api" else 0,
            resolver_requests=hub if bucket == "resolvers" else 0,
        )
        for hop in hops:
            # Log the Hub URL of each hop; CDN URLs are signed, so only their host is logged.
            shown = str(hop.url) if origin(str(hop.url)) == self.hub_origin else hop.url.host
            logger.info('HTTP %s %s "%s"', hop.request.method, shown, hop.status_code)
        return len(hops)

    def _observe_ratelimit(self, bucket: str, headers: httpx2.Headers) -> None:
        # The Hub sends RateLimit on every response (huggingface.co/docs/hub/rate-limits): when a
        # window is spent (r=0), hold the bucket until it resets instead of collecting 429s.
        info = parse_ratelimit_headers(headers)
        if info is not None and info.remaining == 0:
            # The header names its bucket ("api", "resolvers", "pages"); trust it over the URL.
            self._limiter.block(info.resource_type or bucket, float(info.reset_in_seconds))
