"""KV-cache types and the buffer arithmetic llama.cpp applies to every tensor it allocates (pure).

Cache types, block sizes, CUDA row padding and alignment, from llama.cpp 0c1e57098.
Details: docs/internals/fit.md#cache
"""

from __future__ import annotations

from dataclasses import dataclass

from crawler.base.errors import InvalidConfig

__all__ = [
    "CACHE_TYPES",
    "CUDA_ALIGNMENT",
    "MATRIX_ROW_PADDING",
    "CacheType",
    "cache_type",
    "check_v_cache",
    "cuda_alloc_bytes",
    "pad",
]

#: ``ggml_backend_cuda_buffer_type_get_alignment``: every tensor starts on a 128-byte boundary.
CUDA_ALIGNMENT = 128
#: ggml-cuda/common.cuh MATRIX_ROW_PADDING: quantized rows padded to 512 elements, once a tensor.
MATRIX_ROW_PADDING = 512


@dataclass(frozen=True, slots=True)
class CacheType:
    """A ggml type usable for the KV cache: ``blck`` elements take ``type_size`` bytes."""

    name: str
    blck: int
    type_size: int
    bits: float

    @property
    def quantized(self) -> bool:
        """True for block-quantized types (they need flash attention as V, and head dims % blck)."""
        return self.blck > 1

    def row_bytes(self, n: int) -> int:
        """``ggml_row_size``: bytes of a row of ``n`` elements (``n`` a multiple of blck)."""
        return n // self.blck * self.type_size


# Order = descending size per element: the order `cheapest_cache_for` walks.
CACHE_TYPES: dict[str, CacheType] = {
    t.name: t
    for t in (
        CacheType("f32", 1, 4, 32.0),
        CacheType("f16", 1, 2, 16.0),
        CacheType("bf16", 1, 2, 16.0),
        CacheType("q8_0", 32, 34, 8.5),
        CacheType("q5_1", 32, 24, 6.0),
        CacheType("q5_0", 32, 22, 5.5),
        CacheType("q4_1", 32, 20, 5.0),
        CacheType("q4_0", 32, 18, 4.5),
        CacheType("iq4_nl", 32, 18, 4.5),
    )
}


def cache_type(name: str) -> CacheType:
    """Look up a ``-ctk``/``-ctv`` type name; InvalidConfig for one llama.cpp does not accept."""
    try:
        return CACHE_TYPES[name.lower()]
    except KeyError:
        allowed = ", ".join(CACHE_TYPES)
        raise InvalidConfig(f"unknown KV cache type {name!r} (allowed: {allowed})") from None


def pad(n: int, multiple: int) -> int:
    """``GGML_PAD``: round ``n`` up to a multiple."""
    return (n + multiple - 1) // multiple * multiple


def cuda_alloc_bytes(nbytes: int, ne0: int, blck: int, type_size: int) -> int:
    """Bytes a tensor occupies in a CUDA buffer: row padding for quantized types, then alignment.

    ``ggml_backend_cuda_buffer_type_get_alloc_size`` adds ``ggml_row_size(type, 512 - ne0 % 512)``
    once per tensor when a quantized tensor's rows are not a multiple of 512 elements; the buffer
    allocator then rounds each tensor up to the buffer type's alignment (128).
    """
    size = nbytes
    if blck > 1 and ne0 % MATRIX_ROW_PADDING:
        size += (MATRIX_ROW_PADDING - ne0 % MATRIX_ROW_PADDING) // blck * type_size
    return pad(size, CUDA_ALIGNMENT)


def check_v_cache(flash_attn: str, type_v: str, type_v_draft: str | None = None) -> None:
    """Refuse what llama.cpp refuses whatever the model: a quantized V cache (or MTP draft V
    cache) with flash attention off (src/llama-context.cpp llama_init_from_model). Search and
    estimate both check it before reading anything."""
    if flash_attn != "off":
        return
    if cache_type(type_v).quantized:
        raise InvalidConfig("a quantized V cache needs flash attention (--flash-attn on)")
    if type_v_draft is not None and cache_type(type_v_draft).quantized:
        raise InvalidConfig("a quantized draft V cache needs flash attention")
