"""The ggml tensor type table (pure: no I/O): id -> name, block size, bytes per block, bits.

Mainline and ik_llama.cpp ids; an id missing here is recorded raw and not loadable by mainline.
Details: docs/internals/gguf.md#ggml
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from math import prod
from types import MappingProxyType

__all__ = [
    "GGML_TYPES",
    "GGMLType",
    "GGMLTypeInfo",
    "is_mainline",
    "tensor_nbytes",
    "type_info",
    "type_name",
]


class GGMLType(IntEnum):
    """Every ggml type id this table knows (mainline, then ik_llama.cpp-only)."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41
    Q2_0 = 42
    # ik_llama.cpp only
    Q6_0 = 133
    IQ1_BN = 134
    IQ2_BN = 135
    IQ2_K = 137
    IQ3_K = 138
    IQ4_K = 139
    IQ5_K = 140
    IQ6_K = 141
    IQ4_KS = 144
    IQ2_KS = 145
    IQ4_KSS = 146
    IQ5_KS = 152
    IQ2_KT = 153
    IQ3_KT = 154
    IQ4_KT = 155
    IQ3_KS = 156
    IQ2_KL = 157
    IQ1_KT = 158


@dataclass(frozen=True, slots=True)
class GGMLTypeInfo:
    """What a ggml type costs: ``block_size`` weights are stored in ``type_size`` bytes."""

    type_id: int
    name: str
    block_size: int
    type_size: int
    #: Nominal bits the name promises (Q6_K -> 6); the verdicts compare this.
    bits: int
    #: False for types only forks (ik_llama.cpp) can load.
    mainline: bool = True
    #: False for the integer types (I8..I64): they hold indices, not weights.
    is_weight: bool = True

    @property
    def bpw(self) -> float:
        """Exact storage bits per weight, ``8 * type_size / block_size`` (Q6_K -> 6.5625)."""
        return 8 * self.type_size / self.block_size


# (id, block_size, type_size, bits) from ggml.c type_traits; bits from the type's name.
_MAINLINE: tuple[tuple[GGMLType, int, int, int], ...] = (
    (GGMLType.F32, 1, 4, 32),
    (GGMLType.F16, 1, 2, 16),
    (GGMLType.Q4_0, 32, 18, 4),
    (GGMLType.Q4_1, 32, 20, 4),
    (GGMLType.Q5_0, 32, 22, 5),
    (GGMLType.Q5_1, 32, 24, 5),
    (GGMLType.Q8_0, 32, 34, 8),
    (GGMLType.Q8_1, 32, 40, 8),
    (GGMLType.Q2_K, 256, 84, 2),
    (GGMLType.Q3_K, 256, 110, 3),
    (GGMLType.Q4_K, 256, 144, 4),
    (GGMLType.Q5_K, 256, 176, 5),
    (GGMLType.Q6_K, 256, 210, 6),
    (GGMLType.Q8_K, 256, 292, 8),
    (GGMLType.IQ2_XXS, 256, 66, 2),
    (GGMLType.IQ2_XS, 256, 74, 2),
    (GGMLType.IQ3_XXS, 256, 98, 3),
    (GGMLType.IQ1_S, 256, 50, 1),
    (GGMLType.IQ4_NL, 32, 18, 4),
    (GGMLType.IQ3_S, 256, 110, 3),
    (GGMLType.IQ2_S, 256, 82, 2),
    (GGMLType.IQ4_XS, 256, 136, 4),
    (GGMLType.I8, 1, 1, 8),
    (GGMLType.I16, 1, 2, 16),
    (GGMLType.I32, 1, 4, 32),
    (GGMLType.I64, 1, 8, 64),
    (GGMLType.F64, 1, 8, 64),
    (GGMLType.IQ1_M, 256, 56, 1),
    (GGMLType.BF16, 1, 2, 16),
    (GGMLType.TQ1_0, 256, 54, 1),
    (GGMLType.TQ2_0, 256, 66, 2),
    (GGMLType.MXFP4, 32, 17, 4),
    (GGMLType.NVFP4, 64, 36, 4),
    (GGMLType.Q1_0, 128, 18, 1),
    # ggml-common.h block_q2_0: one fp16 scale + 32 2-bit quants = 10 bytes per 32 weights.
    (GGMLType.Q2_0, 32, 10, 2),
)

# ik_llama.cpp-only types: GGML_QUANT_SIZES in
# github.com/ikawrakow/ik_llama.cpp gguf-py/gguf/constants.py.
_IK_ONLY: tuple[tuple[GGMLType, int, int, int], ...] = (
    (GGMLType.Q6_0, 32, 26, 6),
    (GGMLType.IQ1_BN, 64, 13, 1),
    (GGMLType.IQ2_BN, 64, 16, 2),
    (GGMLType.IQ2_K, 256, 76, 2),
    (GGMLType.IQ3_K, 256, 110, 3),
    (GGMLType.IQ4_K, 256, 144, 4),
    (GGMLType.IQ5_K, 256, 176, 5),
    (GGMLType.IQ6_K, 256, 212, 6),
    (GGMLType.IQ4_KS, 256, 136, 4),
    (GGMLType.IQ2_KS, 256, 70, 2),
    (GGMLType.IQ4_KSS, 256, 128, 4),
    (GGMLType.IQ5_KS, 256, 168, 5),
    (GGMLType.IQ2_KT, 256, 68, 2),
    (GGMLType.IQ3_KT, 256, 100, 3),
    (GGMLType.IQ4_KT, 256, 128, 4),
    (GGMLType.IQ3_KS, 256, 102, 3),
    (GGMLType.IQ2_KL, 256, 86, 2),
    (GGMLType.IQ1_KT, 256, 56, 1),
)

_INTEGER = frozenset({GGMLType.I8, GGMLType.I16, GGMLType.I32, GGMLType.I64})


def _build() -> dict[int, GGMLTypeInfo]:
    table: dict[int, GGMLTypeInfo] = {}
    for rows, mainline in ((_MAINLINE, True), (_IK_ONLY, False)):
        for t, block, size, bits in rows:
            table[int(t)] = GGMLTypeInfo(
                int(t), t.name, block, size, bits, mainline=mainline, is_weight=t not in _INTEGER
            )
    return table


#: id -> GGMLTypeInfo for every known type (read-only).
GGML_TYPES: Mapping[int, GGMLTypeInfo] = MappingProxyType(_build())


def type_info(type_id: int) -> GGMLTypeInfo | None:
    """The type's traits, or None for an id this table does not know."""
    return GGML_TYPES.get(type_id)


def type_name(type_id: int) -> str:
    """``Q6_K`` for a known id, ``TYPE_252`` for an unknown one (the raw id stays visible)."""
    info = GGML_TYPES.get(type_id)
    return info.name if info is not None else f"TYPE_{type_id}"


def is_mainline(type_id: int) -> bool:
    """Whether mainline llama.cpp can load tensors of this type."""
    info = GGML_TYPES.get(type_id)
    return info is not None and info.mainline


def tensor_nbytes(shape: Sequence[int], type_id: int) -> int | None:
    """Bytes of a tensor's data (``ggml_nbytes`` for a contiguous tensor); None if unknown type.

    ggml stores rows of ``ne0`` weights in blocks, so ``ne0`` must be a multiple of the block size
    (``ggml_row_size``); a row that is not is rounded up, as a damaged file's bytes would be.
    """
    info = GGML_TYPES.get(type_id)
    if info is None:
        return None
    if not shape:
        return info.type_size
    ne0 = shape[0]
    rows = prod(shape[1:])
    blocks_per_row = -(-ne0 // info.block_size)
    return blocks_per_row * info.type_size * rows
