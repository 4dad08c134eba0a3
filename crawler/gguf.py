"""GGUF header model (pure: no I/O). The streaming parser behind a ``read_at`` seam lives here too.

Contract shared by profile, fit, scan and catalog: :class:`TensorInfo` and :class:`GGUFHeader`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: ``read_at(offset, length) -> bytes``; may return fewer bytes only at end of file.
ReadAt = Callable[[int, int], bytes]


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor-info record: ``shape`` in ggml order (ne0 first), ``offset`` into the data section."""

    name: str
    shape: tuple[int, ...]
    type_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class GGUFHeader:
    """A parsed GGUF header: metadata KV, tensor table, alignment, and where the data begins."""

    version: int
    metadata: Mapping[str, Any]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_offset: int

    @property
    def architecture(self) -> str | None:
        """``general.architecture`` or None."""
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None
