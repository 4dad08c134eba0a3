"""The ranking's order (pure): the full sort key of a result and the keys known before
estimating (the catalog streams candidates in pre_key order).
Details: docs/internals/ranking.md#order
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from crawler.base.errors import UsageError
from crawler.ranking.model import BOUNDED_SORTS, TIE_BREAKS, Candidate, Ranked
from crawler.ranking.quality import QualityEstimate

__all__ = ["beaten", "optimistic_key", "pre_key", "sort_key"]


def _sort_value(key: str, r: Ranked) -> tuple[int, float]:
    """(missing flag, value) so that missing values sort last and larger is better."""
    c = r.candidate
    value: float | None
    if key == "quality":
        value = r.quality.score if r.quality else r.candidate.quality_hint
    elif key == "speed":
        value = r.speed.tok_s if r.speed else None
    elif key == "size":
        value = float(c.size_bytes)
    elif key == "margin":
        value = float(r.margin_bytes)
    elif key == "ctx":
        value = float(r.max_ctx) if r.max_ctx is not None else None
    elif key == "downloads":
        value = float(c.downloads) if c.downloads is not None else None
    elif key == "updated":
        value = c.last_modified.timestamp() if c.last_modified else None
    else:  # pragma: no cover - guarded by rank_candidates
        raise UsageError(f"unknown sort key {key!r}")
    if value is None or math.isnan(value):
        return (1, 0.0)
    return (0, -value)


def sort_key(key: str) -> Callable[[Ranked], tuple[Any, ...]]:
    """The full sort key for ``--sort key``: primary, TIE_BREAKS, then repo_id and path."""
    order = [key, *[k for k in TIE_BREAKS if k != key]]

    def k(r: Ranked) -> tuple[Any, ...]:
        return (*[_sort_value(name, r) for name in order], r.candidate.repo_id, r.candidate.path)

    return k


#: The parts of the sort order that are known before estimating, after the primary key.
_PRE_TIE_BREAKS = ("quality", "size", "downloads")


def pre_key(
    sort: str, c: Candidate, qualities: Mapping[int, QualityEstimate | None] | None = None
) -> tuple[tuple[int, float], ...]:
    """The sort order known before estimating: the primary key, then the tie-breaks up to the
    first one that needs the estimate (speed); for BOUNDED_SORTS, the bound of the
    primary key, then the same tie-breaks. Same encoding as sort_key: ascending is best first,
    missing values last. The catalog's ORDER BY for streamed search follows it.
    """
    return tuple(_pre_value(k, c, qualities or {}) for k in _pre_keys(sort))


def _pre_keys(sort: str) -> tuple[str, ...]:
    # For BOUNDED_SORTS the first is the bound (the database computes it per request); the
    # tie-breaks after it let ranking stop inside a run of equal bounds (the many copies of one
    # quant on the Hub) instead of reading all of it.
    return (sort, *(t for t in _PRE_TIE_BREAKS if t != sort))


def optimistic_key(sort: str, c: Candidate) -> tuple[Any, ...]:
    """For BOUNDED_SORTS: the best sort_key ``c`` can have, from its bound and the
    tie-breaks known before estimating (for speed that is all of them: repo and path follow)."""
    known = tuple(_pre_value(k, c, {}) for k in (sort, *_PRE_TIE_BREAKS))
    return (*known, c.repo_id, c.path) if sort == "speed" else known


def beaten(best: tuple[Any, ...], last: tuple[Any, ...]) -> bool:
    """Whether a key whose best case is ``best`` ranks below ``last`` whatever else it has."""
    return best > last[: len(best)]


def _pre_value(
    key: str, c: Candidate, qualities: Mapping[int, QualityEstimate | None]
) -> tuple[int, float]:
    value: float | None
    if key in BOUNDED_SORTS:
        # An upper bound; none given: it could be anything, so it must be read first.
        value = math.inf if c.bound_hint is None else c.bound_hint
    elif key == "quality":
        q = qualities.get(c.quant_id)
        value = q.score if q else c.quality_hint
    elif key == "size":
        value = float(c.size_bytes)
    elif key == "downloads":
        value = float(c.downloads) if c.downloads is not None else None
    else:  # updated
        value = c.last_modified.timestamp() if c.last_modified else None
    if value is None or math.isnan(value):
        return (1, 0.0)
    return (0, -value)
