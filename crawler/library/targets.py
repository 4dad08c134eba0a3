"""Byte sources for GGUF headers (I/O): local files, http(s) URLs, Hub files and quants.

Turns what a user types into a parsed header; a plain URL never gets the HF token.
Details: docs/internals/base.md#targets
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import quote, unquote, urlsplit

from crawler.base.config import Settings
from crawler.base.errors import HubNotFound, HubUnavailable, NoSuchFile, QuantsError, UsageError
from crawler.gguf.parse import GGUFHeader, read_header
from crawler.profile.build import merge_headers
from crawler.profile.labels import parse_quant_label
from crawler.profile.quant_files import (
    byte_parts,
    is_gguf_name,
    is_quant_start,
    shard_info,
    shard_names,
)

if TYPE_CHECKING:
    from crawler.hub import HubClient, HubFile
    from crawler.hub.reader import RangeReader

__all__ = [
    "FileReader",
    "HeaderRead",
    "UrlReader",
    "parse_target",
    "read_target",
    "resolve_quant",
]

# gguf-split shards after the first carry only split.* keys and their tensor infos: 15-17 KB
# for 250-270 tensors (synthetic GLM-4.5-Air in 3 shards); 32 KiB holds that in one read.
_LATER_SHARD_FIRST_READ = 32 * 1024
_REPO = r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*"
_HUB_FILE = re.compile(rf"^(?P<repo>{_REPO})/(?P<path>.+\.gguf(?:\.part\d+(?:of\d+)?)?)$", re.I)
_HUB_QUANT = re.compile(rf"^(?P<repo>{_REPO}):(?P<quant>[A-Za-z0-9_.-]+)$")
_RESOLVE = re.compile(rf"^/(?P<repo>{_REPO})/(?:resolve|blob)/(?P<rev>[^/]+)/(?P<path>.+)$")


class FileReader:
    """``ReadAt`` over a local file; counts reads as requests."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._fh: BinaryIO = self.path.open("rb")
        except FileNotFoundError:
            raise NoSuchFile(f"no such file: {str(self.path)!r}") from None
        except OSError as exc:
            raise UsageError(f"cannot open {self.path}: {exc.strerror}") from None
        self.size = os.fstat(self._fh.fileno()).st_size
        self.requests = 0
        self.bytes_fetched = 0

    def __call__(self, offset: int, length: int) -> bytes:
        """Read ``length`` bytes at ``offset`` (fewer at end of file)."""
        self._fh.seek(offset)
        data = self._fh.read(length)
        self.requests += 1
        self.bytes_fetched += len(data)
        return data

    def close(self) -> None:
        """Close the file."""
        self._fh.close()


def UrlReader(url: str, *, timeout_s: float = 30.0, backoff_s: float = 1.0) -> RangeReader:
    """The range reader (crawler.hub.RangeReader) over a plain http(s) URL.

    Same reader as for Hub files (retries, the Range-ignored guard that streams only the prefix
    wanted, request and byte counts), on a transport of its own that never sends the HF token:
    ``token=False``, and a fresh Settings without one. ``requests`` counts HTTP requests
    (redirect hops included), ``bytes_fetched`` the bytes returned.
    """
    import time

    from crawler.hub.reader import RangeReader
    from crawler.hub.transport import Transport

    transport = Transport(
        Settings(timeout_s=timeout_s, backoff_s=backoff_s),
        limiter=None,
        max_retries=2,
        sleep=time.sleep,
        clock=time.monotonic,
        fail_fast=True,
    )
    return RangeReader(transport, url, repo_id=None, token=False)


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed TARGET: ``kind`` is ``file``, ``url``, ``hub_file`` or ``hub_quant``."""

    kind: str
    value: str
    repo_id: str | None = None
    path: str | None = None
    quant: str | None = None
    revision: str | None = None


def parse_target(target: str, *, endpoint: str = "https://huggingface.co") -> Target:
    """Classify what the user typed. A local path that exists wins over a Hub reading."""
    if target.startswith(("http://", "https://")):
        parts = urlsplit(target)
        base = urlsplit(endpoint)
        m = _RESOLVE.match(unquote(parts.path))
        if m and parts.netloc == base.netloc:
            return Target(
                "hub_file", target, m.group("repo"), m.group("path"), revision=m.group("rev")
            )
        return Target("url", target)
    if Path(target).exists():
        return Target("file", target)
    m = _HUB_QUANT.match(target)
    if m:
        return Target("hub_quant", target, m.group("repo"), quant=m.group("quant"))
    m = _HUB_FILE.match(target)
    if m:
        return Target("hub_file", target, m.group("repo"), m.group("path"))
    if _looks_local(target):
        raise NoSuchFile(f"no such file: {target!r}")
    raise UsageError(
        f"{target!r} is not a local file, an http(s) URL, owner/repo/path.gguf or owner/repo:QUANT"
    )


def _looks_local(target: str) -> bool:
    """A path meant as a file on this machine: no Hub form matched and it names a GGUF file or
    starts like a path."""
    return target.startswith(("/", "./", "../", "~")) or "\\" in target or is_gguf_name(target)


@dataclass(frozen=True, slots=True)
class HeaderRead:
    """A header read from a target, with the facts of the fetch."""

    source: str
    header: GGUFHeader
    file_name: str
    repo_id: str | None = None
    revision: str | None = None
    repo_files: tuple[str, ...] = ()
    #: Logical file size (all shards / parts), when known.
    size_bytes: int | None = None
    #: Bytes before the data section, summed over shards.
    header_bytes: int = 0
    #: Body bytes received for the header reads (API listings not included).
    bytes_fetched: int = 0
    #: HTTP requests (or file reads) for the header reads, redirect hops included.
    requests: int = 0
    shards: tuple[str, ...] = field(default=())


def _quant_files(files: Sequence[HubFile]) -> list[HubFile]:
    """The files that start a quant (crawler.profile.quant_files: no projector, sidecar, imatrix or
    later shard or part)."""
    paths = [f.path for f in files]
    return [f for f in files if is_quant_start(f.path, paths)]


def resolve_quant(files: Sequence[HubFile], quant: str) -> HubFile:
    """The first file of the quant labelled ``quant`` (``Q4_K_M``, ``UD-Q4_K_XL``, ``i1-IQ4_XS``).

    An exact label wins; otherwise the scheme alone (``Q4_K_M`` finds ``i1-Q4_K_M``) if that is
    unambiguous. Raises UsageError naming the labels the repo has.
    """
    want = quant.upper()
    labelled = [(f, parse_quant_label(f.path)) for f in _quant_files(files)]
    exact = [f for f, lab in labelled if lab and lab.text.upper() == want]
    loose = [f for f, lab in labelled if lab and lab.scheme.upper() == want.split("-")[-1]]
    for found in (exact, loose):
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            names = ", ".join(sorted(f.path for f in found))
            raise UsageError(f"{quant!r} matches several files: {names}; name one")
    have = sorted({lab.text for _, lab in labelled if lab})
    raise UsageError(
        f"no quant {quant!r} in this repo; it has: {', '.join(have) if have else 'no GGUF quants'}"
    )


def _shard_paths(path: str, files: Sequence[HubFile]) -> tuple[list[str], list[str]]:
    """(every shard's path by the name, the ones missing from ``files``)."""
    si = shard_info(path)
    if si is None or si[0] != "split":
        return [path], []
    names = shard_names(path)
    present = {f.path for f in files}
    return names, [n for n in names if present and n not in present]


def read_target(
    target: str,
    settings: Settings,
    *,
    hub: HubClient | None = None,
    size_hint: int | None = None,
    announce: Callable[[str], None] | None = None,
) -> HeaderRead:
    """Read (and merge) the header(s) behind ``target``; see parse_target.
    ``announce`` is told, before the first request, what is being fetched from where."""
    t = parse_target(target, endpoint=settings.hf_endpoint)
    cap = settings.max_header_bytes
    if t.kind == "file":
        return _read_local(t.value, cap, size_hint)
    if announce is not None:
        where = "" if t.kind == "url" else f" on the Hub ({settings.hf_endpoint})"
        announce(f"reading the GGUF header of {target}{where} ...")
    if t.kind == "url":
        return _read_url(t.value, settings, cap, size_hint)
    from crawler.hub import HubClient

    # A person is waiting: a Hub that never answers is unreachable after one timeout.
    client = hub or HubClient(settings, fail_fast=True)
    return _read_hub(client, t, cap, size_hint)


def with_known_size(header: GGUFHeader, size: int | None) -> GGUFHeader:
    """``header`` judged against the file's size, as a local read is (read_header with
    ``file_size`` and ``partial_data``): a file that ends before its tensors' data is truncated."""
    if size is None:
        return header
    from dataclasses import replace

    return replace(header, file_size=size, data_truncated=header.data_end > size)


def _read_url(url: str, settings: Settings, cap: int, size_hint: int | None) -> HeaderRead:
    """A plain URL; a ``.partKofN`` URL is joined with its siblings (same folder), whose sizes
    come from a one-byte range read each."""
    parts = urlsplit(url)
    name = unquote(parts.path).rsplit("/", 1)[-1]
    si = shard_info(name)
    names = byte_parts(name, ()) if si is not None and si[0] == "part" and si[2] else [name]
    if names[0] != name:
        raise UsageError(f"{name} is not the first part: the header is in {names[0]}")
    with UrlReader(url, timeout_s=settings.timeout_s, backoff_s=settings.backoff_s) as reader:
        header = read_header(reader, max_header_bytes=cap, size_hint=size_hint, source=url)
        size, requests, fetched = reader.size, reader.requests, reader.bytes_fetched
    shards: tuple[str, ...] = ()
    if len(names) > 1 and size is not None:
        folder = parts.path.rsplit("/", 1)[0]
        shards = tuple(
            parts._replace(path=f"{folder}/{quote(n)}").geturl() if n != name else url
            for n in names
        )
        for sibling in shards[1:]:
            with UrlReader(sibling, timeout_s=settings.timeout_s) as r:
                r(0, 1)
                requests += r.requests
                fetched += r.bytes_fetched
                if r.size is None:
                    raise HubUnavailable(f"{sibling} did not say its size")
                size += r.size
    header = with_known_size(header, size)
    return HeaderRead(
        source=url,
        header=header,
        file_name=name,
        size_bytes=size,
        header_bytes=header.header_bytes,
        bytes_fetched=fetched,
        requests=requests,
        shards=shards,
    )


def _is_shard(header: GGUFHeader) -> bool:
    """A gguf-split shard says so in its keys (``split.count`` > 1, tools/gguf-split); the name
    ``-00001-of-00002`` only says where to look for the others."""
    count = header.metadata.get("split.count")
    return isinstance(count, int) and not isinstance(count, bool) and count > 1


def _has_split_keys(path: str, cap: int) -> bool:
    # A local header read is cheap (the page cache serves the second read of it).
    reader = FileReader(path)
    try:
        header = read_header(
            reader, file_size=reader.size, max_header_bytes=cap, source=path, partial_data=True
        )
    finally:
        reader.close()
    return _is_shard(header)


def _read_local(path: str, cap: int, size_hint: int | None) -> HeaderRead:
    paths = [path]
    si = shard_info(path)
    if si is not None and si[0] == "split" and not _has_split_keys(path, cap):
        si = None  # a whole file with a split-style name: llama.cpp loads it as one file
    if si is not None and si[0] == "split":
        paths = shard_names(path)
    elif si is not None and si[0] == "part":
        folder = Path(path).parent
        paths = byte_parts(path, [str(folder / n.name) for n in folder.iterdir()])
    for p in paths:
        if not Path(p).exists():
            raise NoSuchFile(f"missing shard {p!r} of {path!r}: no such file")
    if si is not None and si[0] == "part":
        # Byte-concatenated parts: only part 1 has a header; the file is all parts together.
        total = sum(Path(p).stat().st_size for p in paths)
        shard_paths = paths[:1]
    else:
        total = sum(Path(p).stat().st_size for p in paths)
        shard_paths = paths
    headers: list[GGUFHeader] = []
    requests, fetched, hint = 0, 0, size_hint
    for i, p in enumerate(shard_paths):
        reader = FileReader(p)
        try:
            size = total if len(shard_paths) == 1 else reader.size
            h = read_header(
                reader,
                file_size=size,
                max_header_bytes=cap,
                size_hint=hint if i == 0 else None,
                first_read=None if i == 0 else _LATER_SHARD_FIRST_READ,
                source=p,
                partial_data=True,
            )
        finally:
            reader.close()
        headers.append(h)
        requests += reader.requests
        fetched += reader.bytes_fetched
    header = merge_headers(headers, source=path)
    return HeaderRead(
        source=path,
        header=header,
        file_name=Path(paths[0]).name,
        repo_files=tuple(str(p.name) for p in Path(path).parent.iterdir()),
        size_bytes=total,
        header_bytes=sum(h.header_bytes for h in headers),
        bytes_fetched=fetched,
        requests=requests,
        shards=tuple(paths),
    )


def _read_hub(client: HubClient, t: Target, cap: int, size_hint: int | None) -> HeaderRead:
    assert t.repo_id is not None
    revision = t.revision
    if revision is None or not re.fullmatch(r"[0-9a-f]{40}", revision):
        revision = client.repo_info(t.repo_id, revision).sha
        if revision is None:
            raise HubUnavailable("the Hub did not say the repo's commit", repo_id=t.repo_id)
    files = client.list_files(t.repo_id, revision)
    if t.kind == "hub_quant":
        assert t.quant is not None
        first = resolve_quant(files, t.quant).path
    else:
        assert t.path is not None
        first = t.path
        if not any(f.path == first for f in files):
            raise HubNotFound(f"no file {first} in {t.repo_id}", repo_id=t.repo_id)
    sizes = {f.path: f.size for f in files}
    si = shard_info(first)
    is_part = si is not None and si[0] == "part"
    missing: list[str] = []
    if is_part:
        paths = byte_parts(first, [f.path for f in files])
        to_read = paths[:1]
    else:
        paths, missing = _shard_paths(first, files)
        to_read = [first] if missing else paths
    headers: list[GGUFHeader] = []
    requests, fetched, hint = 0, 0, size_hint
    for i, p in enumerate(to_read):
        if i == 1 and not _is_shard(headers[0]):
            break  # a split-style name on a whole file: the keys decide
        reader = client.range_reader(t.repo_id, p, revision)
        size = sum(sizes.get(x, 0) for x in paths) if is_part else sizes.get(p)
        try:
            h = read_header(
                reader,
                file_size=size or None,
                max_header_bytes=cap,
                size_hint=hint if i == 0 else None,
                first_read=None if i == 0 else _LATER_SHARD_FIRST_READ,
                source=p,
                partial_data=True,
            )
        except QuantsError as exc:
            if getattr(exc, "source", None) is None:
                exc.source = p  # type: ignore[attr-defined]
            raise
        headers.append(h)
        requests += reader.requests
        fetched += reader.bytes_fetched
    if len(headers) < len(to_read) or (missing and not _is_shard(headers[0])):
        paths = [first]
    elif missing:
        raise HubNotFound(f"split quant is missing shard(s): {', '.join(missing)}")
    header = merge_headers(headers, source=first)
    return HeaderRead(
        source=f"{t.repo_id}/{first}",
        header=header,
        file_name=first.rsplit("/", 1)[-1],
        repo_id=t.repo_id,
        revision=revision,
        repo_files=tuple(f.path for f in files),
        size_bytes=sum(sizes.get(p, 0) for p in paths) or None,
        header_bytes=sum(h.header_bytes for h in headers),
        bytes_fetched=fetched,
        requests=requests,
        shards=tuple(paths),
    )
