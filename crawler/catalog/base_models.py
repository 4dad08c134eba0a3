"""The base models the catalog holds: the crawl also lists their quantized children.

So a new uploader of a known model is found without an entry in the author list.
Details: docs/internals/catalog.md#base_models
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import select

from crawler.catalog.tables import Repo

if TYPE_CHECKING:
    from crawler.catalog import Catalog

__all__ = ["crawl_base_models"]


def crawl_base_models(catalog: Catalog, configured: Sequence[str] = ()) -> tuple[str, ...]:
    """``configured`` (``QUANTS_BASE_MODELS``) then every base model of a live repo, each once."""
    with catalog.session() as s:
        known = s.scalars(
            select(Repo.base_model)
            .where(Repo.vanished_at.is_(None), Repo.base_model.is_not(None))
            .distinct()
            .order_by(Repo.base_model)
        ).all()
    return tuple(dict.fromkeys([*configured, *(b for b in known if b)]))
