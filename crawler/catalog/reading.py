"""Open the catalog for reading the fast way, or the full way when the fast way cannot serve it.

It sits above both :mod:`~crawler.catalog.reader` (the DBAPI read connection) and
:mod:`~crawler.catalog.database` (SQLAlchemy, migrations), so neither imports the other back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from crawler.catalog.reader import Reader
from crawler.errors import CatalogError

__all__ = ["reading"]


@contextmanager
def reading(url: str) -> Iterator[Reader]:
    """A reader on the catalog at ``url``: :meth:`Reader.open` (no SQLAlchemy import), or, when
    that cannot serve it (no file yet, another schema version, a URL it does not handle), the
    catalog opened the normal way, which creates, migrates or explains, and a reader on it."""
    try:
        reader = Reader.open(url)
    except CatalogError:
        from crawler.catalog.database import Catalog

        with Catalog.open(url) as catalog, catalog.reader() as fallback:
            yield fallback
        return
    with reader:
        yield reader
