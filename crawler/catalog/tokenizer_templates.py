"""Tokenizer templates in the catalog: what crawler.gguf.header_read.TemplateBook loads and saves
(I/O: reads and writes the catalog), so crawls and on-demand searches share them."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import select

from crawler.catalog import Catalog
from crawler.catalog.orm import conflict_insert
from crawler.catalog.tables import TokenizerTemplateRow, TokenizerTemplateScope
from crawler.gguf.tokenizer_template import TokenizerTemplate

__all__ = ["CatalogTemplates"]


def _template(row: TokenizerTemplateRow) -> TokenizerTemplate:
    return TokenizerTemplate(
        fingerprint=row.fingerprint,
        lookup=row.lookup,
        block=zlib.decompress(row.block),
        keys=tuple((str(k), int(t), int(n)) for k, t, n in row.keys),
        model=row.model,
        pre=row.pre,
        source=row.source,
        block_start=row.block_start,
        after_bytes=row.after_bytes,
        after_keys=row.after_keys,
        header_bytes=row.header_bytes,
    )


class CatalogTemplates:
    """A crawler.gguf.header_read.TemplateStore over one catalog."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def load(self, lookup: str) -> TokenizerTemplate | None:
        """The first stored template with this lookup."""
        with self.catalog.session() as s:
            row = s.scalars(
                select(TokenizerTemplateRow)
                .where(TokenizerTemplateRow.lookup == lookup)
                .order_by(TokenizerTemplateRow.created_at, TokenizerTemplateRow.fingerprint)
                .limit(1)
            ).first()
            return _template(row) if row is not None else None

    def scoped(self, scopes: Sequence[str]) -> list[tuple[str, str, int, int]]:
        """(scope, fingerprint, block start, header bytes) of the templates these scopes used
        (not their blocks: those are loaded by lookup when a file shows one)."""
        if not scopes:
            return []
        with self.catalog.session() as s:
            rows = s.execute(
                select(
                    TokenizerTemplateScope.scope,
                    TokenizerTemplateRow.fingerprint,
                    TokenizerTemplateRow.block_start,
                    TokenizerTemplateRow.header_bytes,
                )
                .join(
                    TokenizerTemplateRow,
                    TokenizerTemplateRow.fingerprint == TokenizerTemplateScope.fingerprint,
                )
                .where(TokenizerTemplateScope.scope.in_(list(scopes)))
            ).all()
            return [(str(a), str(b), int(c), int(d)) for a, b, c, d in rows]

    def save(self, template: TokenizerTemplate, scopes: Sequence[str], *, with_block: bool) -> None:
        """Record the scopes; with ``with_block`` store the template too (once: a concurrent
        writer's copy wins)."""
        row = {
            "fingerprint": template.fingerprint,
            "lookup": template.lookup,
            "model": template.model,
            "pre": template.pre,
            "keys": [list(k) for k in template.keys],
            # Level 1: a 10 MB block in ~0.1 s (compressed ~2.5x; level 6 gains little more).
            "block": zlib.compress(template.block, 1) if with_block else b"",
            "block_bytes": len(template.block),
            "source": template.source,
            "block_start": template.block_start,
            "after_bytes": template.after_bytes,
            "after_keys": template.after_keys,
            "header_bytes": template.header_bytes,
            "created_at": datetime.now(UTC),
        }
        with self.catalog.engine.begin() as conn:
            dialect = conn.dialect.name
            if with_block:
                conn.execute(
                    conflict_insert(dialect, TokenizerTemplateRow)
                    .values(**row)
                    .on_conflict_do_nothing()
                )
            for scope in scopes:
                conn.execute(
                    conflict_insert(dialect, TokenizerTemplateScope)
                    .values(scope=scope[:320], fingerprint=template.fingerprint)
                    .on_conflict_do_nothing()
                )
