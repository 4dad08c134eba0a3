"""The one budget rule: a GPU's memory less the headroom kept free is what a run may use.

Search, estimate and serve all take it from here, so one --vram gives one verdict everywhere.
Details: docs/internals/base.md#budget
"""

from __future__ import annotations

from crawler.base.errors import UsageError
from crawler.base.units import GIB

__all__ = ["DEFAULT_HEADROOM_GIB", "budget_json", "budget_text", "usable_bytes"]

DEFAULT_HEADROOM_GIB = 0.5


def usable_bytes(vram_bytes: int, headroom_bytes: int) -> int:
    """What a run may use; UsageError when the headroom leaves nothing."""
    if headroom_bytes < 0:
        raise UsageError(f"--headroom {headroom_bytes / GIB:g}: must be >= 0")
    if headroom_bytes >= vram_bytes:
        raise UsageError(
            f"--headroom {headroom_bytes / GIB:g} GiB leaves nothing of {vram_bytes / GIB:.2f} GiB;"
            " give a smaller --headroom or more memory"
        )
    return vram_bytes - headroom_bytes


def budget_text(vram_bytes: int, headroom_bytes: int) -> str:
    """``24.00 GiB - 0.50 headroom = 23.50 GiB``."""
    return (
        f"{vram_bytes / GIB:.2f} GiB - {headroom_bytes / GIB:.2f} headroom"
        f" = {(vram_bytes - headroom_bytes) / GIB:.2f} GiB"
    )


def budget_json(vram_bytes: int, headroom_bytes: int) -> dict[str, int | str]:
    """The budget as every JSON document states it."""
    return {
        "vram_bytes": vram_bytes,
        "headroom_bytes": headroom_bytes,
        "usable_bytes": vram_bytes - headroom_bytes,
        "text": budget_text(vram_bytes, headroom_bytes),
    }
