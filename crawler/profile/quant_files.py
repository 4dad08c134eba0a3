"""Which files make one quant: the naming rules, in one place (pure: names only, no I/O).

The crawl, inspect, estimate, check-log and the snapshots all ask it, so a file means one thing.
Details: docs/internals/profile.md#quant_files
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from enum import StrEnum

__all__ = [
    "FileKind",
    "byte_parts",
    "classify",
    "is_gguf_name",
    "is_imatrix",
    "is_mtp_sidecar",
    "is_projector",
    "is_quant_start",
    "is_sidecar",
    "llama_cpp_model_file",
    "loaded_name",
    "shard_info",
    "shard_names",
    "strip_shard_suffix",
]

_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<index>\d{1,5})-of-(?P<count>\d{1,5})\.gguf$", re.IGNORECASE)
_PART = re.compile(r"^(?P<base>.+\.gguf)\.part(?P<index>\d+)of(?P<count>\d+)$", re.IGNORECASE)
_PARTNN = re.compile(r"^(?P<base>.+\.gguf)\.part(?P<index>\d+)$", re.IGNORECASE)
_MTP_SIDECAR = re.compile(r"^mtp[-_.]|[-_.]mtp[-_]only[-_.]", re.IGNORECASE)
_DRAFT_SIDECAR = re.compile(r"^(?:eagle3|dflash|dspark)-", re.IGNORECASE)


class FileKind(StrEnum):
    """What a repo file is (``files.kind`` in the catalog)."""

    GGUF = "gguf"
    SHARD = "shard"
    PART = "part"
    MMPROJ = "mmproj"
    MTP_SIDECAR = "mtp_sidecar"
    OTHER = "other"


def _base(path: str) -> str:
    return posixpath.basename(path.replace("\\", "/"))


def is_gguf_name(path: str) -> bool:
    """A GGUF file or a byte-cut part of one (``.gguf``, ``.gguf.part1of2``, ``.gguf.part00``)."""
    name = _base(path)
    return name.lower().endswith(".gguf") or bool(_PART.match(name) or _PARTNN.match(name))


def is_projector(path: str) -> bool:
    """A vision projector (mmproj) file."""
    return "mmproj" in _base(path).lower()


def is_imatrix(path: str) -> bool:
    """An importance-matrix file."""
    return "imatrix" in _base(path).lower()


def is_sidecar(path: str) -> bool:
    """A draft-model sidecar (MTP head, EAGLE-3, DFlash, DSpark): not a quant of the model."""
    name = _base(path)
    return bool(_MTP_SIDECAR.search(name) or _DRAFT_SIDECAR.search(name))


def is_mtp_sidecar(path: str) -> bool:
    """An MTP-only sidecar (``mtp-<name>.gguf``): the head of a model shipped apart from it."""
    name = _base(path)
    return name.lower().endswith(".gguf") and bool(_MTP_SIDECAR.search(name))


def classify(path: str) -> tuple[FileKind, int | None, int | None] | None:
    """Kind, shard index and shard count of ``path``; None for files that are no model part
    (not GGUF, imatrix). A shard or part numbered outside 1..count is OTHER."""
    name = _base(path)
    if not is_gguf_name(name) or is_imatrix(name):
        return None
    if is_projector(name):
        return FileKind.MMPROJ, None, None
    if is_sidecar(name):
        return FileKind.MTP_SIDECAR, None, None
    part = _PART.match(name)
    if part is not None:
        index, count = int(part["index"]), int(part["count"])
        return (
            (FileKind.PART, index, count) if 1 <= index <= count else (FileKind.OTHER, None, None)
        )
    partnn = _PARTNN.match(name)
    if partnn is not None:
        return FileKind.PART, int(partnn["index"]), None
    split = _SPLIT.match(name)
    if split is not None:
        index, count = int(split["index"]), int(split["count"])
        if 1 <= index <= count:
            return FileKind.SHARD, index, count
        return FileKind.OTHER, None, None
    return FileKind.GGUF, None, None


def shard_info(path: str) -> tuple[str, int, int] | None:
    """``(kind, index, count)``: kind ``split`` (gguf-split, 1-based) or ``part`` (a byte cut;
    ``.partNN`` has no count in its name: ``count`` 0, ``index`` as written); None for a whole
    file."""
    name = _base(path)
    m = _SPLIT.match(name)
    if m:
        return "split", int(m["index"]), int(m["count"])
    m = _PART.match(name)
    if m:
        return "part", int(m["index"]), int(m["count"])
    m = _PARTNN.match(name)
    if m:
        return "part", int(m["index"]), 0
    return None


def strip_shard_suffix(name: str) -> str:
    """The name without its shard or part suffix: ``X-00001-of-00003.gguf`` -> ``X.gguf``."""
    folder, base = posixpath.split(name)
    for pattern, repl in ((_PART, r"\g<base>"), (_PARTNN, r"\g<base>"), (_SPLIT, r"\g<stem>.gguf")):
        if pattern.match(base):
            base = pattern.sub(repl, base)
            break
    return posixpath.join(folder, base) if folder else base


def shard_names(path: str) -> list[str]:
    """Every shard of the gguf-split quant ``path`` belongs to, in order, with the digit width
    the given name has (``X-001-of-003.gguf`` -> ``X-001..003``); ``[path]`` for any other."""
    folder, name = posixpath.split(path)
    m = _SPLIT.match(name)
    if m is None:
        return [path]
    width = len(m["index"])
    names = [
        f"{m['stem']}-{i:0{width}d}-of-{m['count']}.gguf" for i in range(1, int(m["count"]) + 1)
    ]
    return [posixpath.join(folder, n) if folder else n for n in names]


def byte_parts(path: str, siblings: Iterable[str]) -> list[str]:
    """Every part of the byte-cut file ``path`` is a part of, in order (first = the header's).

    ``.partKofN``: parts 1..N by name. ``.partNN``: the paths among ``siblings`` (same folder
    and stem) with a ``.partNN`` suffix, by index; gaps are left to the caller to notice.
    """
    si = shard_info(path)
    if si is None or si[0] != "part":
        return [path]
    if si[2]:
        stem = re.sub(r"\.part\d+of\d+$", "", path, flags=re.IGNORECASE)
        return [f"{stem}.part{i}of{si[2]}" for i in range(1, si[2] + 1)]
    stem = re.sub(r"\.part\d+$", "", path, flags=re.IGNORECASE)
    found: dict[int, str] = {}
    for s in {*siblings, path}:
        m = re.fullmatch(re.escape(stem) + r"\.part(\d+)", s, flags=re.IGNORECASE)
        if m:
            found.setdefault(int(m.group(1)), s)
    return [found[i] for i in sorted(found)]


def is_quant_start(path: str, siblings: Iterable[str] = ()) -> bool:
    """Whether ``path`` is the first file of a quant (a whole GGUF, shard 1, the first part)."""
    kinds = classify(path)
    if kinds is None or kinds[0] not in (FileKind.GGUF, FileKind.SHARD, FileKind.PART):
        return False
    kind, index, count = kinds
    if kind == FileKind.PART and count is None:
        return byte_parts(path, siblings)[0] == path  # .partNN: the lowest index
    return index in (None, 1)


def loaded_name(path: str) -> str:
    """The file name llama.cpp is given for the quant whose first file is ``path``: the first
    shard's name, or a byte-cut file's name once its parts are joined (``X.gguf``)."""
    name = _base(path)
    info = shard_info(name)
    return strip_shard_suffix(name) if info is not None and info[0] == "part" else name


def llama_cpp_model_file(path: str) -> bool:
    """llama.cpp's own test of a model file (common/download.cpp ``gguf_filename_is_model``,
    applied to a first shard): case-sensitive substrings, 5-digit shards; what ``-hf`` picks."""
    name = _base(path)
    if not name.endswith(".gguf"):
        return False
    if any(k in name for k in ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")):
        return False
    m = re.search(r"-(\d{5})-of-\d{5}\.gguf$", name)
    return m is None or int(m.group(1)) == 1
