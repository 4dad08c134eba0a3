"""GGUF metadata and tensor sizes read with llama.cpp's semantics, for the memory model (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from crawler.fit.cache import cuda_alloc_bytes
from crawler.gguf.ggml import type_info
from crawler.gguf.parse import TensorInfo

__all__ = ["Meta", "Unknown", "cuda_tensor_bytes"]


class Unknown(Exception):
    """The memory rules for this header are not modelled (becomes ``status="unknown"``)."""


class Meta:
    """``{arch}.`` metadata access with llama.cpp's ``get_key_or_arr`` semantics."""

    def __init__(self, metadata: Mapping[str, Any], arch: str):
        self.md = metadata
        self.arch = arch

    def has(self, key: str) -> bool:
        """Whether ``{arch}.{key}`` is present."""
        return f"{self.arch}.{key}" in self.md

    def num(self, key: str, default: int | None = None) -> int:
        """A scalar key (``default`` when absent; Unknown when required and absent)."""
        value = self.md.get(f"{self.arch}.{key}", default)
        if value is None:
            raise Unknown(f"missing metadata {self.arch}.{key}")
        if isinstance(value, Sequence) and not isinstance(value, str):
            raise Unknown(f"{self.arch}.{key} is an array, a number was expected")
        return int(value)

    def per_layer(self, key: str, n: int, default: int | None = None) -> list[int]:
        """Scalar broadcast to ``n`` layers, or a per-layer array (``get_key_or_arr``)."""
        value = self.md.get(f"{self.arch}.{key}", default)
        if value is None:
            raise Unknown(f"missing metadata {self.arch}.{key}")
        if isinstance(value, Sequence) and not isinstance(value, str):
            if len(value) != n:
                raise Unknown(f"{self.arch}.{key} has {len(value)} entries for {n} layers")
            return [int(v) for v in value]
        return [int(value)] * n


def cuda_tensor_bytes(t: TensorInfo) -> tuple[int, int]:
    """(CUDA buffer bytes, ggml_nbytes) of a tensor; Unknown for a type mainline cannot load."""
    info = type_info(t.type_id)
    if info is None and t.n_bytes is not None:
        # A fork's type id (mainline cannot load it): its bytes come from the file's offsets
        # (crawler.gguf.parse), so the weights are still known; allocated as one padded block.
        return cuda_alloc_bytes(t.n_bytes, 1, 1, 1), t.n_bytes
    if info is None or not info.mainline:
        raise Unknown(f"tensor {t.name} has type id {t.type_id}, not loadable by mainline")
    blck, type_size = info.block_size, info.type_size
    if not t.shape or t.shape[0] % blck:
        raise Unknown(f"tensor {t.name}: a row of {t.shape[:1]} elements is not whole blocks")
    n = 1
    for d in t.shape:
        n *= d
    nbytes = n // blck * type_size
    return cuda_alloc_bytes(nbytes, t.shape[0], blck, type_size), nbytes
