"""Open the catalog for reading the fast way, or the full way when the fast way cannot serve it.

It sits above both reader and database, so neither imports the other back.
Details: docs/internals/catalog.md#reading
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from crawler.base.errors import CatalogError
from crawler.catalog.reader import Reader

if TYPE_CHECKING:
    from crawler.catalog.search_index import ColumnsFn

__all__ = ["reading"]


@contextmanager
def reading(url: str, columns: ColumnsFn | None = None) -> Iterator[Reader]:
    """A reader on the catalog at ``url``: Reader.open (no SQLAlchemy import), or, when
    that cannot serve it (no file yet, another schema version, a URL it does not handle), the
    catalog opened the normal way (``columns`` as Catalog.open takes it), which creates,
    migrates or explains, and a reader on it."""
    try:
        reader = Reader.open(url)
    except CatalogError:
        from crawler.catalog.database import Catalog

        with Catalog.open(url, columns=columns) as catalog, catalog.reader() as fallback:
            yield fallback
        return
    with reader:
        yield reader
