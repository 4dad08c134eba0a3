"""Precision profile of a GGUF, built from its header: groups, bits, verdicts (pure: no I/O).

Layer kinds (full attention, recurrent, MTP) come from metadata, never from the model's name.
Details: docs/internals/profile.md#build
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from crawler.base.errors import CorruptHeader
from crawler.gguf.ggml import GGML_TYPES
from crawler.gguf.parse import GGUFHeader, TensorInfo
from crawler.profile.claims import with_claims
from crawler.profile.labels import is_mtp_sidecar_name, name_claims
from crawler.profile.precision import (
    ATTN_PREFIXES,
    DYNAMIC_GAP_BPW,
    GROUPS,
    MAX_BLOCKS,
    PRESERVED_BITS,
    RECURRENT_PREFIXES,
    GroupTotals,
    LayerStats,
    MTPVerdict,
    PrecisionProfile,
    TensorRow,
    tensor_group,
    tensor_layer,
    tensor_role,
)

__all__ = ["build_profile", "merge_headers"]


# --------------------------------------------------------------------------- layer kinds

#: Architectures whose llama.cpp loader accepts declared MTP layers without their tensors
#: (src/models/dots3note.cpp: TENSOR_SKIP | TENSOR_NOT_REQUIRED).
MTP_BLOCK_OPTIONAL = frozenset({"dots3note"})


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _layer_kinds(header: GGUFHeader, rows_by_layer: Mapping[int, list[str]]) -> dict[int, str]:
    """Kind of every block that has tensors: ``mtp``, ``recurrent`` or ``attention``."""
    block_count = _int(header.arch_value("block_count")) or 0
    n_nextn = _int(header.arch_value("nextn_predict_layers")) or 0
    interval = _int(header.arch_value("full_attention_interval"))
    head_kv = header.arch_value("attention.head_count_kv")
    n_trunk = block_count - n_nextn if 0 < n_nextn <= block_count else block_count
    kinds: dict[int, str] = {}
    for il, roles in rows_by_layer.items():
        if (n_nextn and n_trunk <= il < block_count) or any(r.startswith("nextn.") for r in roles):
            kinds[il] = "mtp"
        elif interval and interval > 0 and (il + 1) % interval != 0:
            kinds[il] = "recurrent"
        elif isinstance(head_kv, Sequence) and not isinstance(head_kv, str) and il < len(head_kv):
            kinds[il] = "recurrent" if head_kv[il] == 0 else "attention"
        elif not any(r.startswith(ATTN_PREFIXES) for r in roles) and any(
            r.startswith(RECURRENT_PREFIXES) for r in roles
        ):
            kinds[il] = "recurrent"
        else:
            kinds[il] = "attention"
    return kinds


def _file_type_name(value: Any) -> str | None:
    ft = _int(value)
    if ft is None:
        return None
    from gguf.constants import LlamaFileType  # pure: a constants table

    try:
        return str(LlamaFileType(ft).name).removeprefix("MOSTLY_")
    except ValueError:
        return f"FTYPE_{ft}"


# --------------------------------------------------------------------------- the profile


def build_profile(
    header: GGUFHeader,
    *,
    file_name: str,
    repo_id: str | None = None,
    repo_files: Sequence[str] = (),
    preserved_bits: int = PRESERVED_BITS,
) -> PrecisionProfile:
    """Profile ``header`` (one file, or several shards merged by merge_headers).

    ``repo_files`` (paths in the same repo) lets it see an MTP sidecar; ``repo_id`` and
    ``file_name`` feed the name claims.
    """
    names_by_layer: dict[int, list[str]] = {}
    for t in header.tensors:
        il = tensor_layer(t.name)
        if il is not None:
            names_by_layer.setdefault(il, []).append(tensor_role(t.name))
    kinds = _layer_kinds(header, names_by_layer)

    rows = tuple(_row(t, kinds) for t in header.tensors)
    groups = {
        g: GroupTotals.of(r for r in rows if r.group == g)
        for g in GROUPS
        if any(r.group == g for r in rows)
    }
    layers = tuple(
        LayerStats(il, kinds[il], GroupTotals.of(r for r in rows if r.layer == il))
        for il in sorted(names_by_layer)
    )
    total = GroupTotals.of(rows)
    unknown = tuple(sorted({r.type_id for r in rows if r.type_id not in GGML_TYPES}))
    # A file without tensors is a vocabulary, not a model llama.cpp "loads"; a file cut before
    # its tensors' data is refused by llama-model-loader ("tensor ... data is not within the file
    # bounds, model is corrupted or incomplete", src/llama-model-loader.cpp).
    mainline_types = not unknown and all(GGML_TYPES[r.type_id].mainline for r in rows)
    loadable = bool(rows) and mainline_types and not header.data_truncated

    attn = [r for r in rows if r.group == "attn" and r.is_matrix]
    attn_min, attn_ok = _verdict(attn, preserved_bits)
    mtp = _mtp_verdict(header, rows, kinds, file_name, repo_files, preserved_bits)
    # llama.cpp's loaders create every declared MTP block's tensors as required (e.g.
    # src/models/qwen35.cpp load_block_mtp: TENSOR_SKIP without TENSOR_NOT_REQUIRED, so a missing
    # one fails "check_tensor_dims: tensor 'blk.N.attn_norm.weight' not found" even without MTP
    # drafting; seen with llama-server 0c1e57098). dots3note alone marks them optional.
    if mtp.state == "declared_missing" and header.architecture not in MTP_BLOCK_OPTIONAL:
        loadable = False
    dynamic = _is_dynamic(groups)
    claims = name_claims(file_name, repo_id)
    profile = PrecisionProfile(
        file_name=file_name,
        architecture=header.architecture,
        quant_label=claims.label.text if claims.label else None,
        file_type=_file_type_name(header.metadata.get("general.file_type")),
        n_tensors=len(rows),
        n_params=total.n_params,
        n_bytes=total.n_bytes,
        bpw=total.bpw,
        loadable_by_mainline=loadable,
        unknown_types=unknown,
        groups=groups,
        layers=layers,
        mtp=mtp,
        attention_min_bits=attn_min,
        attention_preserved=attn_ok,
        dynamic=dynamic,
        claims=(),
        tensors=rows,
        preserved_bits=preserved_bits,
        data_truncated=header.data_truncated,
        sized_from_offsets=sum(
            1 for t in header.tensors if not t.size_from_type and t.n_bytes is not None
        ),
    )
    return with_claims(profile, claims, header)


def _row(t: TensorInfo, kinds: Mapping[int, str]) -> TensorRow:
    il = tensor_layer(t.name)
    role = tensor_role(t.name)
    kind = kinds.get(il, "attention") if il is not None else "global"
    return TensorRow(
        name=t.name,
        role=role,
        group=tensor_group(role, len(t.shape), layer_kind=kind),
        layer=il,
        shape=t.shape,
        type_id=t.type_id,
        offset=t.offset,
        n_params=t.n_elements,
        n_bytes=t.n_bytes,
    )


def _verdict(matrices: Sequence[TensorRow], threshold: int) -> tuple[int | None, bool | None]:
    """(min bits, preserved) of a group's weight matrices; an unknown type is not preserved."""
    if not matrices:
        return None, None
    bits = [r.bits for r in matrices]
    known = [b for b in bits if b is not None]
    min_bits = min(known) if known else None
    return min_bits, len(known) == len(bits) and min(known) >= threshold


def _mtp_verdict(
    header: GGUFHeader,
    rows: Sequence[TensorRow],
    kinds: Mapping[int, str],
    file_name: str,
    repo_files: Sequence[str],
    threshold: int,
) -> MTPVerdict:
    declared = _int(header.arch_value("nextn_predict_layers")) or 0
    mtp_rows = [r for r in rows if r.group == "mtp"]
    # A block counts as an MTP head only if it carries nextn.* tensors: the trunk-style tensors
    # of the last block alone do not make a usable head.
    head_layers = sorted(
        {r.layer for r in mtp_rows if r.role.startswith("nextn.") and r.layer is not None}
    )
    if head_layers:
        min_bits, preserved = _verdict([r for r in mtp_rows if r.is_matrix], threshold)
        return MTPVerdict(True, "present", tuple(head_layers), min_bits, bool(preserved))
    block_count = _int(header.arch_value("block_count")) or 0
    # Layer indices only when the counts are sane (a hostile header could declare 2**63).
    sane = 0 < declared <= block_count <= MAX_BLOCKS
    layers = tuple(range(block_count - declared, block_count)) if sane else ()
    base = file_name.replace("\\", "/").rsplit("/", 1)[-1]
    sidecar = any(
        is_mtp_sidecar_name(p) and p.replace("\\", "/").rsplit("/", 1)[-1] != base
        for p in repo_files
    )
    if sidecar:
        return MTPVerdict(False, "sidecar", layers, None, False)
    if declared > 0:
        return MTPVerdict(False, "declared_missing", layers, None, False)
    return MTPVerdict(False, "absent", (), None, False)


def _is_dynamic(groups: Mapping[str, GroupTotals]) -> bool:
    bulk = groups.get("ffn_exps") or groups.get("ffn")
    if bulk is None or bulk.bpw is None:
        return False
    others = [groups[g].bpw for g in ("attn", "token_embd", "output") if g in groups]
    known = [b for b in others if b is not None]
    return bool(known) and all(bulk.bpw + DYNAMIC_GAP_BPW <= b for b in known)


# --------------------------------------------------------------------------- split files


def merge_headers(headers: Sequence[GGUFHeader], *, source: str | None = None) -> GGUFHeader:
    """One logical header from gguf-split shards (``-0000N-of-0000M``), in shard order.

    Metadata come from the first shard (later shards carry only ``split.*``), tensor tables are
    concatenated (offsets stay shard-relative). ``data_offset`` becomes the sum of the shards'
    header sizes: what reading every header costs. Checks ``split.count`` /
    ``split.tensors.count`` (tools/gguf-split/gguf-split.cpp) and raises CorruptHeader on a
    missing shard, a duplicate tensor or a mismatched count.
    """
    if not headers:
        raise ValueError("merge_headers needs at least one header")
    if len(headers) == 1:
        return headers[0]
    first = headers[0]
    count = _int(first.metadata.get("split.count"))
    if count is not None and count != len(headers):
        raise CorruptHeader(f"split.count is {count} but {len(headers)} shards", source=source)
    for i, h in enumerate(headers):
        no = _int(h.metadata.get("split.no"))
        if no is not None and no != i:
            raise CorruptHeader(f"shard {i + 1} says split.no = {no}", source=source)
    tensors: list[TensorInfo] = [t for h in headers for t in h.tensors]
    if len({t.name for t in tensors}) != len(tensors):
        raise CorruptHeader("a tensor appears in two shards", source=source)
    declared = _int(first.metadata.get("split.tensors.count"))
    if declared is not None and declared != len(tensors):
        raise CorruptHeader(
            f"split.tensors.count is {declared} but the shards hold {len(tensors)}",
            source=source,
        )
    return GGUFHeader(
        version=first.version,
        metadata=first.metadata,
        tensors=tuple(tensors),
        alignment=first.alignment,
        data_offset=sum(h.data_offset for h in headers),
        metadata_types=first.metadata_types,
        tensor_info_end=first.tensor_info_end,
        file_size=sum(h.file_size for h in headers if h.file_size is not None)
        if all(h.file_size is not None for h in headers)
        else None,
        data_truncated=any(h.data_truncated for h in headers),
    )
