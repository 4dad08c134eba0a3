"""One coarse tensor group's statistics, as the catalog stores them (tensor_groups).

The one group type shared by the analysis, ranking, the quality model, compare and search.
Details: docs/internals/profile.md#groups
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GroupStats"]


@dataclass(frozen=True, slots=True)
class GroupStats:
    """One coarse tensor group of a quant (``v_tensor_groups``)."""

    name: str
    n_params: int
    n_bytes: int
    bpw: float | None = None
    min_bits: float | None = None
    max_bits: float | None = None
    #: Tensors in the group and their quant types (tensor_groups.types); ranking leaves them empty.
    n_tensors: int = 0
    types: tuple[tuple[str, int], ...] = ()

    @property
    def bits(self) -> float | None:
        """Storage bits per weight: ``bpw``, else bytes over parameters."""
        if self.bpw is not None:
            return self.bpw
        if self.n_params > 0 and self.n_bytes > 0:
            return self.n_bytes * 8 / self.n_params
        return None
