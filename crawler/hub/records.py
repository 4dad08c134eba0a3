"""What the Hub says about repos and files, as frozen values, and the parsing of its JSON.

Defensive: the JSON comes from a server we do not control, so a mistyped field is dropped.
Details: docs/internals/hub.md#records
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class RepoListing:
    """One model repo as the listing (or ``repo_info``) describes it; no per-file data."""

    repo_id: str
    sha: str | None
    last_modified: datetime | None
    created_at: datetime | None = None
    author: str | None = None
    private: bool = False
    #: ``None`` when not gated, else the Hub's mode (``"auto"`` or ``"manual"``).
    gated: str | None = None
    disabled: bool = False
    tags: tuple[str, ...] = ()
    #: ``cardData.base_model`` (a string or a list on the Hub), normalised to a tuple.
    card_base_models: tuple[str, ...] = ()
    #: ``cardData.base_model_relation`` (``"quantized"``, ``"finetune"``, ...), if set.
    base_model_relation: str | None = None
    downloads: int | None = None
    likes: int | None = None

    @property
    def quantized_from(self) -> tuple[str, ...]:
        """Base models named by ``base_model:quantized:<id>`` tags (the Hub derives them)."""
        prefix = "base_model:quantized:"
        return tuple(t[len(prefix) :] for t in self.tags if t.startswith(prefix))


@dataclass(frozen=True, slots=True)
class HubFile:
    """One file of a repo tree at a revision."""

    path: str
    size: int
    #: Git blob id (SHA-1 of the file, or of the LFS pointer for LFS files).
    blob_id: str
    #: sha256 of the content for LFS files (``lfs.oid``); equals ``X-Linked-Etag`` on resolve.
    lfs_oid: str | None = None

    @property
    def content_key(self) -> str:
        """Identity of the bytes: the LFS sha256 when there is one, else the git blob id."""
        return self.lfs_oid or self.blob_id


@dataclass(frozen=True, slots=True)
class HubStats:
    """Counters since the client was created (a snapshot)."""

    #: Every HTTP request sent, redirect hops included.
    requests: int = 0
    #: Requests to the Hub's ``/api/`` bucket.
    api_requests: int = 0
    #: Requests to ``/resolve/`` URLs (the Hub's "resolvers" bucket).
    resolver_requests: int = 0
    #: Requests to another origin (the CDN), after a redirect or straight to a signed URL.
    cdn_requests: int = 0
    #: Response body bytes received (JSON and file bytes).
    bytes_fetched: int = 0
    retries: int = 0
    #: Seconds spent waiting for the rate limiter, Retry-After and backoff.
    waited_s: float = 0.0
    #: Ranged reads answered with 200 and the whole file (served by streaming, then cut).
    range_ignored: int = 0


def parse_listing(item: Any) -> RepoListing | None:
    """A listing / model_info JSON object -> RepoListing; None when it has no usable ``id``."""
    if not isinstance(item, dict):
        return None
    repo_id = item.get("id")
    if not isinstance(repo_id, str) or repo_id.count("/") != 1:
        return None
    card_data = item.get("cardData")
    card: dict[str, Any] = card_data if isinstance(card_data, dict) else {}
    gated = item.get("gated")
    sha = item.get("sha")
    relation = card.get("base_model_relation")
    author = item.get("author")
    return RepoListing(
        repo_id=repo_id,
        sha=sha if isinstance(sha, str) else None,
        last_modified=_parse_time(item.get("lastModified")),
        created_at=_parse_time(item.get("createdAt")),
        author=author if isinstance(author, str) else None,
        private=item.get("private") is True,
        gated=gated if isinstance(gated, str) else None,
        disabled=item.get("disabled") is True,
        tags=_str_tuple(item.get("tags")),
        card_base_models=_str_tuple(card.get("base_model")),
        base_model_relation=relation if isinstance(relation, str) else None,
        downloads=_opt_int(item.get("downloads")),
        likes=_opt_int(item.get("likes")),
    )


def parse_tree_file(entry: Mapping[str, Any]) -> HubFile | None:
    """A tree entry of type "file" -> HubFile (``RepoFile`` requires path, size and oid)."""
    path, size, oid = entry.get("path"), _opt_int(entry.get("size")), entry.get("oid")
    if not isinstance(path, str) or not isinstance(oid, str) or size is None or size < 0:
        return None
    lfs = entry.get("lfs")
    lfs_oid = lfs.get("oid") if isinstance(lfs, dict) else None
    return HubFile(
        path=path,
        size=size,
        blob_id=oid,
        lfs_oid=lfs_oid if isinstance(lfs_oid, str) else None,
    )


def _parse_time(value: Any) -> datetime | None:
    # The Hub writes "2025-03-12T10:30:05.000Z"; fromisoformat reads the Z since Python 3.11.
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _str_tuple(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(v for v in value if isinstance(v, str))
    return ()


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
