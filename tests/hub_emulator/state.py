"""The emulated Hub's data: repos with a commit history, file blobs, tokens and access rules.

Mutable and thread-safe (one lock): tests add repos, commit new files (a re-upload gets a new LFS
oid and a new commit sha, while older commits stay resolvable, as on the Hub), delete files or whole
repos, and flip gating or privacy between two requests of a crawl.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# The Hub stores these in Git LFS by default (.gitattributes of a new repo) and anything over
# 10 MB (docs/hub/repositories-getting-started: "files larger than 10MB" need LFS).
LFS_SUFFIXES = (".gguf", ".bin", ".safetensors", ".dat", ".pt", ".onnx")
LFS_MIN_SIZE = 10 * 1024 * 1024
# Hashing a sparse multi-GB file would read GBs of zeros; above this size the emulator's "sha256"
# covers the first and last bytes plus the size (see Blob.from_file).
_FULL_HASH_LIMIT = 8 * 1024 * 1024
_CHUNK = 64 * 1024
# Commit dates start here and advance one minute per commit unless a date is given.
EPOCH = datetime(2026, 6, 1, tzinfo=UTC)


def _sha1(data: bytes) -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The Git LFS pointer file the Hub stores in git for an LFS file."""
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()
    )


@dataclass(frozen=True, slots=True)
class Blob:
    """The content of one file: inline bytes, or a (sparse) file on disk read range by range."""

    size: int
    sha256: str
    git_oid: str
    lfs: bool
    data: bytes | None = None
    path: Path | None = None

    @property
    def pointer_size(self) -> int:
        """Size of the LFS pointer in git (``lfs.pointerSize``)."""
        return len(lfs_pointer(self.sha256, self.size))

    @classmethod
    def from_bytes(cls, data: bytes, *, lfs: bool | None = None, name: str = "") -> Blob:
        """A blob of small inline content; git oid and sha256 are the real ones."""
        sha256 = hashlib.sha256(data).hexdigest()
        is_lfs = _wants_lfs(name, len(data)) if lfs is None else lfs
        git = lfs_pointer(sha256, len(data)) if is_lfs else data
        git_oid = _sha1(b"blob %d\0" % len(git) + git)
        return cls(size=len(data), sha256=sha256, git_oid=git_oid, lfs=is_lfs, data=data)

    @classmethod
    def from_file(cls, path: Path, *, lfs: bool | None = None) -> Blob:
        """A blob backed by a file on disk, never read whole.

        The sha256 is exact up to 8 MiB. Above, it hashes the first 8 MiB, the last 64 KiB and the
        size: a sparse file's zeros are never read, and any change to a synthetic header still
        changes the oid (deviation from the Hub, whose lfs.oid is always the content's sha256).
        """
        size = path.stat().st_size
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            if size <= _FULL_HASH_LIMIT:
                digest.update(fh.read())
            else:
                digest.update(fh.read(_FULL_HASH_LIMIT))
                fh.seek(size - _CHUNK)
                digest.update(fh.read(_CHUNK))
                digest.update(str(size).encode())
        sha256 = digest.hexdigest()
        is_lfs = _wants_lfs(path.name, size) if lfs is None else lfs
        if is_lfs:
            pointer = lfs_pointer(sha256, size)
            git_oid = _sha1(b"blob %d\0" % len(pointer) + pointer)
        else:
            with path.open("rb") as fh:
                git_oid = _sha1(b"blob %d\0" % size + fh.read())
        return cls(size=size, sha256=sha256, git_oid=git_oid, lfs=is_lfs, path=path)

    def iter_range(self, start: int, end: int, chunk: int = _CHUNK) -> Iterator[bytes]:
        """Yield bytes ``start..end`` (inclusive) in chunks, reading only that range."""
        if self.data is not None:
            for pos in range(start, end + 1, chunk):
                yield self.data[pos : min(pos + chunk, end + 1)]
            return
        assert self.path is not None
        fd = os.open(self.path, os.O_RDONLY)
        try:
            pos = start
            while pos <= end:
                piece = os.pread(fd, min(chunk, end + 1 - pos), pos)
                if not piece:
                    return
                yield piece
                pos += len(piece)
        finally:
            os.close(fd)


def _wants_lfs(name: str, size: int) -> bool:
    return name.endswith(LFS_SUFFIXES) or ".gguf.part" in name or size >= LFS_MIN_SIZE


@dataclass(frozen=True, slots=True)
class Commit:
    """One commit: a full snapshot of the repo's files."""

    sha: str
    date: datetime
    title: str
    files: Mapping[str, Blob]


@dataclass
class Repo:
    """A model repo on the emulated Hub. Card data, tags and counters are free-form test data."""

    repo_id: str
    object_id: str
    created_at: datetime
    commits: list[Commit] = field(default_factory=list)
    private: bool = False
    gated: bool | str = False
    disabled: bool = False
    tags: list[str] = field(default_factory=list)
    card_data: dict[str, Any] | None = None
    pipeline_tag: str | None = "text-generation"
    library_name: str | None = None
    downloads: int = 0
    likes: int = 0
    trending_score: int = 0
    gguf: dict[str, Any] | None = None
    #: Tokens that may read this repo when it is private or gated (the owner, approved users).
    granted: set[str] = field(default_factory=set)

    @property
    def author(self) -> str:
        """The namespace part of the id."""
        return self.repo_id.split("/", 1)[0]

    @property
    def head(self) -> Commit:
        """The commit ``main`` points to."""
        return self.commits[-1]

    @property
    def last_modified(self) -> datetime:
        """Date of the last commit (the Hub's ``lastModified``)."""
        return self.head.date

    def all_tags(self) -> list[str]:
        """Tags as the Hub derives them: given tags, ``gguf`` for GGUF repos, base-model tags."""
        tags = list(self.tags)
        has_gguf = any(p.endswith(".gguf") for p in self.head.files)
        if has_gguf and "gguf" not in tags:
            tags.insert(0, "gguf")
        card = self.card_data or {}
        bases = card.get("base_model")
        bases = [bases] if isinstance(bases, str) else list(bases or [])
        relation = card.get("base_model_relation") or ("quantized" if has_gguf else None)
        for base in bases:
            for tag in (f"base_model:{base}", f"base_model:{relation}:{base}" if relation else ""):
                if tag and tag not in tags:
                    tags.append(tag)
        for tag in ("endpoints_compatible", "region:us"):
            if tag not in tags:
                tags.append(tag)
        return tags

    def used_storage(self) -> int:
        """Bytes of the head snapshot (the Hub counts history too; close enough here)."""
        return sum(b.size for b in self.head.files.values())

    def find_commit(self, revision: str) -> Commit | None:
        """``main`` or a full or short (>= 7 hex) commit sha; None for anything else."""
        if revision == "main":
            return self.head
        if len(revision) >= 7 and all(c in "0123456789abcdef" for c in revision):
            for commit in reversed(self.commits):
                if commit.sha.startswith(revision):
                    return commit
        return None


class HubState:
    """Every repo of the emulated Hub, its blobs (by sha256, for the CDN) and its tokens."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.repos: dict[str, Repo] = {}
        #: Dataset repos (a separate namespace on the Hub; tests/hub_emulator/datasets.py).
        self.datasets: dict[str, Repo] = {}
        self.blobs: dict[str, Blob] = {}
        #: Tokens the Hub accepts; any other ``Authorization`` gets 401 "Invalid credentials".
        self.valid_tokens: set[str] = {"hf_test_user", "hf_test_granted"}
        self._clock = EPOCH
        self._serial = 0

    # --- time and ids -------------------------------------------------------------------------

    def _next_date(self, date: datetime | None) -> datetime:
        # Undated commits happen "now": one minute after the latest commit so far.
        if date is None:
            self._clock += timedelta(minutes=1)
            return self._clock
        self._clock = max(self._clock, date)
        return date

    def _new_sha(self, repo_id: str) -> str:
        self._serial += 1
        return _sha1(f"{repo_id}#{self._serial}".encode())

    # --- mutations ----------------------------------------------------------------------------

    def create_repo(
        self,
        repo_id: str,
        files: Mapping[str, Blob],
        *,
        date: datetime | None = None,
        **attrs: Any,
    ) -> Repo:
        """Create a repo whose first commit holds ``files``; ``attrs`` set Repo fields."""
        with self.lock:
            if repo_id in self.repos:
                raise ValueError(f"repo exists: {repo_id}")
            when = self._next_date(date)
            repo = Repo(repo_id=repo_id, object_id=_sha1(repo_id.encode())[:24], created_at=when)
            for key, value in attrs.items():
                if not hasattr(repo, key):
                    raise TypeError(f"unknown repo field {key}")
                setattr(repo, key, value)
            repo.commits.append(self._commit(repo_id, {}, files, (), "initial commit", when))
            self.repos[repo_id] = repo
            return repo

    def commit(
        self,
        repo_id: str,
        put: Mapping[str, Blob] | None = None,
        delete: Iterable[str] = (),
        *,
        title: str = "Upload folder using huggingface_hub",
        date: datetime | None = None,
    ) -> Commit:
        """Add a commit that uploads ``put`` (replacing same-name files) and removes ``delete``."""
        with self.lock:
            repo = self.repos[repo_id]
            commit = self._commit(
                repo_id, repo.head.files, put or {}, delete, title, self._next_date(date)
            )
            repo.commits.append(commit)
            return commit

    def _commit(
        self,
        repo_id: str,
        base: Mapping[str, Blob],
        put: Mapping[str, Blob],
        delete: Iterable[str],
        title: str,
        date: datetime,
    ) -> Commit:
        files = dict(base)
        for path in delete:
            files.pop(path, None)
        files.update(put)
        for blob in put.values():
            self.blobs[blob.sha256] = blob
        return Commit(sha=self._new_sha(repo_id), date=date, title=title, files=files)

    def create_dataset(self, repo_id: str, files: Mapping[str, Blob]) -> Repo:
        """Create a dataset repo whose first commit holds ``files``."""
        with self.lock:
            when = self._next_date(None)
            repo = Repo(
                repo_id=repo_id,
                object_id=_sha1(b"d:" + repo_id.encode())[:24],
                created_at=when,
                pipeline_tag=None,
            )
            repo.commits.append(self._commit(repo_id, {}, files, (), "initial commit", when))
            self.datasets[repo_id] = repo
            return repo

    def commit_dataset(
        self, repo_id: str, put: Mapping[str, Blob], delete: Iterable[str], *, title: str | None
    ) -> Commit:
        """Add a commit to a dataset repo (the commit endpoint's effect)."""
        with self.lock:
            repo = self.datasets[repo_id]
            commit = self._commit(
                repo_id, repo.head.files, put, delete, title or "Upload", self._next_date(None)
            )
            repo.commits.append(commit)
            return commit

    def delete_repo(self, repo_id: str) -> None:
        """The repo vanishes: every later request about it gets the not-found answers."""
        with self.lock:
            self.repos.pop(repo_id, None)

    def update_repo(self, repo_id: str, **attrs: Any) -> None:
        """Change repo fields without a commit (gating, privacy, downloads, likes)."""
        with self.lock:
            repo = self.repos[repo_id]
            for key, value in attrs.items():
                if not hasattr(repo, key):
                    raise TypeError(f"unknown repo field {key}")
                setattr(repo, key, value)

    def get(self, repo_id: str) -> Repo | None:
        """The repo, or None."""
        with self.lock:
            return self.repos.get(repo_id)
