"""Open the catalog as every quants command does: with the search-column function the crawl uses.

The catalog computes no search column; a migrated catalog gets ranking's, passed in here.
Details: docs/internals/crawl.md#catalogs
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
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


def _stored_columns(
    groups: Sequence[tuple[str, int, int, float | None]],
    status: str,
    coefficients: Mapping[str, Any] | None,
    label: str | None,
) -> Mapping[str, Any]:
    """crawler.ranking.columns.stored_columns, imported when a migration calls it (it pulls in
    the profile and quality modules, which a search of a current catalog never needs)."""
    from crawler.ranking.columns import stored_columns

    return stored_columns(groups, status, coefficients, label)


@contextmanager
def reading(url: str) -> Iterator[Reader]:
    """crawler.catalog.reading.reading with the search-column function (the fast path imports
    neither SQLAlchemy nor the column function)."""
    from crawler.catalog import reading as catalog_reading

    with catalog_reading.reading(url, _stored_columns) as reader:
        yield reader
