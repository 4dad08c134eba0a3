"""One coarse tensor group's statistics, as the catalog stores them (``tensor_groups``).

The one group type that ranking, the quality model, compare and the search columns share (the
profile's own per-file :class:`crawler.profile.GroupStats` adds the tensor count and the type
histogram it aggregates from the tensor table).
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

    @property
    def bits(self) -> float | None:
        """Storage bits per weight: ``bpw``, else bytes over parameters."""
        if self.bpw is not None:
            return self.bpw
        if self.n_params > 0 and self.n_bytes > 0:
            return self.n_bytes * 8 / self.n_params
        return None
