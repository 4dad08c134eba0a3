"""Precision profile of a GGUF: tensor roles and groups, bits, verdicts, claims (pure: no I/O).

Roles and groups follow shared/DESIGN.md section 3. Layer kinds (full attention, recurrent,
MTP) come from metadata: ``{arch}.nextn_predict_layers`` (the last N of ``block_count`` blocks
are MTP blocks, llama.cpp ``src/models/qwen35.cpp`` / ``glm4-moe.cpp``),
``{arch}.full_attention_interval`` (layer *il* is full attention when ``(il + 1) % interval ==
0``, llama-hparams / qwen35) and per-layer ``{arch}.attention.head_count_kv`` arrays (0 = no KV,
a recurrent layer: lfm2, nemotron_h, granitehybrid). Never from the model's name.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crawler.errors import CorruptHeader
from crawler.ggml import GGML_TYPES, type_info, type_name
from crawler.gguf import GGUFHeader, TensorInfo
from crawler.labels import NameClaims, is_mtp_sidecar_name, name_claims
from crawler.type_claims import TypedBytes, type_claims

__all__ = [
    "GROUPS",
    "PRESERVED_BITS",
    "GroupStats",
    "LayerStats",
    "MTPVerdict",
    "PrecisionProfile",
    "TensorRow",
    "build_profile",
    "merge_headers",
    "tensor_group",
    "tensor_role",
]

#: Coarse groups in display order (DESIGN.md section 3).
GROUPS = (
    "token_embd",
    "output",
    "attn",
    "linear_attn",
    "ffn",
    "ffn_exps",
    "ffn_shexp",
    "router",
    "mtp",
    "norm",
    "other",
)
#: "Preserved" means every weight matrix of the group has at least this many nominal bits.
PRESERVED_BITS = 6
#: A file is "dynamic" when its bulk FFN is at least this many bits per weight below attention,
#: embeddings and output (Q4_K_M's attn_v/ffn_down bumps stay below it; UD's 6-8 bit attention
#: over 3-4 bit experts is well above).
DYNAMIC_GAP_BPW = 0.75

# More blocks than any model has (DeepSeek-V3: 61, GLM-4.5: 93): beyond it, metadata is noise.
_MAX_BLOCKS = 4096
_BLK = re.compile(r"^blk\.(\d+)\.")
_RECURRENT_PREFIXES = ("ssm_", "time_mix", "channel_mix", "shortconv")
_ATTN_PREFIXES = ("attn_", "wkv_")


def tensor_role(name: str) -> str:
    """Fine role: the name without ``blk.N.`` and ``.weight`` (``ffn_down_exps``,
    ``nextn.eh_proj``)."""
    role = _BLK.sub("", name)
    return role.removesuffix(".weight")


def tensor_layer(name: str) -> int | None:
    """Block index of ``blk.N.*`` tensors, else None."""
    m = _BLK.match(name)
    return int(m.group(1)) if m else None


def tensor_group(role: str, n_dims: int, *, layer_kind: str) -> str:
    """Coarse group of a tensor from its role, dimensions and its layer's kind.

    ``layer_kind`` is ``mtp``, ``recurrent``, ``attention`` or ``global`` (not in a block).
    """
    if layer_kind == "mtp":
        return "mtp"
    if role == "token_embd":
        return "token_embd"
    if role == "output":
        return "output"
    if role.startswith(("ffn_gate_inp", "exp_probs_b")):
        return "router"
    if n_dims < 2:
        return "norm"
    if "_exps" in role:
        return "ffn_exps"
    if "_shexp" in role:
        return "ffn_shexp"
    if role.startswith("ffn_"):
        return "ffn"
    if role.startswith(_RECURRENT_PREFIXES):
        return "linear_attn"
    if role.startswith(_ATTN_PREFIXES):
        return "linear_attn" if layer_kind == "recurrent" else "attn"
    return "other"


@dataclass(frozen=True, slots=True)
class TensorRow:
    """One tensor with its role, group and precision."""

    name: str
    role: str
    group: str
    layer: int | None
    shape: tuple[int, ...]
    type_id: int
    offset: int
    n_params: int
    n_bytes: int | None

    @property
    def type_name(self) -> str:
        """``Q6_K`` or ``TYPE_252``."""
        return type_name(self.type_id)

    @property
    def bits(self) -> int | None:
        """Nominal bits of the type, None if unknown."""
        info = type_info(self.type_id)
        return info.bits if info is not None else None

    @property
    def is_matrix(self) -> bool:
        """A weight matrix (2-D or more): what the verdicts look at."""
        return len(self.shape) >= 2

    def to_json(self) -> dict[str, Any]:
        """The ``tensors[]`` item of ``quants inspect --json --tensors``."""
        info = type_info(self.type_id)
        return {
            "name": self.name,
            "role": self.role,
            "group": self.group,
            "layer": self.layer,
            "shape": list(self.shape),
            "type": self.type_name,
            "type_id": self.type_id,
            "bits": self.bits,
            "bpw": info.bpw if info is not None else None,
            "n_params": self.n_params,
            "n_bytes": self.n_bytes,
            "offset": self.offset,
        }


@dataclass(frozen=True, slots=True)
class GroupStats:
    """Totals of one group (or one layer): counts, bytes, bits, type histogram."""

    n_tensors: int
    n_params: int
    n_bytes: int
    bpw: float | None
    min_bits: int | None
    max_bits: int | None
    types: Mapping[str, int]

    @classmethod
    def of(cls, rows: Iterable[TensorRow]) -> GroupStats:
        """Aggregate ``rows``; bytes and bpw count known types only."""
        rows = list(rows)
        known = [r for r in rows if r.n_bytes is not None]
        n_bytes = sum(r.n_bytes or 0 for r in known)
        known_params = sum(r.n_params for r in known)
        bits = [b for r in rows if (b := r.bits) is not None]
        types = Counter(r.type_name for r in rows)
        return cls(
            n_tensors=len(rows),
            n_params=sum(r.n_params for r in rows),
            n_bytes=n_bytes,
            bpw=round(8 * n_bytes / known_params, 4) if known_params else None,
            min_bits=min(bits) if bits else None,
            max_bits=max(bits) if bits else None,
            types=dict(sorted(types.items(), key=lambda kv: (-kv[1], kv[0]))),
        )

    def to_json(self) -> dict[str, Any]:
        """``groups{<group>: {...}}`` item."""
        return {
            "n_tensors": self.n_tensors,
            "n_params": self.n_params,
            "n_bytes": self.n_bytes,
            "bpw": self.bpw,
            "min_bits": self.min_bits,
            "max_bits": self.max_bits,
            "types": dict(self.types),
        }


@dataclass(frozen=True, slots=True)
class LayerStats:
    """One block: its kind and precision histogram."""

    index: int
    kind: str
    stats: GroupStats


@dataclass(frozen=True, slots=True)
class MTPVerdict:
    """Where the MTP head is and how precise it is.

    ``state``: ``present`` (tensors in this file), ``absent`` (none declared, none here),
    ``declared_missing`` (metadata declares MTP layers, the tensors are missing), ``sidecar``
    (not in this file, but the repo ships an MTP-only GGUF).
    """

    present: bool
    state: str
    layers: tuple[int, ...]
    min_bits: int | None
    preserved: bool

    def to_json(self) -> dict[str, Any]:
        """``mtp{...}``."""
        return {
            "present": self.present,
            "state": self.state,
            "layers": list(self.layers),
            "min_bits": self.min_bits,
            "preserved": self.preserved,
        }


@dataclass(frozen=True, slots=True)
class PrecisionProfile:
    """Everything ``quants inspect`` reports about one file (or one merged split quant)."""

    file_name: str
    architecture: str | None
    quant_label: str | None
    file_type: str | None
    n_tensors: int
    n_params: int
    n_bytes: int
    bpw: float | None
    loadable_by_mainline: bool
    unknown_types: tuple[int, ...]
    groups: Mapping[str, GroupStats]
    layers: tuple[LayerStats, ...]
    mtp: MTPVerdict
    attention_min_bits: int | None
    attention_preserved: bool | None
    dynamic: bool
    claims: tuple[str, ...]
    tensors: tuple[TensorRow, ...] = field(repr=False, default=())
    preserved_bits: int = PRESERVED_BITS
    #: The file ends before its tensors' data (the header is whole): a partial download or the
    #: first piece of a byte-split file.
    data_truncated: bool = False
    #: Tensors of unknown types whose bytes come from the offsets (bits stay unknown).
    sized_from_offsets: int = 0

    @property
    def vocab_only(self) -> bool:
        """No tensors: a tokenizer/vocabulary file (llama.cpp's ``ggml-vocab-*.gguf``)."""
        return self.n_tensors == 0

    def to_json(
        self,
        *,
        source: str | None = None,
        revision: str | None = None,
        size_bytes: int | None = None,
        header_bytes: int | None = None,
        bytes_fetched: int | None = None,
        requests: int | None = None,
        include_tensors: bool = False,
    ) -> dict[str, Any]:
        """The JSON object of ``quants inspect --json`` (DESIGN.md section 3), key for key.

        The fetch facts (``source`` .. ``requests``) belong to the caller that read the bytes.
        """
        out: dict[str, Any] = {
            "source": source,
            "revision": revision,
            "architecture": self.architecture,
            "quant_label": self.quant_label,
            "file_type": self.file_type,
            "size_bytes": size_bytes,
            "header_bytes": header_bytes,
            "bytes_fetched": bytes_fetched,
            "requests": requests,
            "n_tensors": self.n_tensors,
            "n_params": self.n_params,
            "bpw": self.bpw,
            "loadable_by_mainline": self.loadable_by_mainline,
            "groups": {name: g.to_json() for name, g in self.groups.items()},
            "mtp": self.mtp.to_json(),
            "attention": {
                "min_bits": self.attention_min_bits,
                "preserved": self.attention_preserved,
            },
            "dynamic": self.dynamic,
            "claims": list(self.claims),
        }
        if include_tensors:
            out["tensors"] = [t.to_json() for t in self.tensors]
        return out


# --------------------------------------------------------------------------- layer kinds


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
        elif not any(r.startswith(_ATTN_PREFIXES) for r in roles) and any(
            r.startswith(_RECURRENT_PREFIXES) for r in roles
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
    """Profile ``header`` (one file, or several shards merged by :func:`merge_headers`).

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
        g: GroupStats.of(r for r in rows if r.group == g)
        for g in GROUPS
        if any(r.group == g for r in rows)
    }
    layers = tuple(
        LayerStats(il, kinds[il], GroupStats.of(r for r in rows if r.layer == il))
        for il in sorted(names_by_layer)
    )
    total = GroupStats.of(rows)
    unknown = tuple(sorted({r.type_id for r in rows if r.type_id not in GGML_TYPES}))
    # A file without tensors is a vocabulary, not a model llama.cpp "loads".
    loadable = bool(rows) and not unknown and all(GGML_TYPES[r.type_id].mainline for r in rows)

    attn = [r for r in rows if r.group == "attn" and r.is_matrix]
    attn_min, attn_ok = _verdict(attn, preserved_bits)
    mtp = _mtp_verdict(header, rows, kinds, file_name, repo_files, preserved_bits)
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
    return _with_claims(profile, claims, header)


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
    sane = 0 < declared <= block_count <= _MAX_BLOCKS
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


def _is_dynamic(groups: Mapping[str, GroupStats]) -> bool:
    bulk = groups.get("ffn_exps") or groups.get("ffn")
    if bulk is None or bulk.bpw is None:
        return False
    others = [groups[g].bpw for g in ("attn", "token_embd", "output") if g in groups]
    known = [b for b in others if b is not None]
    return bool(known) and all(bulk.bpw + DYNAMIC_GAP_BPW <= b for b in known)


# --------------------------------------------------------------------------- claims


def _with_claims(
    profile: PrecisionProfile, claims: NameClaims, header: GGUFHeader
) -> PrecisionProfile:
    from dataclasses import replace

    found: list[str] = []
    mtp = profile.mtp
    if claims.mtp and mtp.state == "absent":
        found.append("named MTP but carries no nextn tensors")
    elif claims.mtp and mtp.state == "declared_missing":
        found.append(
            f"named MTP and declares {len(mtp.layers)} MTP layer(s), but carries no nextn tensors"
        )
    elif claims.mtp and mtp.state == "sidecar":
        found.append("named MTP but the MTP head is in a separate sidecar file, not this one")
    if claims.q8nextn and mtp.present and (mtp.min_bits is None or mtp.min_bits < 8):
        found.append(f"named Q8nextn but the MTP block's lowest type is {_bits(mtp.min_bits)}")
    if claims.dynamic and profile.attention_preserved is False:
        found.append(
            f"named UD/Dynamic but attention is {_bits(profile.attention_min_bits)}"
            f" (below {profile.preserved_bits}-bit)"
        )
    if claims.dynamic and mtp.present and not mtp.preserved:
        found.append(f"named UD/Dynamic but the MTP block is {_bits(mtp.min_bits)}")
    found += type_claims(
        claims.label,
        profile.file_type,
        (TypedBytes(r.group, r.type_name, r.n_bytes, r.is_matrix) for r in profile.tensors),
    )
    if header.data_truncated:
        have = "?" if header.file_size is None else f"{header.file_size:,}"
        found.append(
            f"the file is truncated: it has {have} bytes, its tensors' data needs"
            f" {header.data_end:,}; the header is complete (a partial download or the first"
            " piece of a split file)"
        )
    if claims.imatrix and not any(k.startswith("quantize.imatrix") for k in header.metadata):
        found.append("named i1/imatrix but the file records no quantize.imatrix.* keys")
    if not profile.loadable_by_mainline and profile.n_tensors:
        ids = ", ".join(str(i) for i in profile.unknown_types) or "ik_llama.cpp-only"
        found.append(f"uses ggml types mainline llama.cpp cannot load ({ids})")
    return replace(profile, claims=tuple(found))


def _bits(bits: int | None) -> str:
    return f"{bits}-bit" if bits is not None else "of unknown precision"


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
