"""Progress reporting for a crawl pass: the Progress protocol and two implementations.

The library never writes to a terminal itself; the CLI and the scheduler plug in their own.
Details: docs/internals/crawl.md#progress
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Protocol, TextIO

__all__ = ["CrawlCounts", "NullProgress", "Progress", "StderrProgress"]


@dataclass(frozen=True, slots=True)
class CrawlCounts:
    """Running totals of a crawl pass, as shown on the progress bar."""

    repos: int = 0
    files: int = 0
    bytes_fetched: int = 0
    requests: int = 0
    errors: int = 0


class Progress(Protocol):
    """Receives progress of a crawl pass. ``total`` is None when the listing size is unknown."""

    def start(self, total: int | None) -> None:
        """The pass begins."""

    def advance(self, label: str, counts: CrawlCounts) -> None:
        """One repo is done (``label`` is its id); ``counts`` are the totals so far."""

    def finish(self) -> None:
        """The pass ended (normally or not)."""


class NullProgress:
    """Reports nothing."""

    def start(self, total: int | None) -> None:
        """Do nothing."""

    def advance(self, label: str, counts: CrawlCounts) -> None:
        """Do nothing."""

    def finish(self) -> None:
        """Do nothing."""


def _printable(text: str) -> str:
    # Hub text must never drive the terminal: escape anything non-printable (ESC included).
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _human(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


class StderrProgress:
    """A one-line status bar on a terminal (redrawn at most ``interval_s`` apart).

    On a non-terminal stream it prints nothing until ``finish``, so logs stay clean. Repo ids
    come from the Hub: control characters are escaped before they reach the terminal.
    """

    def __init__(self, stream: TextIO | None = None, *, interval_s: float = 0.1) -> None:
        self._stream = stream or sys.stderr
        self._interval_s = interval_s
        self._total: int | None = None
        self._last = 0.0
        self._started = 0.0
        self._counts = CrawlCounts()
        self._lock = threading.Lock()
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())

    def start(self, total: int | None) -> None:
        """Remember the total and the start time."""
        self._total = total
        self._started = time.monotonic()

    def advance(self, label: str, counts: CrawlCounts) -> None:
        """Redraw the bar with the new totals."""
        with self._lock:
            self._counts = counts
            now = time.monotonic()
            if not self._tty or now - self._last < self._interval_s:
                return
            self._last = now
            self._draw(label)

    def _line(self, label: str) -> str:
        c = self._counts
        of = f"/{self._total}" if self._total is not None else ""
        line = (
            f"repos {c.repos}{of}  files {c.files}  {_human(c.bytes_fetched)}  "
            f"req {c.requests}  errors {c.errors}"
        )
        if label:
            line += f"  {_printable(label)[:60]}"
        return line

    def _draw(self, label: str) -> None:
        self._stream.write("\r\x1b[2K" + self._line(label))
        self._stream.flush()

    def finish(self) -> None:
        """End the bar with a final summary line."""
        with self._lock:
            elapsed = time.monotonic() - self._started if self._started else 0.0
            prefix = "\r\x1b[2K" if self._tty else ""
            self._stream.write(f"{prefix}{self._line('')}  ({elapsed:.1f} s)\n")
            self._stream.flush()
