"""The emulator's two HTTP origins on 127.0.0.1: the Hub (REST API + resolve) and a "CDN".

Stdlib ``ThreadingHTTPServer`` speaking HTTP/1.1 with keep-alive, so faults can act at the socket
level (reset, truncated body, slow body). Every request is logged (RequestRecord).
Routes and answers are those huggingface_hub 2.4 calls (hf_api.py, file_download.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Literal
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from tests.hub_emulator import routes
from tests.hub_emulator.faults import Fault, FaultPlan
from tests.hub_emulator.reply import Reply, error_reply
from tests.hub_emulator.state import Blob, HubState

Origin = Literal["hub", "cdn"]


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the emulator saw it and answered it."""

    origin: Origin
    method: str
    path: str
    query: str
    range: str | None
    status: int
    bytes_sent: int
    authorization: bool
    user_agent: str | None
    fault: str | None
    at: float
    #: Arrival order: the log is sorted by it (responses may finish in another order).
    seq: int = 0

    @property
    def params(self) -> list[tuple[str, str]]:
        """The query as (key, value) pairs, decoded, repeats kept."""
        return parse_qsl(self.query, keep_blank_values=True)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # The default backlog of 5 drops SYNs when a crawl opens 8-16 connections at once, and the
    # client's SYN retry then costs a full second.
    request_queue_size = 128

    def __init__(self, emulator: HubEmulator, origin: Origin) -> None:
        self.emulator = emulator
        self.origin: Origin = origin
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a crawl stopped, a timed-out read) is no error of the
        server's: socketserver's default prints its traceback into the test run's output."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Idle keep-alive connections end after this; the client opens a new one.
    timeout = 30
    server: _Server
    error_message_format = '{"error": "%(message)s"}'
    error_content_type = "application/json"
    _reset: ClassVar[bool] = False

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without TCP_NODELAY, Nagle plus the
        # client's delayed ACK add ~40 ms to every keep-alive request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the request log replaces the stderr lines."""

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:  # LFS uploads (tests/hub_emulator/datasets.py)
        self._handle("PUT")

    def do_DELETE(self) -> None:  # repo deletion (tests/hub_emulator/datasets.py)
        self._handle("DELETE")

    def finish(self) -> None:
        with contextlib.suppress(OSError):  # the socket was reset or closed on purpose
            super().finish()

    def _handle(self, method: str) -> None:
        emu = self.server.emulator
        seq = emu.begin()
        try:
            self._answer(emu, method, seq)
        finally:
            emu.end()

    def _answer(self, emu: HubEmulator, method: str, seq: int) -> None:
        origin = self.server.origin
        split = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        auth = self.headers.get("Authorization")
        token = auth[7:] if auth and auth.startswith("Bearer ") else None
        fault = emu.faults.pick(origin, method, unquote(split.path))
        record = {
            "origin": origin,
            "method": method,
            "path": split.path,
            "query": split.query,
            "range": self.headers.get("Range"),
            "authorization": auth is not None,
            "user_agent": self.headers.get("User-Agent"),
            "fault": fault.kind if fault else None,
            "at": time.monotonic(),
            "seq": seq,
        }
        if emu.latency_s:
            time.sleep(emu.latency_s)
        if fault is not None and fault.kind == "delay":
            time.sleep(fault.seconds)
        if fault is not None and fault.kind == "action":
            assert fault.action is not None
            fault.action()
        if fault is not None and fault.kind == "reset":
            emu.record(RequestRecord(status=0, bytes_sent=0, **record))  # type: ignore[arg-type]
            self._reset_connection()
            return
        if fault is not None and fault.kind == "status":
            reply = error_reply(
                fault.status, fault.message or "injected", None, dict(fault.headers)
            )
        else:
            request = routes.Request(
                method=method,
                path=split.path,
                params=parse_qsl(split.query, keep_blank_values=True),
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
                token=token,
                ignore_range=fault is not None and fault.kind == "ignore_range",
            )
            reply = routes.route(emu, origin, request)
        if origin == "hub":
            reply = emu.apply_rate_limit(split.path, reply)
        sent = self._send(method, reply, fault)
        emu.record(RequestRecord(status=reply.status, bytes_sent=sent, **record))  # type: ignore[arg-type]

    def _send(self, method: str, reply: Reply, fault: Fault | None) -> int:
        self.send_response(reply.status)
        reply.headers.setdefault(
            "X-Request-Id", f"Root={hashlib.sha1(self.path.encode()).hexdigest()}"
        )
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(reply.length))
        self.end_headers()
        if method == "HEAD":
            return 0
        sent = 0
        try:
            if fault is not None and fault.kind == "truncate":
                for chunk in reply.chunks():
                    piece = chunk[: max(0, fault.after_bytes - sent)]
                    self.wfile.write(piece)
                    sent += len(piece)
                    if sent >= fault.after_bytes:
                        break
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return sent
            size = fault.chunk if fault is not None and fault.kind == "slow" else 64 * 1024
            for chunk in reply.chunks(size):
                self.wfile.write(chunk)
                sent += len(chunk)
                if fault is not None and fault.kind == "slow":
                    self.wfile.flush()
                    time.sleep(fault.seconds)
            self.wfile.flush()
        except OSError:
            self.close_connection = True  # the client went away (it stopped reading)
        return sent

    def _reset_connection(self) -> None:
        # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()


class HubEmulator:
    """The emulated Hub: ``state`` (repos), ``faults`` (injection), ``requests`` (the log).

    ``start()`` binds both origins on 127.0.0.1 (ephemeral ports); ``endpoint`` is the Hub's base
    URL to give to ``Settings(hf_endpoint=...)`` or ``HfApi(endpoint=...)``.
    """

    def __init__(self, state: HubState | None = None) -> None:
        self.state = state or HubState()
        self.faults = FaultPlan()
        #: Page-size cap of ``/api/models`` (the Hub's ``limit`` acts as the page size).
        self.max_page_size = 1000
        #: Tree page sizes (1000, or 50 with expand=true: hf_api.py ``list_repo_tree`` docstring).
        self.tree_page_size = 1000
        self.tree_expand_page_size = 50
        #: Added to every request on both origins (benchmarks: round-trip latency).
        self.latency_s = 0.0
        #: Per-bucket quota per window (docs/hub/rate-limits.md); huge by default so tests that do
        #: not care never hit it, while RateLimit headers are sent on every Hub response.
        self.quotas: dict[str, int] = {"api": 1_000_000, "resolvers": 1_000_000}
        self.window_s = 300.0
        #: Lifetime of signed CDN URLs, in seconds.
        self.cdn_url_ttl_s = 3600.0
        self._window: tuple[float, dict[str, int]] = (0.0, {})
        self._log: list[RequestRecord] = []
        self._log_lock = threading.Lock()
        self._idle = threading.Condition()
        self._in_flight = 0
        self._arrivals = 0
        self._servers: list[_Server] = []
        self._threads: list[threading.Thread] = []
        self._secret = b"emulator-cdn-secret"

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> HubEmulator:
        """Bind and serve both origins in daemon threads."""
        origins: tuple[Origin, ...] = ("hub", "cdn")
        for origin in origins:
            server = _Server(self, origin)
            thread = threading.Thread(
                target=server.serve_forever, args=(0.05,), daemon=True, name=f"emu-{origin}"
            )
            thread.start()
            self._servers.append(server)
            self._threads.append(thread)
        self._window = (time.monotonic(), {})
        return self

    def stop(self) -> None:
        """Stop serving and close the sockets."""
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def __enter__(self) -> HubEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        """Base URL of the Hub origin."""
        return f"http://127.0.0.1:{self._servers[0].server_address[1]}"

    @property
    def cdn_endpoint(self) -> str:
        """Base URL of the CDN origin (another port: another origin for the client)."""
        return f"http://127.0.0.1:{self._servers[1].server_address[1]}"

    def reset(self) -> None:
        """Forget faults, the request log and rate-limit counters; restore default settings.

        Waits (up to 2 s) for requests still being answered, e.g. a slow body the previous test
        walked away from, so they do not land in the next test's log.
        """
        self._wait_idle()
        self.faults.clear()
        self.clear_log()
        self.max_page_size = 1000
        self.tree_page_size = 1000
        self.tree_expand_page_size = 50
        self.latency_s = 0.0
        self.quotas = {"api": 1_000_000, "resolvers": 1_000_000}
        self.window_s = 300.0
        self.cdn_url_ttl_s = 3600.0
        self._window = (time.monotonic(), {})

    # --- request log --------------------------------------------------------------------------

    def begin(self) -> int:
        """A request arrives (the handler calls this); returns its arrival number."""
        with self._idle:
            self._in_flight += 1
            self._arrivals += 1
            return self._arrivals

    def end(self) -> None:
        """A request is answered and logged."""
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def record(self, rec: RequestRecord) -> None:
        """Append to the log (the handler calls this)."""
        with self._log_lock:
            self._log.append(rec)

    def clear_log(self) -> None:
        """Empty the request log (after the requests still being answered are logged)."""
        self._wait_idle()
        with self._log_lock:
            self._log.clear()

    def _wait_idle(self) -> None:
        # A client can hold the last byte of a response before the server has logged it.
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=2.0)

    def requests(
        self,
        *,
        origin: Origin | None = None,
        method: str | None = None,
        path: str | None = None,
        status: int | None = None,
    ) -> list[RequestRecord]:
        """Logged requests, filtered; ``path`` is a substring of the (raw) path.

        Waits (up to 2 s) for requests still being answered; in arrival order.
        """
        self._wait_idle()
        with self._log_lock:
            log = sorted(self._log, key=lambda r: r.seq)
        return [
            r
            for r in log
            if (origin is None or r.origin == origin)
            and (method is None or r.method == method)
            and (path is None or path in r.path)
            and (status is None or r.status == status)
        ]

    # --- helpers for routes -------------------------------------------------------------------

    def cdn_url(self, blob: Blob) -> str:
        """A signed, expiring CDN URL for an LFS blob (shaped like the Hub's, reference 3.1)."""
        expires = int(time.time() + self.cdn_url_ttl_s)
        path = f"/repos/{blob.sha256[:2]}/{blob.sha256[2:4]}/{blob.sha256}"
        query = urlencode({"Expires": expires, "Signature": self.sign(path, expires)})
        return f"{self.cdn_endpoint}{path}?{query}"

    def sign(self, path: str, expires: int) -> str:
        """The signature the CDN checks."""
        return hashlib.sha256(self._secret + f"{path}|{expires}".encode()).hexdigest()[:32]

    def link(self, path: str, params: list[tuple[str, str]], cursor: str) -> str:
        """An absolute ``Link: rel="next"`` URL back to this Hub with every original parameter."""
        kept = [(k, v) for k, v in params if k != "cursor"] + [("cursor", cursor)]
        return f'<{self.endpoint}{quote(path)}?{urlencode(kept)}>; rel="next"'

    def apply_rate_limit(self, path: str, reply: Reply) -> Reply:
        """Count the request in its bucket; add ``RateLimit`` headers; 429 past the quota."""
        bucket = "resolvers" if "/resolve/" in path or "/resolve-cache/" in path else "api"
        now = time.monotonic()
        with self._log_lock:
            started, counts = self._window
            if now - started >= self.window_s:
                started, counts = now, {}
                self._window = (started, counts)
            counts[bucket] = counts.get(bucket, 0) + 1
            used = counts[bucket]
        quota = self.quotas.get(bucket, 1_000_000)
        reset = max(1, int(started + self.window_s - now + 0.999))
        remaining = max(0, quota - used)
        if used > quota:
            reply = error_reply(
                429,
                f"You have exceeded our hourly quotas for action '{bucket}'.",
                extra={"Retry-After": str(reset)},
            )
        # An injected 429 brings its own RateLimit headers: keep them.
        reply.headers.setdefault("RateLimit", f'"{bucket}";r={remaining};t={reset}')
        reply.headers.setdefault(
            "RateLimit-Policy", f'"fixed window";"{bucket}";q={quota};w={int(self.window_s)}'
        )
        return reply
