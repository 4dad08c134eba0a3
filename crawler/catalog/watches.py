"""Watches (saved searches) and the results they have reported, in the catalog.

The read/write path of quants watch; evaluation lives in the crawl.
Details: docs/internals/catalog.md#watches
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError

from crawler.base.errors import UsageError
from crawler.catalog import Catalog
from crawler.catalog.history import iso_utc, utc
from crawler.catalog.tables import Quant, Repo, Watch, WatchHit

__all__ = [
    "WatchHitRecord",
    "WatchRecord",
    "add_watch",
    "content_keys",
    "get_watch",
    "known_keys",
    "list_hits",
    "list_watches",
    "recent_hits",
    "record_hits",
    "remove_watch",
]

_WATCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True, slots=True)
class WatchRecord:
    """A saved search (``options``: the ``quants search`` options by name, as api.search takes
    them)."""

    id: int
    name: str
    options: Mapping[str, Any]
    created_at: datetime
    last_evaluated_at: datetime | None
    hits: int

    def to_json(self) -> dict[str, Any]:
        """JSON for ``quants watch list``."""
        return {
            "name": self.name,
            "options": dict(self.options),
            "created_at": iso_utc(self.created_at),
            "last_evaluated_at": iso_utc(self.last_evaluated_at),
            "hits": self.hits,
        }


@dataclass(frozen=True, slots=True)
class WatchHitRecord:
    """One result a watch reported (or took as its baseline when it was added)."""

    watch: str
    result_key: str
    scan_id: int | None
    at: datetime
    payload: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        """JSON for ``quants watch show`` and the feed."""
        return {
            "watch": self.watch,
            "key": self.result_key,
            "scan_id": self.scan_id,
            "at": iso_utc(self.at),
            **dict(self.payload),
        }


def _watch_record(row: Watch, hits: int) -> WatchRecord:
    created = utc(row.created_at)
    assert created is not None
    return WatchRecord(
        row.id,
        row.name,
        dict(row.args) if isinstance(row.args, dict) else {},
        created,
        utc(row.last_evaluated_at),
        hits,
    )


def add_watch(catalog: Catalog, name: str, options: Mapping[str, Any]) -> WatchRecord:
    """Save a watch (its options checked by the caller); UsageError for a bad or taken name."""
    if not _WATCH_NAME.fullmatch(name):
        raise UsageError(
            f"watch name {name!r}: use 1-64 letters, digits, '.', '_' or '-' (starting alnum)"
        )
    now = datetime.now(UTC)
    try:
        with catalog.session() as session:
            row = Watch(name=name, args=dict(options), created_at=now)
            session.add(row)
            session.flush()
            return _watch_record(row, 0)
    except IntegrityError:
        raise UsageError(f"a watch named {name!r} exists; remove it first") from None


def list_watches(catalog: Catalog) -> list[WatchRecord]:
    """All watches by name, with how many results each has recorded."""
    with catalog.session() as session:
        rows = session.execute(
            select(Watch, func.count(WatchHit.id))
            .outerjoin(WatchHit, WatchHit.watch_id == Watch.id)
            .group_by(Watch.id)
            .order_by(Watch.name)
        ).all()
        return [_watch_record(watch, n) for watch, n in rows]


def get_watch(catalog: Catalog, name: str) -> WatchRecord:
    """The watch called ``name``; UsageError if there is none."""
    for watch in list_watches(catalog):
        if watch.name == name:
            return watch
    raise UsageError(f"no watch named {name!r} (see `quants watch list`)")


def remove_watch(catalog: Catalog, name: str) -> None:
    """Delete a watch and its recorded hits."""
    with catalog.session() as session:
        row = session.scalars(select(Watch).where(Watch.name == name)).first()
        if row is None:
            raise UsageError(f"no watch named {name!r} (see `quants watch list`)")
        session.execute(delete(WatchHit).where(WatchHit.watch_id == row.id))
        session.delete(row)


def record_hits(
    catalog: Catalog,
    watch_id: int,
    results: Iterable[tuple[str, Mapping[str, Any]]],
    *,
    scan_id: int | None,
    at: datetime | None = None,
) -> list[WatchHitRecord]:
    """Store the ``(result_key, payload)`` pairs the watch has not seen; return those.

    Also stamps the watch's ``last_evaluated_at``. The unique (watch, key) pair makes a result
    fire once: when another evaluation (``quants watch run`` beside the scheduler) recorded one
    of the keys first, the insert fails and is redone against what that one wrote.
    """
    pairs = list(results)
    for _ in range(2):
        try:
            return _record_hits(catalog, watch_id, pairs, scan_id=scan_id, at=at)
        except IntegrityError:
            continue
    return _record_hits(catalog, watch_id, pairs, scan_id=scan_id, at=at)


def _record_hits(
    catalog: Catalog,
    watch_id: int,
    results: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    scan_id: int | None,
    at: datetime | None,
) -> list[WatchHitRecord]:
    moment = at or datetime.now(UTC)
    fresh: list[WatchHitRecord] = []
    with catalog.session() as session:
        watch = session.get(Watch, watch_id)
        if watch is None:
            raise UsageError(f"watch {watch_id} no longer exists")
        known = set(
            session.scalars(select(WatchHit.result_key).where(WatchHit.watch_id == watch_id))
        )
        for key, payload in results:
            if key in known:
                continue
            known.add(key)
            session.add(
                WatchHit(
                    watch_id=watch_id,
                    result_key=key,
                    scan_id=scan_id,
                    payload=dict(payload),
                    at=moment,
                )
            )
            fresh.append(WatchHitRecord(watch.name, key, scan_id, moment, dict(payload)))
        watch.last_evaluated_at = moment
    return fresh


def list_hits(catalog: Catalog, name: str, *, limit: int | None = None) -> list[WatchHitRecord]:
    """The hits of watch ``name``, newest first."""
    watch = get_watch(catalog, name)
    stmt = select(WatchHit).where(WatchHit.watch_id == watch.id).order_by(WatchHit.id.desc())
    if limit is not None:
        stmt = stmt.limit(limit)
    with catalog.session() as session:
        return [
            WatchHitRecord(
                name,
                row.result_key,
                row.scan_id,
                utc(row.at) or watch.created_at,
                dict(row.payload or {}),
            )
            for row in session.scalars(stmt)
        ]


def content_keys(
    catalog: Catalog, refs: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], str | None]:
    """``{(repo_id, path): content_key}`` for live quants (a re-upload changes the key)."""
    wanted = set(refs)
    if not wanted:
        return {}
    repo_ids = sorted({repo for repo, _ in wanted})
    with catalog.session() as session:
        rows = session.execute(
            select(Repo.repo_id, Quant.path, Quant.content_key, Quant.revision)
            .join(Repo, Quant.repo_pk == Repo.id)
            .where(Repo.repo_id.in_(repo_ids))
        ).all()
    return {
        (repo, path): key or revision
        for repo, path, key, revision in rows
        if (repo, path) in wanted
    }


def known_keys(catalog: Catalog, watch_id: int) -> set[str]:
    """The result keys watch ``watch_id`` has recorded (reported or baseline)."""
    with catalog.session() as session:
        return set(
            session.scalars(select(WatchHit.result_key).where(WatchHit.watch_id == watch_id))
        )


def recent_hits(catalog: Catalog, *, limit: int) -> list[WatchHitRecord]:
    """The newest reported hits of all watches (baselines left out), newest first."""
    out: list[WatchHitRecord] = []
    with catalog.session() as session:
        rows = session.execute(
            select(WatchHit, Watch.name)
            .join(Watch, WatchHit.watch_id == Watch.id)
            .order_by(WatchHit.id.desc())
            .execution_options(yield_per=256)
        )
        for row, name in rows:
            payload = dict(row.payload or {})
            # Baselines (results a watch found when it was added) were never news.
            if payload.get("reason") == "baseline":
                continue
            at = utc(row.at)
            assert at is not None
            out.append(WatchHitRecord(name, row.result_key, row.scan_id, at, payload))
            if len(out) >= limit:
                break
    return out
