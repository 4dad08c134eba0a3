"""Tokenizer templates (pure: no I/O): read a header around a tokenizer already seen, in any repo.

Every quant of a base model carries the same tokenizer bytes; a templated read skips them.
Details: docs/internals/gguf.md#tokenizer_template
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from crawler.base.errors import GGUFError
from crawler.gguf.fetch import ESTIMATE_SLACK, TENSOR_INFO_BOUND
from crawler.gguf.model import SCALAR_STRUCTS, ValueType
from crawler.gguf.parse import EAGER_ARRAY_ITEMS, GGUFArray, GGUFHeader, ReadAt, read_header
from crawler.gguf.sibling import structurally_sound

__all__ = [
    "MIN_BLOCK_BYTES",
    "PROBE",
    "PrefixView",
    "TokenizerTemplate",
    "lookup_key",
    "read_templated",
    "template_of",
    "walk_prefix",
]

#: Bytes at each end of the block compared with the template (and hashed into its fingerprint).
PROBE = 4096
#: Below this block size a templated read saves too little to be worth it.
MIN_BLOCK_BYTES = 64 * 1024
#: Relative slack on the template's metadata after the block (a longer chat template, a few
#: more quantize.* keys), plus this much per key the file has there beyond the template's.
AFTER_MARGIN = 0.25
_BYTES_PER_EXTRA_KEY = 1024

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SIZES = {t: s.size for t, s in SCALAR_STRUCTS.items()}
_HEAD = 4 + 4 + 8 + 8  # magic, version, n_tensors, n_kv


@dataclass(frozen=True, slots=True)
class TokenizerTemplate:
    """A tokenizer block read once in full, reusable by any file that shows the same one."""

    fingerprint: str
    lookup: str
    #: The block's bytes as encoded (key/value pairs).
    block: bytes
    #: (key, item type, count) of each array, in file order.
    keys: tuple[tuple[str, int, int], ...]
    model: str | None
    pre: str | None
    #: The file the block was read from, and where the block starts in it.
    source: str
    block_start: int
    #: In the source: metadata bytes and keys between the block's end and the tensor infos.
    after_bytes: int
    after_keys: int
    #: The source's header size (sizes the full read of a file that only looks alike).
    header_bytes: int
    _pairs: dict[str, tuple[Any, int, tuple[int, int]]] | None = field(
        default=None, compare=False, repr=False
    )

    def pairs(self) -> dict[str, tuple[Any, int, tuple[int, int]]]:
        """The block's pairs as the parser's splice takes them: key -> (value, ARRAY, span);
        decoded once (walking a 248k vocabulary takes ~0.1 s)."""
        if self._pairs is None:
            pairs = {k: (v, ValueType.ARRAY, span) for k, _, _, v, span in _walk_block(self.block)}
            object.__setattr__(self, "_pairs", pairs)
            return pairs
        return self._pairs


@dataclass(frozen=True, slots=True)
class PrefixView:
    """What a file's first bytes say about its tokenizer block."""

    #: Offset of the block's first pair; keys before it; the model and pre names seen.
    start: int
    keys_before: int
    model: str | None
    pre: str | None
    n_tensors: int
    n_kv: int


def lookup_key(model: str | None, pre: str | None, head: bytes) -> str:
    """The lookup of a block whose first PROBE bytes are ``head``."""
    h = hashlib.sha256(json.dumps([model, pre]).encode())
    h.update(head[:PROBE])
    return h.hexdigest()


def _fingerprint(
    keys: tuple[tuple[str, int, int], ...], model: str | None, pre: str | None, block: bytes
) -> str:
    h = hashlib.sha256(json.dumps([list(map(list, keys)), model, pre, len(block)]).encode())
    h.update(block[:PROBE])
    h.update(block[-PROBE:])
    return h.hexdigest()


def _walk_block(block: bytes) -> list[tuple[str, int, int, Any, tuple[int, int]]]:
    """(key, item type, count, value, span) of each array pair in ``block``."""
    out = []
    pos = 0
    while pos < len(block):
        start = pos
        (n,) = _U64.unpack_from(block, pos)
        key = block[pos + 8 : pos + 8 + n].decode("utf-8", "replace")
        pos += 8 + n
        (vtype,) = _U32.unpack_from(block, pos)
        (item,) = _U32.unpack_from(block, pos + 4)
        (count,) = _U64.unpack_from(block, pos + 8)
        pos += 16
        if vtype != ValueType.ARRAY:
            raise ValueError(f"{key} is not an array")
        items_at = pos
        pos = _skip_items(block, pos, item, count)
        value: Any = GGUFArray(item, count, block[items_at:pos])
        if count <= EAGER_ARRAY_ITEMS:
            value = value.to_list()  # as the parser decodes a short array
        out.append((key, item, count, value, (start, pos)))
    return out


def _skip_items(data: bytes, pos: int, item: int, count: int) -> int:
    if item in _SIZES:
        return pos + count * _SIZES[item]
    if item != ValueType.STRING:
        raise ValueError(f"array item type {item} in a tokenizer block")
    unpack = _U64.unpack_from
    for _ in range(count):
        (n,) = unpack(data, pos)
        pos += 8 + n
    if pos > len(data):
        raise ValueError("array runs past the block")
    return int(pos)


def _is_block_key(key: str, vtype: int) -> bool:
    return key.startswith("tokenizer.") and vtype == ValueType.ARRAY


def template_of(
    header: GGUFHeader, head: bytes, source: str, *, min_block: int = MIN_BLOCK_BYTES
) -> TokenizerTemplate | None:
    """The template of a header read in full (``head``: its bytes from offset 0 at least to the
    end of its metadata), or None: no tokenizer block worth skipping, or a header that was
    itself templated."""
    if header.tokenizer_template is not None or header.tokenizer_from is not None:
        return None
    spans, types = header.kv_spans, header.metadata_types
    keys = list(spans)  # file order
    first = next((i for i, k in enumerate(keys) if _is_block_key(k, types.get(k, -1))), None)
    if first is None:
        return None
    last = first
    while last + 1 < len(keys) and _is_block_key(keys[last + 1], types.get(keys[last + 1], -1)):
        last += 1
    start, end = spans[keys[first]][0], spans[keys[last]][1]
    meta_end = max(b for _, b in spans.values())
    if end - start < max(min_block, 2 * PROBE) or len(head) < meta_end:
        return None
    block = bytes(head[start:end])
    sig: list[tuple[str, int, int]] = []
    try:
        for k in keys[first : last + 1]:  # each pair's head: key, ARRAY, item type, count
            at = spans[k][0] - start
            (n,) = _U64.unpack_from(block, at)
            if block[at + 8 : at + 8 + n].decode("utf-8", "replace") != k:
                return None
            (item,) = _U32.unpack_from(block, at + 8 + n + 4)
            (count,) = _U64.unpack_from(block, at + 8 + n + 8)
            sig.append((k, int(item), int(count)))
    except struct.error:
        return None
    model, pre = (
        header.metadata.get("tokenizer.ggml.model"),
        header.metadata.get("tokenizer.ggml.pre"),
    )
    model = model if isinstance(model, str) else None
    pre = pre if isinstance(pre, str) else None
    # The header's own values (already decoded) are what the splice hands the parser.
    pairs = {
        k: (header.metadata[k], ValueType.ARRAY, (a - start, b - start))
        for k, (a, b) in ((k, spans[k]) for k in keys[first : last + 1])
    }
    return TokenizerTemplate(
        fingerprint=_fingerprint(tuple(sig), model, pre, block),
        lookup=lookup_key(model, pre, block),
        block=block,
        keys=tuple(sig),
        model=model,
        pre=pre,
        source=source,
        block_start=start,
        after_bytes=meta_end - end,
        after_keys=len(keys) - last - 1,
        header_bytes=header.data_offset,
        _pairs=pairs,
    )


def walk_prefix(data: bytes) -> PrefixView | None:
    """Walk a file's first bytes to its tokenizer block; None when the block's start and first
    PROBE bytes are not all in ``data`` (or the bytes are not a GGUF prefix)."""
    try:
        if data[:4] != b"GGUF":
            return None
        (n_tensors,) = _U64.unpack_from(data, 8)
        (n_kv,) = _U64.unpack_from(data, 16)
        pos, done = _HEAD, 0
        strings: dict[str, str] = {}
        while done < n_kv:
            start = pos
            (n,) = _U64.unpack_from(data, pos)
            if n > 65536 or pos + 8 + n + 4 > len(data):
                return None
            key = data[pos + 8 : pos + 8 + n].decode("utf-8", "replace")
            pos += 8 + n
            (vtype,) = _U32.unpack_from(data, pos)
            pos += 4
            if _is_block_key(key, vtype):
                if start + PROBE > len(data):
                    return None
                return PrefixView(
                    start,
                    done,
                    strings.get("tokenizer.ggml.model"),
                    strings.get("tokenizer.ggml.pre"),
                    int(n_tensors),
                    int(n_kv),
                )
            if vtype == ValueType.STRING:
                (m,) = _U64.unpack_from(data, pos)
                strings[key] = data[pos + 8 : pos + 8 + m].decode("utf-8", "replace")
                pos += 8 + m
            elif vtype in _SIZES:
                pos += _SIZES[vtype]
            elif vtype == ValueType.ARRAY:
                (item,) = _U32.unpack_from(data, pos)
                (count,) = _U64.unpack_from(data, pos + 4)
                pos = _skip_items(data, pos + 12, item, count)
            else:
                return None
            done += 1
            if pos > len(data):
                return None
        return None
    except (ValueError, struct.error):
        return None


def read_templated(
    read_at: ReadAt,
    prefix: bytes,
    find: Callable[[str], TokenizerTemplate | None],
    *,
    file_size: int | None,
    max_header_bytes: int,
    source: str | None = None,
) -> tuple[GGUFHeader | None, TokenizerTemplate | None]:
    """``(header, template)`` read around a known template, given the file's first ``prefix``
    bytes (already fetched: this costs one more request when the template applies).

    ``(None, template)``: the prefix named a template but the file did not match it (count it as
    a fall-back); ``(None, None)``: no template applies, or the prefix already holds most of the
    block. Either way the caller reads the file in full.
    """
    view = walk_prefix(prefix) if file_size is not None else None
    if view is None or file_size is None:
        return None, None
    head = prefix[view.start : view.start + PROBE]
    template = find(lookup_key(view.model, view.pre, head))
    if template is None:
        return None, None
    block = template.block
    seen = prefix[view.start : view.start + len(block)]
    if block[: len(seen)] != seen:
        return None, template
    block_end = view.start + len(block)
    tail_from = block_end - PROBE
    if tail_from < len(prefix):
        return None, None
    keys_after = view.n_kv - view.keys_before - len(template.keys)
    if keys_after < 0:
        return None, template
    rest = (
        int(template.after_bytes * (1 + AFTER_MARGIN))
        + ESTIMATE_SLACK
        + max(0, keys_after - template.after_keys) * _BYTES_PER_EXTRA_KEY
        + view.n_tensors * TENSOR_INFO_BOUND
        + 64  # alignment padding
    )
    if block_end > max_header_bytes:
        return None, None  # past the cap: the full read reports it
    after = read_at(tail_from, max(0, min(PROBE + rest, file_size - tail_from)))
    if after[:PROBE] != block[-PROBE:]:
        return None, template
    known = prefix[: view.start] + block + after[PROBE:]
    more_from = len(known)

    def spliced(offset: int, length: int) -> bytes:
        out = known[offset : offset + length]
        if len(out) < length and offset + len(out) >= more_from:
            out += read_at(offset + len(out), length - len(out))
        return out

    pairs: Mapping[str, tuple[Any, int, tuple[int, int]]] = template.pairs()
    try:
        header = read_header(
            spliced,
            file_size=file_size,
            max_header_bytes=max_header_bytes,
            first_read=len(known),
            source=source,
            splice=(view.start, len(block), pairs),
        )
    except GGUFError:
        return None, template
    if not structurally_sound(header, file_size) or any(
        header.kv_spans.get(k, (-1, -1))[0] - view.start != span[0]
        for k, (_, _, span) in pairs.items()
    ):
        return None, template
    return (
        replace(header, tokenizer_from=template.source, tokenizer_template=template.fingerprint),
        template,
    )
