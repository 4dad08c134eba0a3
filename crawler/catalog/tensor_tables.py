"""The compressed raw tensor tables of the catalog (``tensor_tables.data``): encode and decode.

Kept so ``quants reprofile`` can recompute profiles and memory models after a rule changes
without touching the network. Format ``json+zlib/1``: zlib(JSON ``{"shards": [...]}``), one entry
per header-carrying file with its tensor infos and its metadata minus the tokenizer arrays.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any

from crawler.analysis import AnalysedShard
from crawler.gguf import GGUFArray, GGUFHeader, TensorInfo

__all__ = ["TENSOR_TABLE_ENCODING", "decode_tensor_table", "encode_tensor_table"]

#: ``tensor_tables.encoding`` of what :func:`encode_tensor_table` writes.
TENSOR_TABLE_ENCODING = "json+zlib/1"
# Metadata arrays longer than this, and the tokenizer arrays (tokens, scores, merges: 100k+
# entries, ~99% of a header), are not stored; only their lengths are. Per-layer arrays (head
# counts, SWA pattern) have one entry per block, far below this.
_MAX_STORED_ARRAY = 4096


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
                # A 5th item only for a fork's type id: its bytes from the offsets (crawler.gguf).
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
    """Inverse of :func:`encode_tensor_table` (long arrays come back empty-valued: absent)."""
    if encoding != TENSOR_TABLE_ENCODING:
        raise ValueError(f"unknown tensor table encoding {encoding!r}")
    doc = json.loads(zlib.decompress(data))
    shards = []
    for s in doc["shards"]:
        tensors = tuple(
            TensorInfo(
                name=t[0],
                shape=tuple(t[1]),
                type_id=t[2],
                offset=t[3],
                span_bytes=t[4] if len(t) > 4 else None,
            )
            for t in s["tensors"]
        )
        header = GGUFHeader(
            version=s["version"],
            metadata=s["metadata"],
            tensors=tensors,
            alignment=s["alignment"],
            data_offset=s["data_offset"],
            metadata_types=s.get("metadata_types", {}),
            tensor_info_end=s.get("tensor_info_end", 0),
            tokenizer_from=s.get("tokenizer_from"),
            tokenizer_template=s.get("tokenizer_template"),
        )
        shards.append(AnalysedShard(s["path"], s["content_key"], s["header_bytes"], header))
    return shards


# -- reads for the crawl ---------------------------------------------------------------------
