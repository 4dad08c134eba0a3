"""One quant's analysis from its headers (pure: no I/O): profile, memory model, lineage.

Glue between the parser and the rule modules; the catalog stores the QuantAnalysis as is.
Details: docs/internals/profile.md#analysis
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crawler.base.errors import QuantsError
from crawler.fit import coefficients
from crawler.gguf.parse import GGUFHeader
from crawler.profile.build import build_profile, merge_headers
from crawler.profile.groups import GroupStats

__all__ = [
    "AnalysedShard",
    "MemoryRecord",
    "QuantAnalysis",
    "StoredProfile",
    "analyse_quant",
    "stored_profile",
]


@dataclass(frozen=True, slots=True)
class AnalysedShard:
    """One header read: the file, its content key, the bytes the header spans, the header."""

    path: str
    content_key: str
    header_bytes: int
    header: GGUFHeader


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """Memory-model coefficients of a quant (``crawler.fit.coefficients`` flattened)."""

    status: str
    reason: str | None = None
    weights_bytes: int | None = None
    mtp_weights_bytes: int | None = None
    expert_bytes: int | None = None
    host_bytes: int | None = None
    kv_bytes_per_token_f16: int | None = None
    fixed_bytes_f16: int | None = None
    coefficients: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StoredProfile:
    """A quant's profile as the catalog stores it: the ``quants`` columns, typed, and the JSON.

    ``json`` is ``quants inspect --json``'s document (stored as is in ``quants.profile`` and the
    history); the fields are the verdict columns read from it by stored_profile.
    """

    json: Mapping[str, Any]
    quant_label: str | None = None
    architecture: str | None = None
    n_tensors: int | None = None
    n_params: int | None = None
    bpw: float | None = None
    mtp_present: bool | None = None
    mtp_state: str | None = None
    mtp_layers: int | None = None
    #: "Preserved" speaks of MTP tensors in this file: None when there are none.
    mtp_min_bits: float | None = None
    mtp_preserved: bool | None = None
    attn_min_bits: float | None = None
    attn_preserved: bool | None = None
    dynamic: bool | None = None
    loadable_by_mainline: bool | None = None
    claims: tuple[Any, ...] = ()
    #: The coarse tensor groups, in name order.
    groups: tuple[GroupStats, ...] = ()


def _opt_float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _opt_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _opt_bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def stored_profile(profile: Mapping[str, Any]) -> StoredProfile:
    """The typed columns of a profile JSON (``quants inspect --json``'s keys); values of the
    wrong type become None, so a stored document from an older version still loads."""
    mtp = profile.get("mtp") or {}
    attn = profile.get("attention") or {}
    present = _opt_bool(mtp.get("present"))
    layers = mtp.get("layers")
    groups = tuple(
        GroupStats(
            name=name,
            n_tensors=_opt_int(g.get("n_tensors")) or 0,
            n_params=_opt_int(g.get("n_params")) or 0,
            n_bytes=_opt_int(g.get("n_bytes")) or 0,
            bpw=_opt_float(g.get("bpw")),
            min_bits=_opt_float(g.get("min_bits")),
            max_bits=_opt_float(g.get("max_bits")),
            types=tuple((g.get("types") or {}).items()),
        )
        for name, g in sorted((profile.get("groups") or {}).items())
    )
    return StoredProfile(
        json=profile,
        quant_label=_opt_str(profile.get("quant_label")),
        architecture=_opt_str(profile.get("architecture")),
        n_tensors=_opt_int(profile.get("n_tensors")),
        n_params=_opt_int(profile.get("n_params")),
        bpw=_opt_float(profile.get("bpw")),
        mtp_present=present,
        mtp_state=_opt_str(mtp.get("state")),
        # The profile lists the MTP block indexes; the column counts them.
        mtp_layers=len(layers) if isinstance(layers, list) else _opt_int(layers),
        mtp_min_bits=_opt_float(mtp.get("min_bits")) if present else None,
        mtp_preserved=_opt_bool(mtp.get("preserved")) if present else None,
        attn_min_bits=_opt_float(attn.get("min_bits")),
        attn_preserved=_opt_bool(attn.get("preserved")),
        dynamic=_opt_bool(profile.get("dynamic")),
        loadable_by_mainline=_opt_bool(profile.get("loadable_by_mainline")),
        claims=tuple(profile.get("claims") or ()),
        groups=groups,
    )


@dataclass(frozen=True, slots=True)
class QuantAnalysis:
    """A quant analysed now: its profile (typed, with inspect's JSON), memory model, shards read."""

    profile: StoredProfile
    memory: MemoryRecord
    shards: tuple[AnalysedShard, ...]
    base_model: str | None = None
    #: ``general.file_type`` of the first shard (the profile names it; the column is the id).
    file_type: int | None = None


def _gguf_base_model(header: GGUFHeader) -> str | None:
    # convert_hf_to_gguf.py writes general.base_model.{i}.repo_url for HF sources; cards copied
    # by re-uploaders (QuantFactory) can be wrong, so the file's own key wins (docs/models.md).
    url = header.metadata.get("general.base_model.0.repo_url")
    if isinstance(url, str):
        for prefix in ("https://huggingface.co/", "http://huggingface.co/"):
            if url.startswith(prefix):
                rest = url[len(prefix) :].strip("/")
                if rest.count("/") == 1:
                    return rest
    return None


def analyse_quant(
    repo_id: str,
    revision: str | None,
    path: str,
    size_bytes: int,
    shards: Sequence[AnalysedShard],
    repo_files: Sequence[str],
) -> QuantAnalysis:
    """Profile and memory coefficients of one quant (``path``: its key in the repo).

    ``shards`` are its header-carrying files in order; ``repo_files`` the repo's GGUF paths
    (an MTP sidecar among them changes the MTP verdict).
    """
    headers = [s.header for s in shards]
    header = headers[0] if len(headers) == 1 else merge_headers(headers)
    profile = build_profile(header, file_name=path, repo_id=repo_id, repo_files=tuple(repo_files))
    # The catalog stores what the file is, not how this pass fetched it (bytes_fetched and
    # requests stay None): the same content gives the same row whichever pass read it.
    profile_json = profile.to_json(
        source=f"{repo_id}/{path}",
        revision=revision,
        size_bytes=size_bytes,
        header_bytes=sum(s.header_bytes for s in shards),
    )
    try:
        coeff = coefficients(header)
        ok = coeff.status == "ok"
        memory = MemoryRecord(
            status=coeff.status,
            reason=coeff.reason,
            # With status "unknown" the byte fields are meaningless zeros: store NULLs.
            weights_bytes=coeff.weights_bytes if ok else None,
            mtp_weights_bytes=coeff.mtp_weights_bytes if ok else None,
            expert_bytes=coeff.expert_bytes if ok else None,
            host_bytes=coeff.host_bytes if ok else None,
            kv_bytes_per_token_f16=coeff.kv_bytes_per_token_f16 if ok else None,
            fixed_bytes_f16=coeff.fixed_bytes_f16 if ok else None,
            coefficients=coeff.to_json(),
        )
    except QuantsError as exc:
        memory = MemoryRecord(status="unknown", reason=str(exc))
    file_type = headers[0].metadata.get("general.file_type")
    return QuantAnalysis(
        profile=stored_profile(profile_json),
        memory=memory,
        shards=tuple(shards),
        base_model=_gguf_base_model(headers[0]),
        file_type=file_type if isinstance(file_type, int) else None,
    )
