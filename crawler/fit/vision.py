"""A vision projector (mmproj) on the GPU: its weights and the compute buffer clip allocates.

Weights exact (clip.cpp); the warm-up compute buffer is fitted on one projector (Gemma 3).
Details: docs/internals/fit.md#vision
"""

from __future__ import annotations

from dataclasses import dataclass

from crawler.base.errors import InvalidConfig
from crawler.gguf.parse import GGUFHeader

__all__ = ["ACTIVATION_FACTOR", "MEASURED_COMPUTE", "Projector", "projector", "projector_bytes"]

#: Fitted: 124 MiB / (4096 patches x 1152 x 4 bytes) on the one measured projector.
ACTIVATION_FACTOR = 124 * 1024**2 / (4096 * 1152 * 4)


#: The one measured projector's warm-up compute buffer (search has only the file size, not the
#: header, so it adds this to the file's bytes).
MEASURED_COMPUTE = 124 * 1024**2


def projector_bytes(file_bytes: int) -> int:
    """Device bytes of a projector known only by its file size: its tensors (the file, less a
    header of a few KiB: an upper bound) plus the measured warm-up compute buffer."""
    return file_bytes + MEASURED_COMPUTE


@dataclass(frozen=True, slots=True)
class Projector:
    """Device bytes a projector adds: weights (exact) and compute (fitted)."""

    weights: int
    compute: int
    projector_type: str | None

    @property
    def total(self) -> int:
        """All its device bytes."""
        return self.weights + self.compute


def projector(header: GGUFHeader) -> Projector:
    """The projector of an ``mmproj`` header; InvalidConfig for a file that is not one."""
    from crawler.fit.header import Unknown, cuda_tensor_bytes

    md = header.metadata
    if md.get("general.architecture") != "clip":
        raise InvalidConfig("--mmproj needs a vision projector GGUF (general.architecture clip)")
    try:
        weights = sum(cuda_tensor_bytes(t)[0] for t in header.tensors)
    except Unknown as exc:
        raise InvalidConfig(f"--mmproj: {exc}") from None
    size = int(md.get("clip.vision.image_size", 0) or 0)
    patch = int(md.get("clip.vision.patch_size", 0) or 0)
    width = int(md.get("clip.vision.embedding_length", 0) or 0)
    patches = (size // patch) ** 2 if patch else 0
    compute = int(ACTIVATION_FACTOR * patches * width * 4)
    kind = md.get("clip.projector_type")
    return Projector(weights, compute, str(kind) if kind is not None else None)
