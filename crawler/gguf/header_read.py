"""One quant file's header in (at most) two requests, reusing tokenizers seen before (pure).

The crawl and the on-demand search read every header through read_quant_header.
Details: docs/internals/gguf.md#header_read
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from crawler.gguf.fetch import ESTIMATE_SLACK, HINT_MARGIN, first_read_for
from crawler.gguf.parse import GGUFHeader, ReadAt, read_header
from crawler.gguf.tokenizer_template import PROBE, TokenizerTemplate, read_templated, template_of

__all__ = [
    "HeaderRead",
    "TemplateBook",
    "TemplateStore",
    "read_quant_header",
    "scopes_for",
]

#: Slack past a template's metadata prefix in the first request: within a repo its quants differ
#: by a key or a longer name (4 KiB); other uploaders add general.* keys, tags and links.
SLACK_SAME_REPO = 4096
SLACK_OTHER_REPO = 16384


#: Bytes of templates a book keeps in memory (each ~2x its block: the bytes and the decoded
#: pairs; a 248k vocabulary's block is ~9.5 MB). Older ones are loaded again from the store.
MEMORY_BUDGET = 256 * 1024 * 1024


class TemplateStore(Protocol):
    """Where templates persist between passes (the catalog)."""

    def load(self, lookup: str) -> TokenizerTemplate | None:
        """The stored template with this lookup, or None."""

    def scoped(self, scopes: Sequence[str]) -> list[tuple[str, str, int, int]]:
        """(scope, fingerprint, block start, header bytes) of the templates these scopes used."""

    def save(self, template: TokenizerTemplate, scopes: Sequence[str], *, with_block: bool) -> None:
        """Record that these scopes use the template; store the template too when
        ``with_block`` (kept once: a concurrent writer's copy wins)."""


def scopes_for(repo_id: str, base_model: str | None) -> tuple[str, ...]:
    """The scopes of a file of ``repo_id`` (quantized from ``base_model``)."""
    return (f"repo:{repo_id}",) + ((f"base:{base_model.lower()}",) if base_model else ())


class TemplateBook:
    """The templates one process knows: by lookup (the most recent within
    MEMORY_BUDGET), which scopes used which, and which are in the store."""

    def __init__(self, store: TemplateStore | None = None, *, budget: int = MEMORY_BUDGET) -> None:
        self._store = store
        self._budget = budget
        self._lock = threading.Lock()
        self._templates: OrderedDict[str, TokenizerTemplate] = OrderedDict()
        self._held = 0
        self._missing: set[str] = set()
        # scope -> fingerprint -> (block start, header bytes): what sizes a first request.
        self._scoped: dict[str, dict[str, tuple[int, int]]] = {}
        self._loaded_scopes: set[str] = set()
        self._stored: set[str] = set()
        self._turns: dict[str, threading.Lock] = {}

    def _keep(self, template: TokenizerTemplate) -> TokenizerTemplate:
        """Hold ``template`` (or the one already held for its lookup); evict the oldest."""
        held = self._templates.get(template.lookup)
        if held is not None:
            self._templates.move_to_end(template.lookup)
            return held
        self._templates[template.lookup] = template
        self._held += 2 * len(template.block)
        self._missing.discard(template.lookup)
        while self._held > self._budget and len(self._templates) > 1:
            _, old = self._templates.popitem(last=False)
            self._held -= 2 * len(old.block)
        return template

    def find(self, lookup: str) -> TokenizerTemplate | None:
        """The template with this lookup (memory, then the store)."""
        with self._lock:
            held = self._templates.get(lookup)
            if held is not None:
                self._templates.move_to_end(lookup)
                return held
            if lookup in self._missing or self._store is None:
                return None
        found = self._store.load(lookup)
        with self._lock:
            if found is None:
                if len(self._missing) > 100_000:
                    self._missing.clear()
                self._missing.add(lookup)
                return None
            self._stored.add(found.fingerprint)
            return self._keep(found)

    def _in_scopes(self, scopes: Sequence[str]) -> list[tuple[str, int, int]]:
        with self._lock:
            todo = [s for s in scopes if s not in self._loaded_scopes]
        if todo and self._store is not None:
            stored = self._store.scoped(todo)
            with self._lock:
                for scope, fingerprint, start, header_bytes in stored:
                    self._stored.add(fingerprint)
                    self._scoped.setdefault(scope, {})[fingerprint] = (start, header_bytes)
        with self._lock:
            self._loaded_scopes.update(todo)
            return [(s, *v) for s in scopes for v in self._scoped.get(s, {}).values()]

    def first_read(self, scopes: Sequence[str]) -> int | None:
        """A small first request when a template is known in these scopes, else None."""
        known = self._in_scopes(scopes)
        if not known:
            return None
        return max(
            start + PROBE + (SLACK_SAME_REPO if s.startswith("repo:") else SLACK_OTHER_REPO)
            for s, start, _ in known
        )

    def size_hint(self, scopes: Sequence[str]) -> int | None:
        """The largest header of a template in these scopes (sizes a full read that follows a
        small first request)."""
        known = self._in_scopes(scopes)
        return max((header_bytes for _, _, header_bytes in known), default=None)

    def add(self, template: TokenizerTemplate, scopes: Sequence[str]) -> None:
        """Remember a template (and store it, once) for these scopes. A template whose lookup
        is taken by another (a look-alike of another length) is not kept: the first stays."""
        with self._lock:
            template = self._keep(template)
            fresh = template.fingerprint not in self._stored
            self._stored.add(template.fingerprint)
            new_scopes = [s for s in scopes if template.fingerprint not in self._scoped.get(s, {})]
            for s in scopes:
                self._scoped.setdefault(s, {})[template.fingerprint] = (
                    template.block_start,
                    template.header_bytes,
                )
        if self._store is not None and (fresh or new_scopes):
            self._store.save(template, scopes if fresh else new_scopes, with_block=fresh)

    @contextmanager
    def turn(self, scopes: Sequence[str]) -> Iterator[None]:
        """Serialise the cold reads of one base model until one of them yields a template:
        the uploaders of a model then pay its tokenizer once, not once each."""
        bases = [s for s in scopes if s.startswith("base:")]
        if not bases or self.first_read(scopes) is not None:
            yield
            return
        with self._lock:
            lock = self._turns.setdefault(bases[0], threading.Lock())
        lock.acquire()
        if self.first_read(scopes) is not None:  # the read before this one found a template
            lock.release()
            yield
            return
        try:
            yield
        finally:
            lock.release()


@dataclass(frozen=True, slots=True)
class HeaderRead:
    """A header and what reading it cost."""

    header: GGUFHeader
    requests: int
    bytes_fetched: int
    #: The tokenizer came from a template (not read).
    templated: bool = False
    #: A template was named by the prefix but the file did not match it: read in full.
    fell_back: bool = False


class _Recorded:
    """A ``ReadAt`` that serves the prefix from memory, fetches the rest, and keeps the bytes
    fetched from offset 0 on (a new template is cut from them)."""

    def __init__(self, read_at: ReadAt, prefix: bytes) -> None:
        self.read_at = read_at
        self.raw = bytearray(prefix)

    def __call__(self, offset: int, length: int) -> bytes:
        out = bytes(self.raw[offset : offset + length])
        if len(out) < length and offset + len(out) == len(self.raw):
            more = self.read_at(offset + len(out), length - len(out))
            self.raw += more
            out += more
        elif len(out) < length:
            out += self.read_at(offset + len(out), length - len(out))
        return out


def read_quant_header(
    read_at: ReadAt,
    *,
    file_size: int | None,
    max_header_bytes: int,
    book: TemplateBook | None = None,
    scopes: Sequence[str] = (),
    size_hint: int | None = None,
    first_read: int | None = None,
    source: str | None = None,
) -> HeaderRead:
    """Read one header; with a ``book``, reuse and record tokenizer templates.

    ``first_read`` fixes the first request (a later shard's 64 KiB); ``size_hint`` is an earlier
    header's size from the same repo. Raises what crawler.gguf.parse.read_header raises.
    """
    counter = [0, 0]

    def counted(offset: int, length: int) -> bytes:
        data = read_at(offset, length)
        counter[0] += 1
        counter[1] += len(data)
        return data

    small = book.first_read(scopes) if book is not None and first_read is None else None
    if small is not None and file_size is not None:
        first = small
    else:
        first = first_read_for(size_hint, first_read)
    limit = min(max_header_bytes, file_size) if file_size is not None else max_header_bytes
    prefix = counted(0, max(1, min(first, limit)))
    candidate = None
    if book is not None:
        header, candidate = read_templated(
            counted,
            prefix,
            book.find,
            file_size=file_size,
            max_header_bytes=max_header_bytes,
            source=source,
        )
        if header is not None and candidate is not None:
            book.add(candidate, scopes)
            return HeaderRead(header, counter[0], counter[1], templated=True)
    # The full read continues from the prefix; after a small prefix it is sized by the template
    # the prefix looked like, else by one of the scope's (the same tokenizer family).
    hint = size_hint
    if small is not None and book is not None:
        hint = candidate.header_bytes if candidate is not None else book.size_hint(scopes)
    cont = len(prefix)
    if hint:
        cont = max(cont, int(hint * (1 + HINT_MARGIN)) + ESTIMATE_SLACK)
    recorded = _Recorded(counted, prefix)
    header = read_header(
        recorded,
        file_size=file_size,
        max_header_bytes=max_header_bytes,
        first_read=cont,
        source=source,
    )
    if book is not None:
        template = template_of(header, bytes(recorded.raw), source or "")
        if template is not None:
            book.add(template, scopes)
    return HeaderRead(header, counter[0], counter[1], fell_back=candidate is not None)
