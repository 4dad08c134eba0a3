"""The precision profile's model (pure: no I/O): tensor roles and groups, tensor rows, group and
layer statistics, the MTP verdict and the profile itself.
Details: docs/internals/profile.md#precision
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from crawler.gguf.ggml import type_info, type_name

__all__ = [
    "DYNAMIC_GAP_BPW",
    "GROUPS",
    "PRESERVED_BITS",
    "GroupTotals",
    "LayerStats",
    "MTPVerdict",
    "PrecisionProfile",
    "TensorRow",
    "tensor_group",
    "tensor_layer",
    "tensor_role",
]

#: Coarse groups in display order (docs/inspect.md).
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
MAX_BLOCKS = 4096
BLK = re.compile(r"^blk\.(\d+)\.")
RECURRENT_PREFIXES = ("ssm_", "time_mix", "channel_mix", "shortconv")
ATTN_PREFIXES = ("attn_", "wkv_")


def tensor_role(name: str) -> str:
    """Fine role: the name without ``blk.N.`` and ``.weight`` (``ffn_down_exps``,
    ``nextn.eh_proj``)."""
    role = BLK.sub("", name)
    return role.removesuffix(".weight")


def tensor_layer(name: str) -> int | None:
    """Block index of ``blk.N.*`` tensors, else None."""
    m = BLK.match(name)
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
    if role.startswith(RECURRENT_PREFIXES):
        return "linear_attn"
    if role.startswith(ATTN_PREFIXES):
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
class GroupTotals:
    """Totals of one group (or one layer): counts, bytes, bits, type histogram."""

    n_tensors: int
    n_params: int
    n_bytes: int
    bpw: float | None
    min_bits: int | None
    max_bits: int | None
    types: Mapping[str, int]

    @classmethod
    def of(cls, rows: Iterable[TensorRow]) -> GroupTotals:
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
    stats: GroupTotals


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
    groups: Mapping[str, GroupTotals]
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
        """The JSON object of ``quants inspect --json`` (docs/inspect.md), key for key.

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
