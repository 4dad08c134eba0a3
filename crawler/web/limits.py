"""Limits of quants serve's HTTP server: which Host names it answers, and bounded connections.

A Host check on every bind, a header timeout, and a connection cap.
Details: docs/internals/web.md#limits
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "HEADER_TIMEOUT_S",
    "IDLE_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "HeaderTimeoutH11",
    "bind_address",
    "header_timeout_protocol",
    "is_loopback",
]

HEADER_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 5
MAX_CONNECTIONS = 64


def bind_address(host: str) -> str | None:
    """The IP address ``host`` names as the resolver reads it (numeric forms only: no DNS), or
    None when it is a name."""
    try:
        infos = socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError):
        return None
    return str(infos[0][4][0]) if infos else None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address in any numeric spelling, or ``localhost``) is loopback."""
    if host.lower().rstrip(".") == "localhost":
        return True
    address = bind_address(host)
    if address is None:
        return False
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


class HeaderTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers are not complete
    within HEADER_TIMEOUT_S (from its opening, or from the previous response)."""

    header_timeout = HEADER_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._waiting_cycle: Any = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_request()

    def _await_request(self) -> None:
        self._cancel_header_timer()
        self._waiting_cycle = self.cycle
        self._header_timer = self.loop.call_later(self.header_timeout, self._too_slow)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        if self._header_timer is not None and self.cycle is not self._waiting_cycle:
            self._cancel_header_timer()  # a new request's headers arrived

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)


def header_timeout_protocol(seconds: float | None = None) -> type[HeaderTimeoutH11]:
    """HeaderTimeoutH11 with a header timeout of ``seconds`` (None: HEADER_TIMEOUT_S), for
    ``quants serve --header-timeout``."""
    if seconds is None or seconds == HEADER_TIMEOUT_S:
        return HeaderTimeoutH11
    return type("HeaderTimeoutH11", (HeaderTimeoutH11,), {"header_timeout": seconds})
