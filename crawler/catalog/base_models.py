"""The base models the catalog holds: the crawl also lists their quantized children.

A new uploader of a known model has no entry in the author list; the Hub's
``base_model:quantized:<id>`` filter (HfApi.list_models, huggingface_hub hf_api.py) finds its
repo anyway.
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
