"""Sibling header reads (pure: no I/O): read a quant's header without re-reading its tokenizer.

Two requests skip the tokenizer a repo's quants share; any doubt means a full read.
Details: docs/internals/gguf.md#sibling
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from crawler.base.errors import GGUFError
from crawler.gguf.fetch import ESTIMATE_SLACK, HINT_MARGIN
from crawler.gguf.parse import GGUFArray, GGUFHeader, ReadAt, ValueType, read_header

__all__ = ["TOKENIZER_ARRAYS", "SiblingTemplate", "read_sibling_header", "template_from"]

#: The large tokenizer arrays that siblings share (llama.cpp ``LLM_KV_TOKENIZER_*``).
TOKENIZER_ARRAYS = frozenset(
    {
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.scores",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.merges",
    }
)
#: Bytes at each end of the spliced span that are fetched and compared with the template.
TAIL = 4096
#: Slack past the template's prefix length: a longer ``general.name`` or a few more keys.
PREFIX_SLACK = 4096
#: Below this span size a sibling read saves too little to be worth a second code path.
MIN_SPAN_BYTES = 64 * 1024

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


@dataclass(frozen=True, slots=True)
class SiblingTemplate:
    """What a sibling read needs from a file already read in full."""

    source: str
    #: Keys and value types before the tokenizer span, in file order.
    prefix_keys: tuple[tuple[str, int], ...]
    #: Offset of the span in the template file.
    span_start: int
    #: The span's bytes (the tokenizer arrays' key/value pairs, as encoded).
    span: bytes
    #: Bytes from the span's end to the data section in the template (metadata + tensor infos).
    rest_bytes: int
    #: Encoded length of the first span key's header (key, type, item type, count).
    first_kv_head: int
    #: The span's pairs: key -> (value, value type, span relative to the span's start).
    pairs: Mapping[str, tuple[Any, int, tuple[int, int]]]


def _encode_array_kv(key: str, value: GGUFArray) -> bytes:
    name = key.encode("utf-8")
    head = _U64.pack(len(name)) + name + _U32.pack(ValueType.ARRAY)
    return head + _U32.pack(value.item_type) + _U64.pack(len(value)) + value.raw


def template_from(
    header: GGUFHeader, source: str, *, min_span: int = MIN_SPAN_BYTES
) -> SiblingTemplate | None:
    """A template from a header read in full, or None when it has no large tokenizer span."""
    spans = header.kv_spans
    keys = list(spans)  # file order
    first = next((i for i, k in enumerate(keys) if k in TOKENIZER_ARRAYS), None)
    if first is None or header.tokenizer_from is not None:
        return None
    last = first
    while last + 1 < len(keys) and keys[last + 1] in TOKENIZER_ARRAYS:
        last += 1
    parts: list[bytes] = []
    for key in keys[first : last + 1]:
        value = header.metadata.get(key)
        if not isinstance(value, GGUFArray):
            return None  # a short array, decoded eagerly: nothing worth skipping
        parts.append(_encode_array_kv(key, value))
    start, end = spans[keys[first]][0], spans[keys[last]][1]
    span = b"".join(parts)
    # The two reads compare TAIL bytes at each end of the span: it must be longer than both.
    if len(span) != end - start or len(span) < max(min_span, 2 * TAIL + PREFIX_SLACK):
        return None
    name = keys[first].encode("utf-8")
    return SiblingTemplate(
        source=source,
        prefix_keys=tuple((k, header.metadata_types[k]) for k in keys[:first]),
        span_start=start,
        span=span,
        rest_bytes=header.data_offset - end,
        first_kv_head=8 + len(name) + 4 + 4 + 8,
        pairs={
            k: (header.metadata[k], header.metadata_types[k], (a - start, b - start))
            for k in keys[first : last + 1]
            for a, b in (spans[k],)
        },
    )


def _walk_prefix(data: bytes, stop_key: str) -> tuple[list[tuple[str, int]], int] | None:
    """Keys and types before ``stop_key`` and the offset of its pair, or None if not in data."""
    try:
        pos = 4 + 4 + 8 + 8  # magic, version, n_tensors, n_kv
        keys: list[tuple[str, int]] = []
        while True:
            start = pos
            (n,) = _U64.unpack_from(data, pos)
            if pos + 8 + n > len(data):
                return None
            key = data[pos + 8 : pos + 8 + n].decode("utf-8", "replace")
            pos += 8 + n
            (vtype,) = _U32.unpack_from(data, pos)
            pos += 4
            if key == stop_key:
                return keys, start
            keys.append((key, vtype))
            pos = _skip_value(data, pos, vtype)
            if pos > len(data):
                return None
    except struct.error:
        return None


def _skip_value(data: bytes, pos: int, vtype: int, depth: int = 0) -> int:
    if vtype in _SIZES:
        return pos + _SIZES[vtype]
    if vtype == ValueType.STRING:
        (n,) = _U64.unpack_from(data, pos)
        return int(pos + 8 + n)
    if vtype == ValueType.ARRAY and depth < 4:
        (item,) = _U32.unpack_from(data, pos)
        (count,) = _U64.unpack_from(data, pos + 4)
        pos += 12
        if item in _SIZES:
            return int(pos + count * _SIZES[item])
        for _ in range(count):
            pos = _skip_value(data, pos, item, depth + 1)
            if pos > len(data):
                return pos
        return pos
    raise struct.error(f"unknown value type {vtype}")


def plan_prefix_read(template: SiblingTemplate) -> int:
    """Bytes of the first request: the template's prefix, the span's start, and slack."""
    return template.span_start + template.first_kv_head + TAIL + PREFIX_SLACK


def read_sibling_header(
    read_at: ReadAt,
    template: SiblingTemplate,
    *,
    file_size: int | None,
    max_header_bytes: int,
    source: str | None = None,
) -> GGUFHeader | None:
    """The sibling's header read around the template's tokenizer, or None (read it in full).

    ``read_at`` is called at most twice when the sibling matches (more only if its tensor infos
    outgrow the template's by more than the margin); a None costs at most those reads.
    """
    if file_size is None:
        return None
    stop_key = template.span[8 : template.first_kv_head - 16].decode("utf-8", "replace")
    prefix = read_at(0, min(plan_prefix_read(template), file_size))
    walked = _walk_prefix(prefix, stop_key)
    if walked is None:
        return None
    keys, start = walked
    if tuple(keys) != template.prefix_keys:
        return None
    seen = prefix[start:]
    if (
        len(seen) < template.first_kv_head
        or template.span[: len(seen)] != seen[: len(template.span)]
    ):
        return None
    span_end = start + len(template.span)
    tail_from = span_end - TAIL
    want = TAIL + int(template.rest_bytes * (1 + HINT_MARGIN)) + ESTIMATE_SLACK
    after = read_at(tail_from, min(want, max(0, file_size - tail_from)))
    if after[:TAIL] != template.span[-TAIL:]:
        return None
    known = prefix[:start] + template.span + after[TAIL:]
    more_from = len(known)

    def spliced(offset: int, length: int) -> bytes:
        out = known[offset : offset + length]
        if len(out) < length and offset + len(out) >= more_from:
            out += read_at(offset + len(out), length - len(out))
        return out

    try:
        header = read_header(
            spliced,
            file_size=file_size,
            max_header_bytes=max_header_bytes,
            first_read=len(known),
            source=source,
            splice=(start, len(template.span), template.pairs),
        )
    except GGUFError:
        return None
    if not structurally_sound(header, file_size):
        return None
    return replace(header, tokenizer_from=template.source)


def structurally_sound(header: GGUFHeader, file_size: int) -> bool:
    """Tensors known, aligned, not overlapping, and ending exactly at the end of the file."""
    if not header.tensors:
        return False
    spans: list[tuple[int, int]] = []
    for t in header.tensors:
        n = t.n_bytes
        if n is None or t.offset % header.alignment:
            return False
        spans.append((t.offset, t.offset + n))
    spans.sort()
    for (_, end), (nxt, _) in itertools.pairwise(spans):
        if nxt < end:
            return False
    end = header.data_offset + spans[-1][1]
    padded = header.data_offset + -(-spans[-1][1] // header.alignment) * header.alignment
    return file_size in (end, padded)
