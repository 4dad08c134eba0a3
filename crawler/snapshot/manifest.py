"""The snapshot format (pure): which Parquet files a snapshot holds, their columns, the manifest.

The column lists ARE the published schema: any change bumps SCHEMA_VERSION.
Details: docs/internals/snapshot.md#manifest
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "FILES",
    "FORMAT",
    "MANIFEST_NAME",
    "OPTIONAL_FILES",
    "QUANT_LEFT_OUT",
    "REPO_LEFT_OUT",
    "SCHEMA_VERSION",
    "Column",
    "FileEntry",
    "Manifest",
    "ManifestError",
    "parse_manifest",
]

#: Bump on any change to the files or columns below.
SCHEMA_VERSION = 1
FORMAT = "quants-snapshot"
MANIFEST_NAME = "manifest.json"
#: Reasons in ``left_out`` besides column names: the row's repo, or its quant, was left out.
REPO_LEFT_OUT = "repo_left_out"
QUANT_LEFT_OUT = "quant_left_out"
_REASON = re.compile(r"[a-z0-9_]{1,64}")

Kind = Literal["int", "float", "bool", "str", "ts", "json", "bytes"]


class ManifestError(ValueError):
    """The manifest is missing, malformed, or from a newer schema."""


@dataclass(frozen=True, slots=True)
class Column:
    """One Parquet column: name and logical kind (``ts`` = UTC timestamp, ``json`` = JSON text)."""

    name: str
    kind: Kind


def _cols(spec: str) -> tuple[Column, ...]:
    out = []
    for item in spec.split():
        name, _, kind = item.partition(":")
        out.append(Column(name, kind))  # type: ignore[arg-type]
    return tuple(out)


_QUANT_KEY = "repo_id:str path:str "

#: file name -> columns. Order is the order of the Parquet columns.
FILES: dict[str, tuple[Column, ...]] = {
    "repos.parquet": _cols(
        "repo_id:str author:str sha:str scanned_sha:str last_modified:ts created_at:ts "
        "downloads:int likes:int gated:str private:bool base_model:str tags:json card_data:json "
        "first_seen_at:ts last_seen_at:ts scanned_at:ts vanished_at:ts"
    ),
    "quants.parquet": _cols(
        _QUANT_KEY + "revision:str content_key:str quant_label:str architecture:str "
        "base_model:str file_type:int shard_count:int size_bytes:int header_bytes:int "
        "n_tensors:int n_params:int bpw:float mtp_present:bool mtp_state:str mtp_layers:int "
        "mtp_min_bits:float mtp_preserved:bool attn_min_bits:float attn_preserved:bool "
        "dynamic:bool loadable_by_mainline:bool claims:json profile:json analysed_at:ts "
        "first_seen_at:ts vanished_at:ts quality_score:float fit_weights_bytes:int "
        "fit_expert_bytes:int fit_mtp_bytes:int fit_kv_per_token:int fit_fixed_bytes:int "
        "fit_mtp_kv_per_token:int fit_read_bytes:int fit_moe_layers:int fit_ctx_train:int "
        "fit_ubatch_bytes:int fit_draft_bytes:int fit_verify_experts:float"
    ),
    "files.parquet": _cols(
        "repo_id:str path:str quant_path:str kind:str shard_index:int shard_count:int "
        "size_bytes:int lfs_oid:str blob_id:str revision:str analysed_oid:str header_bytes:int "
        "analysed_at:ts first_seen_at:ts vanished_at:ts"
    ),
    "tensor_groups.parquet": _cols(
        _QUANT_KEY + "group_name:str n_tensors:int n_params:int n_bytes:int bpw:float "
        "min_bits:float max_bits:float types:json"
    ),
    "memory_models.parquet": _cols(
        _QUANT_KEY + "status:str reason:str weights_bytes:int mtp_weights_bytes:int "
        "expert_bytes:int host_bytes:int kv_bytes_per_token_f16:int fixed_bytes_f16:int "
        "coefficients:json n_expert:int n_expert_used:int n_embd:int n_vocab:int "
        "mtp_available:bool"
    ),
    "quant_versions.parquet": _cols(
        _QUANT_KEY + "revision:str content_key:str size_bytes:int profile:json analysed_at:ts"
    ),
}
#: Written only with ``--with-tensors``: the raw tensor tables ``quants reprofile`` reads.
OPTIONAL_FILES: dict[str, tuple[Column, ...]] = {
    "tensor_tables.parquet": _cols(
        _QUANT_KEY + "revision:str encoding:str n_tensors:int data:bytes"
    ),
}


@dataclass(frozen=True, slots=True)
class FileEntry:
    """A file of the snapshot as the manifest lists it."""

    rows: int
    bytes: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Manifest:
    """``manifest.json``: what the snapshot holds and how to check it."""

    schema_version: int
    quants_version: str
    created_at: str
    scan_ids: tuple[int, ...]
    #: ISO times: the first scan's start and the last scan's end (None for an empty catalog).
    scans_from: str | None
    scans_to: str | None
    since: str | None
    files: Mapping[str, FileEntry] = field(default_factory=dict)
    #: file -> reason -> rows the export left out because an import refuses them: a column
    #: name (a value of that column is refused), or REPO_LEFT_OUT / QUANT_LEFT_OUT (the row
    #: belongs to a repo or quant left out). Empty when nothing was left out.
    left_out: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The manifest as written (keys sorted by json.dumps)."""
        return {
            "format": FORMAT,
            "schema_version": self.schema_version,
            "quants_version": self.quants_version,
            "created_at": self.created_at,
            "scans": {"ids": list(self.scan_ids), "from": self.scans_from, "to": self.scans_to},
            "since": self.since,
            "files": {
                name: {"rows": e.rows, "bytes": e.bytes, "sha256": e.sha256}
                for name, e in sorted(self.files.items())
            },
            "left_out": {name: dict(reasons) for name, reasons in self.left_out.items()},
        }

    @property
    def rows_left_out(self) -> int:
        """Rows the export left out, all files together."""
        return sum(n for reasons in self.left_out.values() for n in reasons.values())

    def dumps(self) -> str:
        """Stable text (sorted keys), so an unchanged catalog gives an identical manifest."""
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


def _need(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ManifestError(
            f"manifest: {key!r} is missing or not a {getattr(kind, '__name__', kind)}"
        )
    return value


def parse_manifest(text: str, *, supported: int = SCHEMA_VERSION) -> Manifest:
    """Parse and check ``manifest.json``; refuse newer schemas and unknown files."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ManifestError(f"manifest.json is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ManifestError(f"manifest.json is not a {FORMAT} manifest")
    version = _need(data, "schema_version", int)
    if version > supported:
        raise ManifestError(
            f"snapshot schema version {version} is newer than this quants supports ({supported}); "
            "upgrade quants to import it"
        )
    if version < 1:
        raise ManifestError(f"snapshot schema version {version} is not valid")
    scans = data.get("scans") or {}
    files_raw = _need(data, "files", dict)
    known = {**FILES, **OPTIONAL_FILES}
    files: dict[str, FileEntry] = {}
    for name, entry in files_raw.items():
        if name not in known:
            raise ManifestError(f"manifest lists an unknown file {name!r}")
        if not isinstance(entry, dict):
            raise ManifestError(f"manifest entry for {name!r} is not an object")
        sha = _need(entry, "sha256", str)
        if len(sha) != 64:
            raise ManifestError(f"manifest sha256 of {name!r} is not 64 hex digits")
        files[name] = FileEntry(_need(entry, "rows", int), _need(entry, "bytes", int), sha)
    missing = sorted(set(FILES) - set(files))
    if missing:
        raise ManifestError(f"manifest lacks required files: {', '.join(missing)}")
    ids: Sequence[Any] = scans.get("ids") or []
    return Manifest(
        schema_version=version,
        quants_version=str(data.get("quants_version") or "unknown"),
        created_at=str(data.get("created_at") or ""),
        scan_ids=tuple(int(i) for i in ids if isinstance(i, int)),
        scans_from=scans.get("from"),
        scans_to=scans.get("to"),
        since=data.get("since"),
        files=files,
        left_out=_left_out(data.get("left_out", {}), known),
    )


def _left_out(raw: Any, known: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """``left_out`` as the export writes it (an older snapshot has none: empty)."""
    if not isinstance(raw, dict):
        raise ManifestError("manifest: 'left_out' is not an object")
    out: dict[str, dict[str, int]] = {}
    for name, reasons in raw.items():
        if name not in known or not isinstance(reasons, dict):
            raise ManifestError(f"manifest: 'left_out' names an unknown file {str(name)[:80]!r}")
        counts: dict[str, int] = {}
        for reason, n in reasons.items():
            if not _REASON.fullmatch(reason) or not isinstance(n, int) or isinstance(n, bool):
                raise ManifestError(f"manifest: 'left_out' of {name!r} is not reason -> rows")
            if not 0 <= n <= 1 << 62:
                raise ManifestError(f"manifest: 'left_out' of {name!r} is not reason -> rows")
            counts[reason] = n
        out[name] = counts
    return out
