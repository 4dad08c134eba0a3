"""Fault injection for the Hub emulator: what goes wrong, on which requests, how often.

A Rule pairs a Fault with a request matcher (origin, method, path substring or
regex) and a schedule: the Nth matching request, the first K, or a seeded random rate. Every
matching rule counts each request; the first rule that is due decides the fault.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

FaultKind = Literal[
    "status",  # answer with an HTTP error status (and headers such as Retry-After)
    "reset",  # close the connection with a TCP RST before any response
    "slow",  # send the body in small pieces with pauses
    "truncate",  # promise Content-Length N, send fewer bytes, close
    "ignore_range",  # answer a ranged GET with 200 and the whole body
    "delay",  # wait before answering (latency), then answer normally
    "action",  # run a callable (e.g. re-upload a file, delete the repo), then answer normally
]


@dataclass(frozen=True)
class Fault:
    """One misbehaviour. Build with the class methods."""

    kind: FaultKind
    status: int = 0
    headers: tuple[tuple[str, str], ...] = ()
    message: str = ""
    seconds: float = 0.0
    chunk: int = 0
    after_bytes: int = 0
    action: Callable[[], None] | None = None

    @classmethod
    def http(cls, status: int, message: str = "", **headers: str) -> Fault:
        """An error status; ``headers`` use ``_`` for ``-`` (``Retry_After="2"``)."""
        pairs = tuple((k.replace("_", "-"), v) for k, v in headers.items())
        return cls("status", status=status, headers=pairs, message=message)

    @classmethod
    def rate_limited(
        cls, *, retry_after: int | None = 1, reset_s: int | None = None, bucket: str = "api"
    ) -> Fault:
        """429 as the Hub sends it: ``RateLimit: "<bucket>";r=0;t=<reset_s>`` with the policy
        header (docs/hub/rate-limits.md) and/or ``Retry-After``."""
        headers: list[tuple[str, str]] = []
        if retry_after is not None:
            headers.append(("Retry-After", str(retry_after)))
        if reset_s is not None:
            headers.append(("RateLimit", f'"{bucket}";r=0;t={reset_s}'))
            headers.append(("RateLimit-Policy", f'"fixed window";"{bucket}";q=500;w=300'))
        return cls("status", status=429, headers=tuple(headers), message="Too Many Requests")

    @classmethod
    def reset(cls) -> Fault:
        """Connection reset before the response (ECONNRESET at the client)."""
        return cls("reset")

    @classmethod
    def slow(cls, *, chunk: int = 256, pause_s: float = 0.05) -> Fault:
        """Send the body ``chunk`` bytes at a time, pausing ``pause_s`` between pieces."""
        return cls("slow", chunk=chunk, seconds=pause_s)

    @classmethod
    def truncate(cls, after_bytes: int = 100) -> Fault:
        """Send the full Content-Length header but only ``after_bytes`` of the body, then close."""
        return cls("truncate", after_bytes=after_bytes)

    @classmethod
    def ignore_range(cls) -> Fault:
        """Ignore ``Range``: 200 with the whole file (as a misconfigured mirror does)."""
        return cls("ignore_range")

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        """Answer normally after ``seconds`` (round-trip latency for benchmarks)."""
        return cls("delay", seconds=seconds)

    @classmethod
    def run(cls, action: Callable[[], None]) -> Fault:
        """Run ``action`` (mutate the world) just before answering this request normally."""
        return cls("action", action=action)


@dataclass
class Rule:
    """A fault with a matcher and a schedule; ``matched``/``fired`` count what happened."""

    fault: Fault
    origin: Literal["hub", "cdn"] | None = None
    method: str | None = None
    path: str | None = None
    regex: re.Pattern[str] | None = None
    nth: int | None = None
    times: int | None = None
    rate: float | None = None
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    matched: int = 0
    fired: int = 0

    def matches(self, origin: str, method: str, path: str) -> bool:
        """Whether a request is one this rule is about (before the schedule)."""
        if self.origin is not None and origin != self.origin:
            return False
        if self.method is not None and method != self.method:
            return False
        if self.path is not None and self.path not in path:
            return False
        return not (self.regex is not None and not self.regex.search(path))

    def due(self) -> bool:
        """Count a matching request; True when the schedule says this one fails."""
        self.matched += 1
        if self.nth is not None:
            return self.matched == self.nth
        if self.times is not None:
            return self.fired < self.times
        if self.rate is not None:
            return self.rng.random() < self.rate
        return True


class FaultPlan:
    """The ordered rules of one emulator; thread-safe."""

    def __init__(self) -> None:
        self._rules: list[Rule] = []
        self._lock = threading.Lock()

    def add(
        self,
        fault: Fault,
        *,
        origin: Literal["hub", "cdn"] | None = None,
        method: str | None = None,
        path: str | None = None,
        regex: str | None = None,
        nth: int | None = None,
        times: int | None = None,
        rate: float | None = None,
        seed: int = 0,
    ) -> Rule:
        """Add a rule. With none of ``nth``/``times``/``rate`` it fires on every match.

        ``path`` is a substring of the request path (query excluded), ``regex`` a regular
        expression searched in it; ``origin`` is ``"hub"`` or ``"cdn"``.
        """
        rule = Rule(
            fault,
            origin=origin,
            method=method,
            path=path,
            regex=re.compile(regex) if regex else None,
            nth=nth,
            times=times,
            rate=rate,
            rng=random.Random(seed),
        )
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        """Remove every rule."""
        with self._lock:
            self._rules.clear()

    def pick(self, origin: str, method: str, path: str) -> Fault | None:
        """The fault for this request: the first rule that is due. Every matching rule counts
        the request (so ``nth`` means the Nth matching request whatever other rules do)."""
        chosen: Rule | None = None
        with self._lock:
            for rule in self._rules:
                if rule.matches(origin, method, path) and rule.due() and chosen is None:
                    chosen = rule
                    rule.fired += 1
        return chosen.fault if chosen else None
