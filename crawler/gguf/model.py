"""The GGUF header's data model (pure): value types, tensor infos, lazy arrays and the header.

What the parser returns and profile, fit, scan and catalog read (ggml-org/ggml docs/gguf.md).
Details: docs/internals/gguf.md#model
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from crawler.gguf.ggml import tensor_nbytes

__all__ = ["SCALAR_STRUCTS", "GGUFArray", "GGUFHeader", "TensorInfo", "ValueType"]

_U64_STRUCT = struct.Struct("<Q")  # a string array item's length prefix


class ValueType:
    """GGUF metadata value type ids (``enum gguf_type`` in gguf.h)."""

    UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL = range(8)
    STRING, ARRAY, UINT64, INT64, FLOAT64 = range(8, 13)


# value type -> struct of one item (little-endian).
SCALAR_STRUCTS: dict[int, struct.Struct] = {
    ValueType.UINT8: struct.Struct("<B"),
    ValueType.INT8: struct.Struct("<b"),
    ValueType.UINT16: struct.Struct("<H"),
    ValueType.INT16: struct.Struct("<h"),
    ValueType.UINT32: struct.Struct("<I"),
    ValueType.INT32: struct.Struct("<i"),
    ValueType.FLOAT32: struct.Struct("<f"),
    ValueType.BOOL: struct.Struct("<?"),
    ValueType.UINT64: struct.Struct("<Q"),
    ValueType.INT64: struct.Struct("<q"),
    ValueType.FLOAT64: struct.Struct("<d"),
}


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor-info record: ``shape`` in ggml order (ne0 first), ``offset`` into the data
    section."""

    name: str
    shape: tuple[int, ...]
    type_id: int
    offset: int
    #: Bytes the offsets leave for this tensor (next tensor's offset, or the end of the file for
    #: the last one, less the alignment padding; see ``_with_spans``); None where the file's end is
    #: unknown or cut. Used only for types this version does not know.
    span_bytes: int | None = field(default=None, compare=False)

    @property
    def n_elements(self) -> int:
        """Number of weights (product of the shape)."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def n_bytes(self) -> int | None:
        """Bytes of the tensor's data: from its ggml type, else (a fork's type id) from the
        offsets; None when neither is known."""
        n = tensor_nbytes(self.shape, self.type_id)
        return n if n is not None else self.span_bytes

    @property
    def size_from_type(self) -> bool:
        """True when ``n_bytes`` comes from a known ggml type (exact), False when from offsets."""
        return tensor_nbytes(self.shape, self.type_id) is not None


class GGUFArray(Sequence[Any]):
    """A long metadata array (tokens, merges, scores), decoded only when an item is asked for.

    Keeps the array's raw bytes; ``len()`` is free, so ``len(metadata["tokenizer.ggml.tokens"])``
    costs nothing. Equal to a list or tuple with the same items.
    """

    __slots__ = ("_count", "_data", "_items", "item_type")

    def __init__(self, item_type: int, count: int, data: bytes) -> None:
        self.item_type = item_type
        self._count = count
        self._data = data
        self._items: list[Any] | None = None

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        return self.to_list()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.to_list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GGUFArray | list | tuple):
            return len(self) == len(other) and self.to_list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"GGUFArray(type={self.item_type}, len={self._count})"

    @property
    def nbytes(self) -> int:
        """Encoded size of the items in the file."""
        return len(self._data)

    @property
    def raw(self) -> bytes:
        """The items' bytes as encoded in the file."""
        return self._data

    def to_list(self) -> list[Any]:
        """Decode every item (cached)."""
        if self._items is None:
            if self.item_type == ValueType.STRING:
                items: list[Any] = []
                data, pos, unpack = self._data, 0, _U64_STRUCT.unpack_from
                for _ in range(self._count):
                    (n,) = unpack(data, pos)
                    items.append(data[pos + 8 : pos + 8 + n].decode("utf-8", "replace"))
                    pos += 8 + n
                self._items = items
            else:
                fmt = SCALAR_STRUCTS[self.item_type].format[1:]
                self._items = list(struct.unpack(f"<{self._count}{fmt}", self._data))
        return self._items


@dataclass(frozen=True, slots=True)
class GGUFHeader:
    """A parsed GGUF header: metadata KV, tensor table, alignment, and where the data begins."""

    version: int
    metadata: Mapping[str, Any]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_offset: int
    #: Value type of each metadata key (``ValueType``; arrays as ``ARRAY``).
    metadata_types: Mapping[str, int] = field(default_factory=dict)
    #: End of the tensor-info section (``data_offset`` minus the alignment padding).
    tensor_info_end: int = 0
    #: File size the header was read against (None: unknown).
    file_size: int | None = None
    #: File offset where the last tensor's data ends (known types; 0 without tensors).
    data_end: int = 0
    #: The file ends before its tensors' data does (a partial download, the first piece of a
    #: byte-split file): the header is whole, the data is not. Only with ``partial_data=True``.
    data_truncated: bool = False
    #: Where each metadata key/value pair lies in the file: ``(start, end)`` byte offsets.
    kv_spans: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    #: The file whose tokenizer bytes this header reused (a sibling or templated read), else None.
    tokenizer_from: str | None = None
    #: The fingerprint of the tokenizer template whose arrays this header holds instead of the
    #: file's own (crawler/gguf/tokenizer_template.py): they were not read. None: read from the
    #: file.
    tokenizer_template: str | None = None

    @property
    def architecture(self) -> str | None:
        """``general.architecture`` or None."""
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None

    @property
    def header_bytes(self) -> int:
        """Bytes before the data section: what any reader must fetch (== ``data_offset``), but
        never more than the file (a file without tensors may end before the alignment padding)."""
        if self.file_size is not None and self.data_offset > self.file_size >= self.tensor_info_end:
            return self.file_size
        return self.data_offset

    @property
    def n_params(self) -> int:
        """Total weights over every tensor."""
        return sum(t.n_elements for t in self.tensors)

    def arch_value(self, suffix: str, default: Any = None) -> Any:
        """``metadata[f"{architecture}.{suffix}"]`` (e.g. ``block_count``) or ``default``."""
        arch = self.architecture
        if arch is None:
            return default
        return self.metadata.get(f"{arch}.{suffix}", default)
