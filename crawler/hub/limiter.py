"""Client-side pacing of Hub requests per rate-limit bucket (thread-safe, clock injectable)."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Final

#: Quotas per 5-minute window (docs/hub/rate-limits.md, Sep 2025): anonymous per IP, and the
#: free-user tier for a token (the plan behind a token is unknown, so assume the smallest).
QUOTAS_ANON: Final = {"api": 500, "resolvers": 3000}
QUOTAS_TOKEN: Final = {"api": 1000, "resolvers": 5000}
WINDOW_S: Final = 300.0


class RateLimiter:
    """Client-side pacing per Hub bucket (``api``, ``resolvers``), thread-safe.

    A sliding-window log: never more than ``quota`` requests per bucket in any ``window_s``
    seconds, which keeps within the Hub's fixed 5-minute windows whatever their alignment. A
    bucket can also be blocked until a time the Hub named (``RateLimit: ...;r=0;t=T`` or
    ``Retry-After``), which pauses every thread that uses it. Buckets without a quota (the CDN)
    are only ever blocked, never paced.
    """

    def __init__(
        self,
        quotas: Mapping[str, int],
        *,
        window_s: float = WINDOW_S,
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
        return cls(QUOTAS_TOKEN if authenticated else QUOTAS_ANON, clock=clock)

    @property
    def quotas(self) -> Mapping[str, int]:
        """Requests allowed per bucket per window."""
        return dict(self._quotas)

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
