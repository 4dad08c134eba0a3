"""GGUF header streaming parser (pure: no I/O; bytes come through a read_at seam).

Decodes and checks the metadata and tensor infos of GGUF v2/v3, never a byte of tensor data.
Details: docs/internals/gguf.md#parse
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from crawler.base.errors import (
    BigEndianGGUF,
    GGUFError,
    HeaderTooLarge,
    NotGGUF,
    UnsupportedGGUFVersion,
)
from crawler.gguf.fetch import (
    DEFAULT_FIRST_READ,
    DEFAULT_MAX_HEADER_BYTES,
    ESTIMATE_MARGIN,
    FetchBuffer,
    ReadAt,
    first_read_for,
)
from crawler.gguf.ggml import tensor_nbytes
from crawler.gguf.model import SCALAR_STRUCTS, GGUFArray, GGUFHeader, TensorInfo, ValueType

__all__ = [
    "DEFAULT_FIRST_READ",
    "DEFAULT_MAX_HEADER_BYTES",
    "ESTIMATE_MARGIN",
    "GGUFArray",
    "GGUFHeader",
    "ReadAt",
    "Splice",
    "TensorInfo",
    "ValueType",
    "parse_header_bytes",
    "read_header",
]

GGUF_MAGIC = b"GGUF"
#: Default alignment of the data section (``GGUF_DEFAULT_ALIGNMENT`` in gguf.h).
DEFAULT_ALIGNMENT = 32
#: GGML_MAX_DIMS in ggml.h.
MAX_DIMS = 4
#: Keys and tensor names longer than this are corrupt (ggml caps names at 64 bytes).
MAX_NAME_BYTES = 64 * 1024
#: Array nesting deeper than this is hostile (real files nest at most once).
MAX_ARRAY_DEPTH = 8
#: Arrays up to this many items are decoded eagerly; longer ones lazily (GGUFArray).
EAGER_ARRAY_ITEMS = 1024


_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_INT64_MAX = (1 << 63) - 1
# Smallest encodings, used to reject counts that cannot fit in the bytes allowed:
# a KV pair is key length (8) + type (4) + at least 1 value byte; a tensor info is name length (8)
# + n_dims (4) + one dim (8) + type (4) + offset (8).
_MIN_KV_BYTES = 13
_MIN_TENSOR_INFO_BYTES = 32


# --------------------------------------------------------------------------- the parser


#: Key/value pairs known in advance (a sibling's tokenizer, crawler.gguf.sibling): at byte
#: ``start`` the parser takes ``length`` bytes without decoding them and records ``pairs``
#: (key -> (value, value type, span relative to ``start``)).
Splice = tuple[int, int, Mapping[str, tuple[Any, int, tuple[int, int]]]]


class _Parser(FetchBuffer):
    """One pass over a header: decodes what FetchBuffer has fetched."""

    #: Accept a file that ends before its tensors' data (see read_header).
    partial_data = False
    splice: Splice | None = None

    def u32(self) -> int:
        return int(_U32.unpack_from(self.buf, self.take(4))[0])

    def u64(self) -> int:
        return int(_U64.unpack_from(self.buf, self.take(8))[0])

    def string(self, what: str, max_len: int | None = None) -> str:
        n = self.u64()
        if max_len is not None and n > max_len:
            raise self.corrupt(f"{what} is {n} bytes long (limit {max_len})")
        start = self.take(n)
        return bytes(self.buf[start : start + n]).decode("utf-8", "replace")

    # ------------------------------------------------------------------ values

    def value(self, vtype: int, key: str, depth: int = 0) -> Any:
        struct_ = SCALAR_STRUCTS.get(vtype)
        if struct_ is not None:
            return struct_.unpack_from(self.buf, self.take(struct_.size))[0]
        if vtype == ValueType.STRING:
            return self.string(f"value of {key}")
        if vtype == ValueType.ARRAY:
            return self.array(key, depth)
        raise self.corrupt(f"key {key!r} has unknown value type {vtype}")

    def array(self, key: str, depth: int) -> Any:
        if depth >= MAX_ARRAY_DEPTH:
            raise self.corrupt(f"array {key!r} nests deeper than {MAX_ARRAY_DEPTH}")
        item_type = self.u32()
        count = self.u64()
        struct_ = SCALAR_STRUCTS.get(item_type)
        min_item = struct_.size if struct_ is not None else 8 if item_type == 8 else 12
        if item_type not in SCALAR_STRUCTS and item_type not in (ValueType.STRING, ValueType.ARRAY):
            raise self.corrupt(f"array {key!r} has unknown item type {item_type}")
        if count * min_item > self.cap - self.pos:
            if self.pos + count * min_item > self.limit and self.limit < self.cap:
                raise self.corrupt(f"array {key!r} declares {count} items, more than the file")
            raise HeaderTooLarge(
                f"array {key!r} declares {count} items, more than the header cap allows",
                source=self.source,
            )
        if struct_ is not None:
            start = self.take(count * struct_.size)
            data = bytes(self.buf[start : self.pos])
            if count > EAGER_ARRAY_ITEMS:
                return GGUFArray(item_type, count, data)
            return list(struct.unpack(f"<{count}{struct_.format[1:]}", data)) if count else []
        if item_type == ValueType.STRING:
            start = self.pos
            self.skip_strings(count, key)
            if count > EAGER_ARRAY_ITEMS:
                return GGUFArray(item_type, count, bytes(self.buf[start : self.pos]))
            return GGUFArray(item_type, count, bytes(self.buf[start : self.pos])).to_list()
        return [self.array(key, depth + 1) for _ in range(count)]

    def parse(self) -> GGUFHeader:
        self.fill(4)
        if bytes(self.buf[:4]) != GGUF_MAGIC:
            raise NotGGUF(
                f"not a GGUF file (magic {bytes(self.buf[:4])!r}, expected b'GGUF')",
                source=self.source,
            )
        self.pos = 4
        version = self.u32()
        if version not in (2, 3):
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            if swapped in (2, 3):
                raise BigEndianGGUF(
                    f"the file is a big-endian GGUF (version {swapped} with its bytes swapped);"
                    " only little-endian files are supported",
                    source=self.source,
                )
            raise UnsupportedGGUFVersion(
                f"GGUF version {version} is not supported (only 2 and 3)", source=self.source
            )
        n_tensors = self.u64()
        n_kv = self.u64()
        room = self.limit - self.pos
        if n_tensors * _MIN_TENSOR_INFO_BYTES > room or n_kv * _MIN_KV_BYTES > room:
            what = f"{n_tensors} tensors and {n_kv} metadata keys"
            if self.limit < self.cap:
                raise self.corrupt(f"declares {what}, more than the file can hold")
            raise HeaderTooLarge(f"declares {what}, more than the header cap", source=self.source)
        self.n_tensors, self.kv_left = n_tensors, n_kv

        metadata: dict[str, Any] = {}
        types: dict[str, int] = {}
        spans: dict[str, tuple[int, int]] = {}
        kv_done = 0
        while kv_done < n_kv:
            kv_done += 1
            if self.splice is not None and self.pos == self.splice[0]:
                kv_done += self.take_splice(metadata, types, spans) - 1
                continue
            kv_start = self.pos
            key = self.string("metadata key", MAX_NAME_BYTES)
            if key in metadata:
                raise self.corrupt(f"duplicate metadata key {key!r}")
            vtype = self.u32()
            # Seen before its value is read: an array being read is estimated from its own
            # progress (in_array), not predicted a second time.
            self.seen.add(key)
            value = self.value(vtype, key)
            metadata[key] = value
            types[key] = vtype
            spans[key] = (kv_start, self.pos)
            self.kv_left -= 1
            if key == "tokenizer.ggml.model" and isinstance(value, str):
                self.tokenizer_model = value

        alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if (
            not isinstance(alignment, int)
            or isinstance(alignment, bool)
            or alignment <= 0
            or alignment & (alignment - 1)
        ):
            raise self.corrupt(f"general.alignment {alignment!r} is not a power of two")

        tensors: list[TensorInfo] = []
        names: set[str] = set()
        self.tensor_info_start = self.pos
        for i in range(n_tensors):
            self.tensors_done = i
            tensors.append(self.tensor_info(names))
        info_end = self.pos
        data_offset = -(-info_end // alignment) * alignment
        data_end, truncated = self.check_offsets(tensors, alignment, data_offset)
        tensors = _with_spans(
            tensors, alignment, data_offset, None if truncated else self.file_size
        )
        return GGUFHeader(
            version=version,
            metadata=metadata,
            tensors=tuple(tensors),
            alignment=alignment,
            data_offset=data_offset,
            metadata_types=types,
            tensor_info_end=info_end,
            file_size=self.file_size,
            data_end=data_end,
            data_truncated=truncated,
            kv_spans=spans,
        )

    def take_splice(
        self, metadata: dict[str, Any], types: dict[str, int], spans: dict[str, tuple[int, int]]
    ) -> int:
        """Take the spliced pairs without decoding their bytes; return how many there were."""
        assert self.splice is not None
        at, length, pairs = self.splice
        if self.kv_left < len(pairs):
            raise self.corrupt("the spliced pairs outnumber the keys left")
        self.take(length)
        for key, (value, vtype, (lo, hi)) in pairs.items():
            if key in metadata:
                raise self.corrupt(f"duplicate metadata key {key!r}")
            metadata[key], types[key], spans[key] = value, vtype, (at + lo, at + hi)
            self.seen.add(key)
        self.kv_left -= len(pairs)
        self.splice = None
        return len(pairs)

    def tensor_info(self, names: set[str]) -> TensorInfo:
        name = self.string("tensor name", MAX_NAME_BYTES)
        if name in names:
            raise self.corrupt(f"duplicate tensor name {name!r}")
        names.add(name)
        n_dims = self.u32()
        if not 1 <= n_dims <= MAX_DIMS:
            raise self.corrupt(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS})")
        start = self.take(8 * n_dims)
        shape = struct.unpack_from(f"<{n_dims}Q", self.buf, start)
        n = 1
        for d in shape:
            n *= d
        if n > _INT64_MAX:
            raise self.corrupt(f"tensor {name!r} shape {shape} overflows int64")
        type_id = self.u32()
        offset = self.u64()
        if offset > _INT64_MAX:  # no file is that large; the catalog stores offsets as int64
            raise self.corrupt(f"tensor {name!r} offset {offset} overflows int64")
        return TensorInfo(name, tuple(shape), type_id, offset)

    def check_offsets(
        self, tensors: list[TensorInfo], alignment: int, data_offset: int
    ) -> tuple[int, bool]:
        """(end of the data by the offsets, whether the file is cut before it); a tensor past the
        end is corrupt unless ``partial_data`` (then the file is reported as truncated)."""
        data_end = 0
        for t in tensors:
            if t.offset % alignment:
                raise self.corrupt(f"tensor {t.name!r} offset {t.offset} is not aligned")
            end = data_offset + t.offset + (t.n_bytes or 0)
            data_end = max(data_end, end)
            if self.file_size is not None and end > self.file_size and not self.partial_data:
                raise self.corrupt(
                    f"tensor {t.name!r} ends at byte {end}, past the end of the file "
                    f"({self.file_size} bytes)"
                )
        truncated = self.file_size is not None and data_end > self.file_size
        return data_end, truncated


def _with_spans(
    tensors: list[TensorInfo], alignment: int, data_offset: int, file_size: int | None
) -> list[TensorInfo]:
    """Give tensors of unknown types (a fork's type id) their bytes from the offsets.

    A tensor's data runs to the next tensor's offset (or the end of the file for the last one),
    padded to ``alignment`` (ggml/src/gguf.cpp writes each tensor at the running sum of
    ``GGML_PAD(nbytes, alignment)``). Every row of a tensor has the same bytes, so its size is a
    multiple of its row count; with at least ``alignment`` rows exactly one such multiple lies in
    ``(span - alignment, span]``, which removes the padding. With fewer rows the span (at most
    ``alignment - 1`` bytes over) stands.
    """
    if all(tensor_nbytes(t.shape, t.type_id) is not None for t in tensors):
        return tensors
    order = sorted(range(len(tensors)), key=lambda i: tensors[i].offset)
    out = list(tensors)
    for k, i in enumerate(order):
        t = tensors[i]
        if tensor_nbytes(t.shape, t.type_id) is not None:
            continue
        if k + 1 < len(order):
            span: int | None = tensors[order[k + 1]].offset - t.offset
        else:
            span = None if file_size is None else file_size - data_offset - t.offset
        if span is None or span < 0:
            continue
        rows = t.n_elements // t.shape[0] if t.shape and t.shape[0] else 0
        if rows >= alignment:
            exact = span // rows * rows
            if exact > span - alignment:
                span = exact
        out[i] = TensorInfo(t.name, t.shape, t.type_id, t.offset, span_bytes=span)
    return out


def read_header(
    read_at: ReadAt,
    *,
    file_size: int | None = None,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
    size_hint: int | None = None,
    first_read: int | None = None,
    source: str | None = None,
    partial_data: bool = False,
    splice: Splice | None = None,
) -> GGUFHeader:
    """Parse the GGUF header behind ``read_at``, fetching only (about) the header's bytes.

    Args:
        read_at: ``(offset, length) -> bytes``; called with increasing offsets, each call
            continuing where the previous ended.
        file_size: the file's size when known; bounds every length and offset.
        max_header_bytes: hard cap; a header needing more raises HeaderTooLarge.
        size_hint: expected header size (e.g. a sibling quant's ``header_bytes``): the first
            read is the hint plus a small margin, usually the only request.
        first_read: first read size without a hint (default DEFAULT_FIRST_READ).
        source: names the file in errors.
        partial_data: accept a file that ends before its tensors' data (the header is whole):
            the header says ``data_truncated`` instead of raising CorruptHeader.
        splice: pairs known in advance, taken without decoding (see Splice).

    Raises:
        NotGGUF, UnsupportedGGUFVersion, CorruptHeader, HeaderTooLarge.
    """
    first_read = first_read_for(size_hint, first_read)
    parser = _Parser(
        read_at,
        file_size=file_size,
        max_header_bytes=max_header_bytes,
        first_read=first_read,
        source=source,
    )
    parser.partial_data = partial_data
    parser.splice = splice
    try:
        return parser.parse()
    except GGUFError:
        raise
    except (struct.error, OverflowError, MemoryError) as exc:  # pragma: no cover - defensive
        raise parser.corrupt(f"{type(exc).__name__}: {exc}") from None


def parse_header_bytes(data: bytes, *, source: str | None = None) -> GGUFHeader:
    """Parse a header from bytes already in memory (a fixture, a cached prefix).

    ``data`` may be the whole file or just its header; the file size is not known, so tensor
    offsets are not checked against it.
    """

    def read_at(offset: int, length: int) -> bytes:
        return data[offset : offset + length]

    return read_header(read_at, first_read=len(data) or 1, source=source)
