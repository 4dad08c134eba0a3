"""``--plot FILE``: write a chart (crawler.charts) as SVG; PNG is refused with the reason."""

from __future__ import annotations

from pathlib import Path

from crawler.errors import UsageError


def check_plot_path(path: Path) -> None:
    """UsageError unless ``path`` ends in .svg (checked before any work is done)."""
    suffix = path.suffix.lower()
    if suffix == ".png":
        raise UsageError(
            f"--plot {path}: PNG is not supported (it needs a rasteriser quants does not ship); "
            "write an .svg file: browsers and image viewers open it"
        )
    if suffix != ".svg":
        raise UsageError(f"--plot {path}: give a file name ending in .svg")


def write_plot(path: Path, svg: str) -> None:
    """Write the SVG text; UsageError when the file cannot be written."""
    try:
        path.write_text(svg, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--plot {path}: {exc.strerror or exc}") from None
