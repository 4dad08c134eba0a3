"""Group a repo's files into quants (pure: no I/O).

One quant is one model a user would run: a file, the shards of a split model, or joined parts.
Details: docs/internals/profile.md#grouping
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from crawler.profile.quant_files import FileKind, classify, strip_shard_suffix

__all__ = [
    "FileKind",
    "GroupedFile",
    "QuantGroup",
    "RepoLayout",
    "SourceFile",
    "classify",
    "content_key",
    "group_files",
]


class SourceFile(Protocol):
    """What grouping needs of a listed file (``crawler.hub.HubFile`` has these)."""

    @property
    def path(self) -> str: ...

    @property
    def size(self) -> int: ...

    @property
    def content_key(self) -> str: ...


@dataclass(frozen=True, slots=True)
class GroupedFile:
    """One GGUF-related file with its kind and place in its quant."""

    path: str
    size: int
    content_key: str
    kind: FileKind
    shard_index: int | None = None
    shard_count: int | None = None
    #: The quant this file belongs to (its ``path``), None for mmproj/sidecars/other.
    quant_path: str | None = None


@dataclass(frozen=True, slots=True)
class QuantGroup:
    """One quant: its key ``path`` (the file, or the first shard/part) and its files in order."""

    path: str
    files: tuple[GroupedFile, ...]
    #: False when a shard or part is missing (an upload in progress): not analysed.
    complete: bool

    @property
    def size_bytes(self) -> int:
        """Total bytes over all files."""
        return sum(f.size for f in self.files)

    @property
    def shard_count(self) -> int:
        """Number of files the quant is made of."""
        return len(self.files)

    @property
    def header_files(self) -> tuple[GroupedFile, ...]:
        """Files that carry a GGUF header: every gguf-split shard, but only part 1 of parts."""
        return tuple(f for f in self.files if f.kind != FileKind.PART or f.shard_index == 1)

    @property
    def content_key(self) -> str:
        """Identity of the quant's bytes; changes when any file is re-uploaded."""
        return content_key(f.content_key for f in self.files)


@dataclass(frozen=True, slots=True)
class RepoLayout:
    """A repo's GGUF files grouped: quants, plus the files kept apart."""

    quants: tuple[QuantGroup, ...]
    #: Every GGUF-related file (quant members, mmproj, sidecars), in path order.
    files: tuple[GroupedFile, ...]


def content_key(keys: Iterable[str]) -> str:
    """One file's key as is; several files' keys hashed in order (bounded length)."""
    keys = list(keys)
    if len(keys) == 1:
        return keys[0]
    return "sha256:" + hashlib.sha256(",".join(keys).encode("utf-8")).hexdigest()


def _group_key(path: str, kind: FileKind, count: int | None) -> tuple[str, ...]:
    folder, name = posixpath.split(path)
    if kind in (FileKind.SHARD, FileKind.PART):
        return (kind.value, folder, strip_shard_suffix(name).lower(), str(count))
    return ("file", path)


def group_files(files: Iterable[SourceFile]) -> RepoLayout:
    """Group listed files into quants; ignored files (non-GGUF, imatrix) are dropped."""
    grouped: list[GroupedFile] = []
    members: dict[tuple[str, ...], list[GroupedFile]] = {}
    for f in sorted(files, key=lambda f: f.path):
        kinds = classify(f.path)
        if kinds is None:
            continue
        kind, index, count = kinds
        entry = GroupedFile(f.path, f.size, f.content_key, kind, index, count)
        if kind in (FileKind.GGUF, FileKind.SHARD, FileKind.PART):
            members.setdefault(_group_key(f.path, kind, count), []).append(entry)
        else:
            grouped.append(entry)
    quants: list[QuantGroup] = []
    for key, entries in members.items():
        if key[0] == "file":
            ordered = entries
            complete = True
        else:
            # Duplicate indexes cannot happen in one tree (paths differ only by case otherwise);
            # keep the first of each index anyway so a quant never lists a shard twice.
            by_index: dict[int, GroupedFile] = {}
            for e in entries:
                assert e.shard_index is not None
                by_index.setdefault(e.shard_index, e)
            ordered = [by_index[i] for i in sorted(by_index)]
            count = ordered[0].shard_count or 0
            complete = sorted(by_index) == list(range(1, count + 1))
            if key[0] == "part" and key[3] == "None":
                # .partNN: renumber 1..n; complete when the indexes run on from 0 or 1 (a missing
                # last part cannot be seen from the names; the header's offsets tell).
                first = min(by_index)
                complete = first in (0, 1) and sorted(by_index) == list(
                    range(first, first + len(by_index))
                )
                ordered = [
                    GroupedFile(e.path, e.size, e.content_key, e.kind, i + 1, len(ordered))
                    for i, e in enumerate(ordered)
                ]
        quant_path = ordered[0].path
        files_in_quant = tuple(
            GroupedFile(
                e.path, e.size, e.content_key, e.kind, e.shard_index, e.shard_count, quant_path
            )
            for e in ordered
        )
        grouped.extend(files_in_quant)
        quants.append(QuantGroup(quant_path, files_in_quant, complete))
    quants.sort(key=lambda q: q.path)
    grouped.sort(key=lambda f: f.path)
    return RepoLayout(tuple(quants), tuple(grouped))
