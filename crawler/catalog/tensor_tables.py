"""The compressed raw tensor tables of the catalog (tensor_tables.data): encode and decode.

Kept so that quants reprofile can recompute after a rule changes, without the network.
Details: docs/internals/catalog.md#tensor_tables
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any

from crawler.gguf.parse import GGUFArray, GGUFHeader, TensorInfo
from crawler.profile.analysis import AnalysedShard

__all__ = [
    "MAX_DECODED_BYTES",
    "MAX_TENSORS",
    "TENSOR_TABLE_ENCODING",
    "TensorTableError",
    "decode_tensor_table",
    "encode_tensor_table",
    "inflate",
]

#: ``tensor_tables.encoding`` of what encode_tensor_table writes.
TENSOR_TABLE_ENCODING = "json+zlib/1"
# Metadata arrays longer than this, and the tokenizer arrays (tokens, scores, merges: 100k+
# entries, ~99% of a header), are not stored; only their lengths are. Per-layer arrays (head
# counts, SWA pattern) have one entry per block, far below this.
_MAX_STORED_ARRAY = 4096


#: Bounds on one stored table, far above any real header (a GGUF tensor table is ~100 bytes of
#: JSON a tensor; models hold hundreds to a few thousand tensors): an 89 KB zlib stream can
#: inflate to gigabytes, and decoding, then profiling, millions of tensors took 16 s and 2.2 GB.
MAX_DECODED_BYTES = 32 * 1024 * 1024
MAX_TENSORS = 100_000


class TensorTableError(ValueError):
    """A stored tensor table that is not one the crawl could have written (or is too large)."""


def inflate(data: bytes, limit: int = MAX_DECODED_BYTES) -> bytes:
    """zlib-decompress ``data``, refusing more than ``limit`` bytes of output (no bomb)."""
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, limit)
    except zlib.error as exc:
        raise TensorTableError(f"not a zlib stream ({exc})") from None
    if d.unconsumed_tail or not d.eof:
        if d.unconsumed_tail:
            raise TensorTableError(f"decodes to more than {limit} bytes")
        raise TensorTableError("truncated zlib stream")
    return out


def _is_array(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _json_default(value: Any) -> Any:
    # json.dumps calls this only for what it cannot encode itself (kept on the C fast path).
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, GGUFArray):
        return value.to_list()
    if _is_array(value):
        return list(value)
    return str(value)


def encode_tensor_table(shards: Sequence[AnalysedShard]) -> bytes:
    """The shards' tensor tables and small metadata as zlib-compressed JSON.

    Tokenizer arrays and other long arrays are replaced by their lengths under
    ``array_lengths``: no rule of profile or fit reads the vocabulary itself.
    """
    out = []
    for shard in shards:
        h = shard.header
        metadata: dict[str, Any] = {}
        lengths: dict[str, int] = {}
        for key, value in h.metadata.items():
            if _is_array(value) and (
                len(value) > _MAX_STORED_ARRAY or key.startswith("tokenizer.ggml.")
            ):
                lengths[key] = len(value)
            else:
                metadata[key] = value
        out.append(
            {
                "path": shard.path,
                "content_key": shard.content_key,
                "header_bytes": shard.header_bytes,
                "version": h.version,
                "alignment": h.alignment,
                "data_offset": h.data_offset,
                "tensor_info_end": h.tensor_info_end,
                "metadata": metadata,
                "metadata_types": dict(h.metadata_types),
                "array_lengths": lengths,
                # A sibling read: the file whose tokenizer bytes this header reused.
                "tokenizer_from": h.tokenizer_from,
                # A templated read: the template whose arrays stood in for the file's own.
                "tokenizer_template": h.tokenizer_template,
                # A 5th item only for a fork's type id: its bytes from the offsets.
                "tensors": [
                    [t.name, t.shape, t.type_id, t.offset]
                    + ([] if t.size_from_type or t.span_bytes is None else [t.span_bytes])
                    for t in h.tensors
                ],
            }
        )
    raw = json.dumps({"shards": out}, separators=(",", ":"), default=_json_default)
    return zlib.compress(raw.encode("utf-8"), 6)


def decode_tensor_table(data: bytes, encoding: str = TENSOR_TABLE_ENCODING) -> list[AnalysedShard]:
    """Inverse of encode_tensor_table (long arrays come back empty-valued: absent).

    Raises TensorTableError for anything the encoder could not have written: another
    encoding, a zlib stream that inflates past MAX_DECODED_BYTES, JSON of another shape, or more
    than MAX_TENSORS tensors.
    """
    if encoding != TENSOR_TABLE_ENCODING:
        raise TensorTableError(f"unknown tensor table encoding {encoding!r}")
    try:
        doc = json.loads(inflate(data))
        shards = []
        count = 0
        for s in doc["shards"]:
            count += len(s["tensors"])
            if count > MAX_TENSORS:
                raise TensorTableError(f"more than {MAX_TENSORS} tensors")
            tensors = tuple(
                TensorInfo(
                    name=_str(t[0]),
                    shape=tuple(_int(x) for x in t[1]),
                    type_id=_int(t[2]),
                    offset=_int(t[3]),
                    span_bytes=_int(t[4]) if len(t) > 4 else None,
                )
                for t in s["tensors"]
            )
            metadata = s["metadata"]
            if not isinstance(metadata, dict):
                raise TensorTableError("metadata is not an object")
            header = GGUFHeader(
                version=_int(s["version"]),
                metadata=metadata,
                tensors=tensors,
                alignment=_int(s["alignment"]),
                data_offset=_int(s["data_offset"]),
                metadata_types=dict(s.get("metadata_types", {})),
                tensor_info_end=_int(s.get("tensor_info_end", 0)),
                tokenizer_from=s.get("tokenizer_from"),
                tokenizer_template=s.get("tokenizer_template"),
            )
            shards.append(
                AnalysedShard(
                    _str(s["path"]), _str(s["content_key"]), _int(s["header_bytes"]), header
                )
            )
    except TensorTableError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, RecursionError) as exc:
        raise TensorTableError(f"not a stored tensor table ({type(exc).__name__}: {exc})") from None
    return shards


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 63:
        raise TensorTableError(f"{value!r} is not a non-negative integer")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TensorTableError(f"{value!r} is not a string")
    return value


# -- reads for the crawl ---------------------------------------------------------------------
