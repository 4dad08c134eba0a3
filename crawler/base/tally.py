"""Counters that several threads add to, read as consistent snapshots (pure: no I/O).

Each add replaces a frozen value under a lock, so a reader never sees half an update.
Details: docs/internals/base.md#tally
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Generic, TypeVar

__all__ = ["Tally"]

T = TypeVar("T")


class Tally(Generic[T]):
    """A frozen dataclass of counters, added to by name."""

    def __init__(self, initial: T) -> None:
        self._value = initial
        self._lock = threading.Lock()

    @property
    def value(self) -> T:
        """The counters now (an immutable snapshot)."""
        return self._value

    def add(self, **deltas: float) -> None:
        """Add ``deltas`` to the named counters."""
        with self._lock:
            old: Any = self._value
            self._value = dataclasses.replace(
                old, **{name: getattr(old, name) + delta for name, delta in deltas.items()}
            )
