"""Work claims: crawl processes that share one catalog never read the same repo at once.

One insert wins a claim; a lapsed claim is taken over by one winner.
Details: docs/internals/catalog.md#repo_locks
"""

from __future__ import annotations

import hashlib
import socket
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import delete, update

from crawler.catalog import Catalog
from crawler.catalog.orm import conflict_insert
from crawler.catalog.tables import RepoClaim

__all__ = ["CLAIM_TTL", "claim_repo", "new_owner", "release_repo"]

#: How long a claim holds without being released. Far above one repo's read (seconds to a
#: minute with retries), so only a dead crawler's claims lapse.
CLAIM_TTL = timedelta(minutes=30)


def new_owner(data_dir: Path | None = None) -> str:
    """The owner id of this machine's crawler using ``data_dir`` (random without one).

    Stable across restarts: a crawler killed and restarted on the same machine takes its own
    claims back at once instead of waiting for them to lapse. Two crawls of one machine and data
    directory never run together (the crawl lock), so they never hold claims at the same time.
    """
    if data_dir is None:
        return uuid.uuid4().hex
    seed = f"{socket.gethostname()}|{data_dir.resolve()}"
    return hashlib.sha256(seed.encode()).hexdigest()[:32]


def claim_repo(
    catalog: Catalog,
    repo_id: str,
    owner: str,
    *,
    ttl: timedelta = CLAIM_TTL,
    now: datetime | None = None,
) -> bool:
    """Claim ``repo_id`` for ``owner``; False when another live claim holds it."""
    now = now or datetime.now(UTC)
    values = {"owner": owner, "claimed_at": now, "expires_at": now + ttl}
    with catalog.engine.begin() as conn:
        stmt = conflict_insert(conn.dialect.name, RepoClaim)
        inserted = conn.execute(stmt.values(repo_id=repo_id, **values).on_conflict_do_nothing())
        if inserted.rowcount == 1:
            return True
        taken = conn.execute(
            update(RepoClaim)
            .where(RepoClaim.repo_id == repo_id)
            .where((RepoClaim.expires_at < now) | (RepoClaim.owner == owner))
            .values(**values)
        )
        return bool(taken.rowcount == 1)


def release_repo(catalog: Catalog, repo_id: str, owner: str) -> None:
    """Drop ``owner``'s claim on ``repo_id`` (after its write committed)."""
    with catalog.engine.begin() as conn:
        conn.execute(
            delete(RepoClaim).where(RepoClaim.repo_id == repo_id, RepoClaim.owner == owner)
        )
