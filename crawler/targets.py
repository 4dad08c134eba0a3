"""Byte sources for GGUF headers (I/O): local files, http(s) URLs, Hub files and quants.

Each source is a ``ReadAt`` that counts its requests and bytes. read_target turns what a
user types (``model.gguf``, ``https://...``, ``owner/repo/path.gguf``, ``owner/repo:Q4_K_M``)
into a parsed (and, for split quants, merged) header plus the fetch facts ``quants inspect``
reports. Hub access goes through crawler.hub.HubClient (token, retries, rate limits);
plain URLs get the same range reader (crawler.hub.RangeReader) on a transport of their own
that never sends the HF token to a foreign host.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import unquote, urlsplit

from crawler.config import Settings
from crawler.errors import HubNotFound, HubUnavailable, QuantsError, UsageError
from crawler.gguf.parse import GGUFHeader, read_header
from crawler.profile.build import merge_headers
from crawler.profile.labels import byte_parts, is_mtp_sidecar_name, parse_quant_label, split_info

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
    raise UsageError(
        f"{target!r} is not a local file, an http(s) URL, owner/repo/path.gguf or owner/repo:QUANT"
    )


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
    """GGUF files that can be a quant's first file (no mmproj, no MTP sidecar, no later part)."""
    out = []
    paths = [f.path for f in files]
    for f in files:
        base = f.path.rsplit("/", 1)[-1].lower()
        si = split_info(f.path)
        if not (base.endswith(".gguf") or (si and si[0] == "part")):
            continue
        if "mmproj" in base or is_mtp_sidecar_name(f.path):
            continue
        if si is not None and si[2] and si[1] != 1:
            continue
        if si is not None and not si[2] and byte_parts(f.path, paths)[0] != f.path:
            continue  # .partNN: only the lowest index holds the header
        out.append(f)
    return out


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


def _shard_paths(path: str, files: Sequence[HubFile]) -> list[str]:
    si = split_info(path)
    if si is None or si[0] != "split":
        return [path]
    _, _, count = si
    m = re.search(r"-(\d{5})-of-(\d{5})\.gguf$", path, re.I)
    assert m is not None
    stem = path[: m.start()]
    names = [f"{stem}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
    present = {f.path for f in files}
    missing = [n for n in names if n not in present]
    if present and missing:
        raise HubNotFound(f"split quant is missing shard(s): {', '.join(missing)}")
    return names


def read_target(
    target: str,
    settings: Settings,
    *,
    hub: HubClient | None = None,
    size_hint: int | None = None,
) -> HeaderRead:
    """Read (and merge) the header(s) behind ``target``; see parse_target."""
    t = parse_target(target, endpoint=settings.hf_endpoint)
    cap = settings.max_header_bytes
    if t.kind == "file":
        return _read_local(t.value, cap, size_hint)
    if t.kind == "url":
        with UrlReader(
            t.value, timeout_s=settings.timeout_s, backoff_s=settings.backoff_s
        ) as reader:
            header = read_header(reader, max_header_bytes=cap, size_hint=size_hint, source=t.value)
            return HeaderRead(
                source=t.value,
                header=header,
                file_name=unquote(urlsplit(t.value).path).rsplit("/", 1)[-1],
                size_bytes=reader.size,
                header_bytes=header.header_bytes,
                bytes_fetched=reader.bytes_fetched,
                requests=reader.requests,
            )
    from crawler.hub import HubClient

    client = hub or HubClient(settings)
    return _read_hub(client, t, cap, size_hint)


def _read_local(path: str, cap: int, size_hint: int | None) -> HeaderRead:
    paths = [path]
    si = split_info(path)
    if si is not None and si[0] == "split":
        m = re.search(r"-(\d{5})-of-(\d{5})\.gguf$", path, re.I)
        assert m is not None
        paths = [f"{path[: m.start()]}-{i:05d}-of-{si[2]:05d}.gguf" for i in range(1, si[2] + 1)]
    elif si is not None and si[0] == "part":
        folder = Path(path).parent
        paths = byte_parts(path, [str(folder / n.name) for n in folder.iterdir()])
    for p in paths:
        if not Path(p).exists():
            raise UsageError(f"missing shard {p}")
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
    si = split_info(first)
    if si is not None and si[0] == "part":
        paths = byte_parts(first, [f.path for f in files])
        to_read = paths[:1]
    else:
        paths = _shard_paths(first, files)
        to_read = paths
    headers: list[GGUFHeader] = []
    requests, fetched, hint = 0, 0, size_hint
    for i, p in enumerate(to_read):
        reader = client.range_reader(t.repo_id, p, revision)
        size = sum(sizes.get(x, 0) for x in paths) if len(to_read) == 1 else sizes.get(p)
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
