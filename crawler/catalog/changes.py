"""What changed in the catalog since a scan or a date: new quants, re-uploads, vanished files.

The read path of quants changes; returns frozen dataclasses, never ORM rows.
Details: docs/internals/catalog.md#changes
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from crawler.catalog import Catalog
from crawler.catalog.history import iso_utc, resolve_since, utc
from crawler.catalog.tables import File, Quant, QuantVersion, Repo
from crawler.profile.diff import describe_change

__all__ = [
    "ChangeReport",
    "NewQuant",
    "Reupload",
    "VanishedFile",
    "VanishedQuant",
    "VanishedRepo",
    "changes_since",
    "latest_changes",
]

# Files reported apart from quants when they vanish (quant files are reported as quants).
_SIDE_FILE_KINDS = ("mmproj", "mtp_sidecar")


@dataclass(frozen=True, slots=True)
class NewQuant:
    """A quant first seen in the window."""

    repo_id: str
    path: str
    quant_label: str | None
    revision: str | None
    size_bytes: int | None
    scan_id: int | None

    def to_json(self) -> dict[str, Any]:
        """JSON for ``quants changes``."""
        return {
            "repo": self.repo_id,
            "path": self.path,
            "quant_label": self.quant_label,
            "revision": self.revision,
            "size_bytes": self.size_bytes,
            "scan_id": self.scan_id,
        }


@dataclass(frozen=True, slots=True)
class Reupload:
    """A quant whose content changed under the same name, and what that changed."""

    repo_id: str
    path: str
    quant_label: str | None
    old_revision: str | None
    new_revision: str | None
    old_size_bytes: int | None
    new_size_bytes: int | None
    changes: tuple[str, ...]
    scan_id: int | None

    def to_json(self) -> dict[str, Any]:
        """JSON for ``quants changes``."""
        return {
            "repo": self.repo_id,
            "path": self.path,
            "quant_label": self.quant_label,
            "old_revision": self.old_revision,
            "new_revision": self.new_revision,
            "old_size_bytes": self.old_size_bytes,
            "new_size_bytes": self.new_size_bytes,
            "changes": list(self.changes),
            "scan_id": self.scan_id,
        }


@dataclass(frozen=True, slots=True)
class VanishedQuant:
    """A quant (file or shard set) gone from a repo that still exists."""

    repo_id: str
    path: str
    quant_label: str | None
    vanished_at: datetime

    def to_json(self) -> dict[str, Any]:
        """JSON for ``quants changes``."""
        return {
            "repo": self.repo_id,
            "path": self.path,
            "quant_label": self.quant_label,
            "vanished_at": iso_utc(self.vanished_at),
        }


@dataclass(frozen=True, slots=True)
class VanishedFile:
    """A GGUF file that is not a quant (a vision projector, an MTP sidecar) gone from its repo."""

    repo_id: str
    path: str
    kind: str
    vanished_at: datetime

    def to_json(self) -> dict[str, Any]:
        """JSON for ``quants changes``."""
        return {
            "repo": self.repo_id,
            "path": self.path,
            "kind": self.kind,
            "vanished_at": iso_utc(self.vanished_at),
        }


@dataclass(frozen=True, slots=True)
class VanishedRepo:
    """A repo gone from the Hub (deleted, renamed away or made private)."""

    repo_id: str
    vanished_at: datetime
    quants: int

    def to_json(self) -> dict[str, Any]:
        """JSON for ``quants changes``."""
        return {
            "repo": self.repo_id,
            "vanished_at": iso_utc(self.vanished_at),
            "quants": self.quants,
        }


@dataclass(frozen=True, slots=True)
class ChangeReport:
    """Everything that changed from ``since`` on (``since_scan_id`` when given as a scan)."""

    since: datetime | None
    since_scan_id: int | None
    scan_ids: tuple[int, ...]
    new_quants: tuple[NewQuant, ...] = ()
    reuploads: tuple[Reupload, ...] = ()
    vanished_quants: tuple[VanishedQuant, ...] = ()
    vanished_files: tuple[VanishedFile, ...] = ()
    vanished_repos: tuple[VanishedRepo, ...] = field(default=())

    @property
    def empty(self) -> bool:
        """True when nothing changed."""
        return not (
            self.new_quants
            or self.reuploads
            or self.vanished_quants
            or self.vanished_files
            or self.vanished_repos
        )

    def to_json(self) -> dict[str, Any]:
        """The stable ``quants changes --json`` shape."""
        return {
            "since": iso_utc(self.since),
            "since_scan_id": self.since_scan_id,
            "scans": list(self.scan_ids),
            "new_quants": [q.to_json() for q in self.new_quants],
            "reuploads": [q.to_json() for q in self.reuploads],
            "vanished_quants": [q.to_json() for q in self.vanished_quants],
            "vanished_files": [f.to_json() for f in self.vanished_files],
            "vanished_repos": [r.to_json() for r in self.vanished_repos],
        }


def changes_since(catalog: Catalog, since: str | None = None) -> ChangeReport:
    """New quants, re-uploads (with what changed), vanished quants and repos since ``since``."""
    start, since_scan, scan_ids = resolve_since(catalog, since)
    if start is None:
        return ChangeReport(since=None, since_scan_id=since_scan, scan_ids=scan_ids)
    with catalog.session() as session:
        versions = session.execute(
            select(QuantVersion, Quant, Repo.repo_id)
            .join(Quant, QuantVersion.quant_id == Quant.id)
            .join(Repo, Quant.repo_pk == Repo.id)
            .where(QuantVersion.analysed_at >= start)
            .order_by(QuantVersion.id)
        ).all()
        latest: dict[int, tuple[QuantVersion, Quant, str]] = {}
        for version, quant, repo_id in versions:
            latest[quant.id] = (version, quant, repo_id)
        # The version each quant had before the window: its baseline (none = new quant).
        baseline_ids = session.execute(
            select(func.max(QuantVersion.id))
            .where(QuantVersion.quant_id.in_(list(latest)), QuantVersion.analysed_at < start)
            .group_by(QuantVersion.quant_id)
        ).scalars()
        baselines = {
            v.quant_id: v
            for v in session.scalars(
                select(QuantVersion).where(QuantVersion.id.in_(list(baseline_ids)))
            )
        }
        new_quants, reuploads = _new_and_reuploaded(latest, baselines)
        # Quants first seen in the window whose header could not be read have no version yet.
        seen = {(q.repo_id, q.path) for q in new_quants}
        for quant, repo_id in session.execute(
            select(Quant, Repo.repo_id)
            .join(Repo, Quant.repo_pk == Repo.id)
            .where(Quant.first_seen_at >= start, Quant.id.not_in(list(latest)))
        ):
            if (repo_id, quant.path) not in seen:
                new_quants.append(
                    NewQuant(
                        repo_id,
                        quant.path,
                        quant.quant_label,
                        quant.revision,
                        quant.size_bytes,
                        None,
                    )
                )
        vanished_repos = [
            VanishedRepo(repo.repo_id, utc(repo.vanished_at) or start, n)
            for repo, n in session.execute(
                select(Repo, func.count(Quant.id))
                .outerjoin(Quant, Quant.repo_pk == Repo.id)
                .where(Repo.vanished_at >= start)
                .group_by(Repo.id)
                .order_by(Repo.repo_id)
            )
        ]
        vanished_quants = [
            VanishedQuant(repo_id, quant.path, quant.quant_label, utc(quant.vanished_at) or start)
            for quant, repo_id in session.execute(
                select(Quant, Repo.repo_id)
                .join(Repo, Quant.repo_pk == Repo.id)
                .where(Quant.vanished_at >= start)
                # A vanished repo is reported once, not file by file.
                .where((Repo.vanished_at.is_(None)) | (Repo.vanished_at < start))
                .order_by(Repo.repo_id, Quant.path)
            )
        ]
        vanished_files = [
            VanishedFile(repo_id, row.path, row.kind, utc(row.vanished_at) or start)
            for row, repo_id in session.execute(
                select(File, Repo.repo_id)
                .join(Repo, File.repo_pk == Repo.id)
                .where(File.vanished_at >= start, File.kind.in_(_SIDE_FILE_KINDS))
                .where((Repo.vanished_at.is_(None)) | (Repo.vanished_at < start))
                .order_by(Repo.repo_id, File.path)
            )
        ]
    return ChangeReport(
        since=start,
        since_scan_id=since_scan,
        scan_ids=scan_ids,
        new_quants=tuple(sorted(new_quants, key=lambda q: (q.repo_id, q.path))),
        reuploads=tuple(sorted(reuploads, key=lambda q: (q.repo_id, q.path))),
        vanished_quants=tuple(vanished_quants),
        vanished_files=tuple(vanished_files),
        vanished_repos=tuple(vanished_repos),
    )


def _new_and_reuploaded(
    latest: Mapping[int, tuple[QuantVersion, Quant, str]],
    baselines: Mapping[int, QuantVersion],
) -> tuple[list[NewQuant], list[Reupload]]:
    new_quants: list[NewQuant] = []
    reuploads: list[Reupload] = []
    for quant_id, (version, quant, repo_id) in latest.items():
        before = baselines.get(quant_id)
        if before is None:
            new_quants.append(
                NewQuant(
                    repo_id,
                    quant.path,
                    quant.quant_label,
                    version.revision,
                    version.size_bytes,
                    version.scan_id,
                )
            )
        elif before.content_key != version.content_key:
            changes = describe_change(
                before.profile,
                version.profile,
                old_size=before.size_bytes,
                new_size=version.size_bytes,
            )
            reuploads.append(
                Reupload(
                    repo_id,
                    quant.path,
                    quant.quant_label,
                    before.revision,
                    version.revision,
                    before.size_bytes,
                    version.size_bytes,
                    tuple(changes),
                    version.scan_id,
                )
            )
    return new_quants, reuploads


def latest_changes(catalog: Catalog, repo_id: str, path: str) -> tuple[str, ...]:
    """What the latest re-upload of quant ``repo_id``/``path`` changed (empty if never)."""
    with catalog.session() as session:
        versions = session.scalars(
            select(QuantVersion)
            .join(Quant, QuantVersion.quant_id == Quant.id)
            .join(Repo, Quant.repo_pk == Repo.id)
            .where(Repo.repo_id == repo_id, Quant.path == path)
            .order_by(QuantVersion.id.desc())
            .limit(2)
        ).all()
    if len(versions) < 2:
        return ()
    new, old = versions
    return tuple(
        describe_change(old.profile, new.profile, old_size=old.size_bytes, new_size=new.size_bytes)
    )
