"""RangeReader: the one HTTP range reader, the ReadAt seam of crawler.gguf.parse.

For Hub files and any other http(s) URL alike: one retry policy, one Range-ignored guard.
Details: docs/internals/hub.md#reader
"""

from __future__ import annotations

import logging
import time
from typing import Final

from crawler.base.closing import Closing
from crawler.base.errors import HubError, HubUnavailable
from crawler.hub.status import content_range_total, origin, unquote_etag
from crawler.hub.transport import Reply, Transport

logger = logging.getLogger("crawler.hub")

# How long a reader reuses the signed CDN URL of its first read. The Hub's are "signed and
# short-lived" (huggingface_hub file_download.py; lifetime not published); the reads of one header
# take seconds, and a refused URL falls back to the Hub anyway.
_CDN_URL_MAX_AGE_S: Final = 60.0


class RangeReader(Closing):
    """``ReadAt`` over one resolve URL: ``reader(offset, length) -> bytes``.

    Returns exactly ``length`` bytes, fewer only at end of file. After the first read it knows
    the file's ``size`` (from ``Content-Range``) and the Hub's ``etag`` (``X-Linked-Etag``, the
    sha256 of LFS content) and ``commit`` (``X-Repo-Commit``); a later read through the Hub that
    sees a different etag raises HubUnavailable (the file changed under us). Counts its
    own requests and bytes for ``quants inspect``.

    Later reads go straight to the signed CDN URL the first read was redirected to (no token, no
    Hub request: it halves the requests of a multi-read header and spares the Hub's "resolvers"
    quota). The URL names the content (sha256 or Xet hash), so its bytes cannot change; it
    expires (huggingface_hub file_download.py), so it is used for a minute at most, and any refusal
    (401/403/404/410) sends the read back through the Hub.
    """

    def __init__(
        self, transport: Transport, url: str, *, repo_id: str | None, token: bool = True
    ) -> None:
        self.url = url
        self.repo_id = repo_id
        #: Whether a read was answered with the whole file (the server ignored Range).
        self.range_ignored = False
        self._token = token
        self.size: int | None = None
        self.etag: str | None = None
        self.commit: str | None = None
        self.requests = 0
        self.bytes_fetched = 0
        self._transport = transport
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
            reply = self._transport.fetch(
                self.url,
                params=None,
                repo_id=self.repo_id,
                byte_range=(offset, length),
                token=self._token,
            )
            self._count(reply)
            self._learn(reply)
            if reply.status == 206 and origin(reply.final_url) != self._transport.hub_origin:
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

    def close(self) -> None:
        """Nothing to release: every read's response is closed when the read returns."""

    def _from_cdn(self, offset: int, length: int) -> Reply | None:
        """The read from the remembered CDN URL, or None when there is none (any more)."""
        if self._cdn_url is None or time.monotonic() - self._cdn_since > _CDN_URL_MAX_AGE_S:
            self._cdn_url = None
            return None
        try:
            reply = self._transport.fetch(
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
        total = content_range_total(reply.headers.get("content-range"))
        if total is not None:
            self.size = total
        return reply

    def _count(self, reply: Reply) -> None:
        if reply.status == 200:
            self.range_ignored = True
        self.requests += reply.requests
        self.bytes_fetched += len(reply.body)

    def _learn(self, reply: Reply) -> None:
        hub = reply.hub_headers
        etag = unquote_etag(hub.get("x-linked-etag") or hub.get("etag"))
        if etag is not None:
            if self.etag is not None and etag != self.etag:
                raise HubUnavailable(
                    "file changed between two reads", repo_id=self.repo_id, url=self.url
                )
            self.etag = etag
        self.commit = hub.get("x-repo-commit") or self.commit
        total = content_range_total(reply.headers.get("content-range"))
        if total is None and reply.status == 200:
            linked = hub.get("x-linked-size") or reply.headers.get("content-length")
            total = int(linked) if linked and linked.isdigit() else None
        if total is not None:
            self.size = total
