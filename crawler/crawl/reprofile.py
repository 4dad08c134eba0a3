"""quants reprofile: recompute profiles and memory models from the stored tensor tables.

Brings verdicts and coefficients up to date after a rule changes, without a Hub request.
Details: docs/internals/crawl.md#reprofile
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from crawler.base.errors import CatalogError, ConfigError, GGUFError, QuantsError
from crawler.catalog import Catalog
from crawler.catalog.analyses import iter_tensor_tables, update_analysis
from crawler.crawl.rows import finished_row
from crawler.profile.analysis import analyse_quant

logger = logging.getLogger(__name__)

__all__ = ["ReprofileSummary", "reprofile"]


@dataclass(frozen=True, slots=True)
class ReprofileSummary:
    """What ``reprofile`` did: quants seen, whose stored profile changed, that failed."""

    quants: int
    changed: int
    failed: int
    changed_quants: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """``quants reprofile --json``."""
        return {
            "quants": self.quants,
            "changed": self.changed,
            "failed": self.failed,
            "changed_quants": list(self.changed_quants),
        }


def reprofile(catalog: Catalog) -> ReprofileSummary:
    """Re-analyse every live quant from its stored headers; one transaction per quant."""
    changed: list[str] = []
    failed = 0
    stored = iter_tensor_tables(catalog)
    for q in stored:
        if q.unreadable is not None:
            logger.warning(
                "cannot reprofile %s/%s: stored table %s", q.repo_id, q.path, q.unreadable
            )
            failed += 1
            continue
        try:
            analysis = analyse_quant(
                q.repo_id, q.revision, q.path, q.size_bytes, q.shards, q.repo_files
            )
        except (ConfigError, CatalogError):
            raise
        except (GGUFError, QuantsError, ValueError, KeyError) as exc:
            logger.warning("cannot reprofile %s/%s: %s", q.repo_id, q.path, exc)
            failed += 1
            continue
        if update_analysis(catalog, q.quant_id, finished_row(analysis)):
            changed.append(f"{q.repo_id}/{q.path}")
    return ReprofileSummary(len(stored), len(changed), failed, tuple(changed))
