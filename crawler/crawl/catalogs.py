"""Open the catalog as every quants command does: with the search-column function the crawl uses.

The catalog computes no search column; a migrated catalog gets ranking's, passed in here.
Details: docs/internals/crawl.md#catalogs
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawler.catalog import Catalog
    from crawler.catalog.reader import Reader

__all__ = ["open_catalog", "reading"]


def open_catalog(url: str, **options: Any) -> Catalog:
    """Catalog.open(url, **options) with the search-column function."""
    from crawler.catalog import Catalog
    from crawler.ranking.columns import stored_columns

    return Catalog.open(url, columns=stored_columns, **options)


@contextmanager
def reading(url: str) -> Iterator[Reader]:
    """crawler.catalog.reading.reading with the search-column function (the fast path imports
    neither SQLAlchemy nor the column function)."""
    from crawler.catalog import reading as catalog_reading
    from crawler.ranking.columns import stored_columns

    with catalog_reading.reading(url, stored_columns) as reader:
        yield reader
