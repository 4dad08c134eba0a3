"""Whether the catalog holds anything at all, and what to say when it does not (I/O: one read).

So an empty catalog is told apart from "nothing matched", and the message says how to fill it.
Details: docs/internals/catalog.md#empty
"""

from __future__ import annotations

from crawler.catalog.reader import Reader

__all__ = ["EMPTY_CATALOG", "FILL_CATALOG", "catalog_is_empty"]

EMPTY_CATALOG = "the catalog is empty: no quant is stored yet"
FILL_CATALOG = (
    "fill it with `quants crawl` (read the Hub), `quants pull DATASET_REPO` (a published"
    " snapshot) or `quants import PATH` (a snapshot on disk); without --offline,"
    " `quants search QUERY` looks the model up on the Hub itself"
)


def catalog_is_empty(reader: Reader) -> bool:
    """True when the catalog holds no quant at all (not: none matched)."""
    return not reader.rows("SELECT 1 FROM quants LIMIT 1")
