"""JSON shapes of the emulated Hub: listing items, model info, tree entries, keyset cursors.

Shapes follow the Hub's JSON (live captures, huggingface_hub hf_api.py) and what
huggingface_hub 2.4 parses (``hf_api.py`` ``ModelInfo``, ``RepoFile``, ``RepoFolder``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from tests.hub_emulator.state import Commit, Repo

#: ``ExpandModelProperty_T`` of huggingface_hub 2.4 (hf_api.py): the properties ``expand`` accepts.
EXPAND_PROPERTIES = frozenset(
    {
        "author",
        "baseModels",
        "cardData",
        "childrenModelCount",
        "config",
        "createdAt",
        "disabled",
        "downloads",
        "downloadsAllTime",
        "evalResults",
        "gated",
        "gguf",
        "inference",
        "inferenceProviderMapping",
        "lastModified",
        "library_name",
        "likes",
        "mask_token",
        "model-index",
        "pipeline_tag",
        "private",
        "resourceGroup",
        "safetensors",
        "sha",
        "siblings",
        "spaces",
        "tags",
        "transformersInfo",
        "trendingScore",
        "usedStorage",
        "widgetData",
    }
)

# Default listing item (live GET /api/models?limit=1, reference 1.4); extra keys of full=true.
_LIST_DEFAULT = (
    "likes",
    "trendingScore",
    "private",
    "downloads",
    "tags",
    "pipeline_tag",
    "library_name",
    "createdAt",
)
_LIST_FULL = ("author", "gated", "lastModified", "sha", "siblings")
# Default model_info keys (live GET /api/models/ggml-org/gemma-3-1b-it-GGUF, reference 1.5).
_INFO_DEFAULT = (
    "private",
    "tags",
    "downloads",
    "likes",
    "author",
    "sha",
    "lastModified",
    "gated",
    "disabled",
    "model-index",
    "config",
    "cardData",
    "gguf",
    "siblings",
    "spaces",
    "createdAt",
    "usedStorage",
)

#: Sort keys the listing accepts (always descending since 2025: huggingface_hub #3630).
SORT_KEYS = ("lastModified", "createdAt", "downloads", "likes", "trendingScore", "id")


def iso(when: datetime) -> str:
    """The Hub's timestamp format: ``2025-03-12T10:30:05.000Z``."""
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def _property(repo: Repo, commit: Commit, name: str, *, blobs: bool = False) -> Any:
    """One property of a repo at a commit, as the Hub names and shapes it."""
    match name:
        case "author":
            return repo.author
        case "sha":
            return commit.sha
        case "lastModified":
            return iso(commit.date)
        case "createdAt":
            return iso(repo.created_at)
        case "private":
            return repo.private
        case "gated":
            return repo.gated
        case "disabled":
            return repo.disabled
        case "downloads":
            return repo.downloads
        case "likes":
            return repo.likes
        case "trendingScore":
            return repo.trending_score
        case "tags":
            return repo.all_tags()
        case "pipeline_tag":
            return repo.pipeline_tag
        case "library_name":
            return repo.library_name
        case "cardData":
            return repo.card_data
        case "gguf":
            return repo.gguf
        case "siblings":
            return [_sibling(path, commit, blobs) for path in sorted(commit.files)]
        case "usedStorage":
            return repo.used_storage()
        case "config":
            return {}
        case "spaces":
            return []
        case "baseModels":
            card = repo.card_data or {}
            bases = card.get("base_model")
            bases = [bases] if isinstance(bases, str) else list(bases or [])
            relation = card.get("base_model_relation") or "quantized"
            return {"relation": relation, "models": [{"id": b} for b in bases]} if bases else None
        case _:
            return None


def _sibling(path: str, commit: Commit, blobs: bool) -> dict[str, Any]:
    if not blobs:
        return {"rfilename": path}
    blob = commit.files[path]
    item: dict[str, Any] = {"rfilename": path, "blobId": blob.git_oid, "size": blob.size}
    if blob.lfs:
        # Siblings name the LFS hash "sha256"; tree entries name it "oid" (reference 2.2).
        item["lfs"] = {"sha256": blob.sha256, "size": blob.size, "pointerSize": blob.pointer_size}
    return item


def _head(repo: Repo) -> dict[str, Any]:
    return {"_id": repo.object_id, "id": repo.repo_id}


def listing_item(
    repo: Repo, *, expand: list[str], full: bool, card_data: bool, config: bool
) -> dict[str, Any]:
    """One item of ``GET /api/models``. With ``expand`` only those keys plus ``_id``/``id``."""
    item = _head(repo)
    if expand:
        for name in expand:
            item[name] = _property(repo, repo.head, name)
        return item
    names = list(_LIST_DEFAULT) + (list(_LIST_FULL) if full else [])
    for name in names:
        item[name] = _property(repo, repo.head, name)
    if card_data or full:
        item["cardData"] = repo.card_data
    if config:
        item["config"] = {}
    item["modelId"] = repo.repo_id
    return item


def info_item(repo: Repo, commit: Commit, *, expand: list[str], blobs: bool) -> dict[str, Any]:
    """``GET /api/models/{repo}[/revision/{rev}]``: the default keys, or ``expand``'s only."""
    item = _head(repo)
    for name in expand or _INFO_DEFAULT:
        item[name] = _property(repo, commit, name, blobs=blobs)
    if not expand:
        item["model-index"] = None
        item["modelId"] = repo.repo_id
    return item


def _tree_oid(commit: Commit, folder: str) -> str:
    return hashlib.sha1(f"{commit.sha}:{folder}".encode(), usedforsecurity=False).hexdigest()


def tree_entries(
    commit: Commit, folder: str, *, recursive: bool, expand: bool
) -> list[dict[str, Any]] | None:
    """Entries under ``folder`` ('' = root); None when ``folder`` is not a directory.

    Directories come as ``{"type": "directory", "oid", "size": 0, "path"}``; files as
    ``{"type": "file", "oid", "size", "path"[, "lfs": {"oid", "size", "pointerSize"}]}``. Paths
    are relative to the repo root. No ``xetHash``: emulating Xet would make hf_hub_download try
    to reach a CAS server (reference 7.6).
    """
    prefix = f"{folder}/" if folder else ""
    paths = [p for p in commit.files if p.startswith(prefix)]
    if folder and not paths:
        return None
    dirs: set[str] = set()
    files: list[str] = []
    for path in paths:
        rest = path[len(prefix) :]
        parts = rest.split("/")
        for depth in range(1, len(parts)):
            if not recursive and depth > 1:
                break
            dirs.add(prefix + "/".join(parts[:depth]))
        if recursive or len(parts) == 1:
            files.append(path)
    entries: list[dict[str, Any]] = [
        {"type": "directory", "oid": _tree_oid(commit, path), "size": 0, "path": path}
        for path in sorted(dirs)
    ]
    for path in sorted(files):
        blob = commit.files[path]
        entry: dict[str, Any] = {
            "type": "file",
            "oid": blob.git_oid,
            "size": blob.size,
            "path": path,
        }
        if blob.lfs:
            entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": blob.pointer_size}
        entries.append(entry)
    # One order for all entries (by path), so the keyset cursor of the next page is the path.
    entries.sort(key=lambda e: e["path"])
    if expand:
        for entry in entries:
            entry["lastCommit"] = {
                "id": commit.sha,
                "title": commit.title,
                "date": iso(commit.date),
            }
            if entry["type"] == "file":
                entry["securityFileStatus"] = {
                    "status": "safe",
                    "avScan": {"virusFound": False, "virusNames": None},
                    "pickleImportScan": None,
                }
    return entries


def sort_value(repo: Repo, key: str) -> Any:
    """The value a listing sorts on."""
    match key:
        case "lastModified":
            return iso(repo.last_modified)
        case "createdAt":
            return iso(repo.created_at)
        case "downloads":
            return repo.downloads
        case "likes":
            return repo.likes
        case "trendingScore":
            return repo.trending_score
        case _:
            return repo.repo_id


def encode_cursor(value: Any, object_id: str) -> str:
    """A keyset cursor like the Hub's (base64 of a Mongo-style ``$or``; reference 1.3)."""
    raw = json.dumps({"v": value, "_id": {"$gt": object_id}}, separators=(",", ":"))
    return base64.b64encode(raw.encode()).decode()


def decode_cursor(cursor: str) -> tuple[Any, str] | None:
    """``(sort value, _id)`` of a cursor, None when it is not one of ours."""
    try:
        data = json.loads(base64.b64decode(cursor, validate=True))
        return data["v"], data["_id"]["$gt"]
    except (ValueError, KeyError, TypeError):
        return None


def after_cursor(
    repos: Iterable[Repo], key: str, cursor: tuple[Any, str] | None, *, descending: bool = True
) -> list[Repo]:
    """Repos sorted by ``key`` (descending unless ``descending=False``) then ``_id`` ascending,
    after ``cursor`` (keyset)."""
    ordered = sorted(repos, key=lambda r: r.object_id)
    ordered.sort(key=lambda r: sort_value(r, key), reverse=descending)
    if cursor is None:
        return ordered
    value, object_id = cursor

    def beyond(v: Any) -> bool:
        return bool(v < value) if descending else bool(v > value)

    return [
        r
        for r in ordered
        if beyond(sort_value(r, key)) or (sort_value(r, key) == value and r.object_id > object_id)
    ]
