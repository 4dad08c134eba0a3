"""What a route answers: Reply (status, headers, bytes or a lazily read blob range)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.hub_emulator.state import Blob


@dataclass(slots=True)
class Reply:
    """What a route answers: status, headers, and a body (bytes or a blob range)."""

    status: int
    headers: dict[str, str]
    body: bytes = b""
    blob: Blob | None = None
    start: int = 0
    end: int = -1

    @property
    def length(self) -> int:
        """Content-Length of the body."""
        return self.end - self.start + 1 if self.blob is not None else len(self.body)

    def chunks(self, size: int = 64 * 1024) -> Iterator[bytes]:
        """The body in pieces, reading a blob's range lazily."""
        if self.blob is not None:
            yield from self.blob.iter_range(self.start, self.end, size)
        else:
            for pos in range(0, len(self.body), size):
                yield self.body[pos : pos + size]


def json_reply(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    """A JSON answer."""
    body = json.dumps(data, separators=(",", ":")).encode()
    return Reply(
        status, {"Content-Type": "application/json; charset=utf-8", **(headers or {})}, body
    )


def error_reply(
    status: int, message: str, code: str | None = None, extra: dict[str, str] | None = None
) -> Reply:
    """A Hub error: ``X-Error-Code`` (when there is one), ``X-Error-Message``, JSON body."""
    headers = {"X-Error-Message": message, **(extra or {})}
    if code:
        headers["X-Error-Code"] = code
    return json_reply({"error": message}, status, headers)
