"""``--plot FILE``: write a chart (crawler.charts) as SVG, or as PNG rendered from that SVG by
resvg (the optional ``resvg-py`` package: ``pip install 'quants[png]'``)."""

from __future__ import annotations

from pathlib import Path

from crawler.base.errors import UsageError

#: PNG pixels per SVG unit (a 2x image stays sharp on high-density screens).
PNG_ZOOM = 2.0


def check_plot_path(path: Path) -> None:
    """UsageError unless ``path`` ends in .svg or .png (checked before any work is done)."""
    suffix = path.suffix.lower()
    if suffix == ".png":
        _png_from_svg('<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>')
    elif suffix != ".svg":
        raise UsageError(f"--plot {path}: give a file name ending in .svg or .png")


def write_plot(path: Path, svg: str) -> None:
    """Write the SVG text, or its PNG rendering for a .png name; UsageError when the file cannot
    be written."""
    try:
        if path.suffix.lower() == ".png":
            # A white canvas: the charts' light colours are the default (dark mode is a media
            # query a PNG has no use for). Text is drawn with the system's fonts.
            path.write_bytes(_png_from_svg(svg))
        else:
            path.write_text(svg, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--plot {path}: {exc.strerror or exc}") from None


def _png_from_svg(svg: str) -> bytes:
    try:
        import resvg_py
    except ImportError:
        raise UsageError(
            "--plot FILE.png needs the optional package resvg-py (pip install 'quants[png]');"
            " an .svg file needs nothing"
        ) from None
    try:
        return bytes(resvg_py.svg_to_bytes(svg_string=svg, background="#ffffff", zoom=PNG_ZOOM))
    except ValueError as exc:  # resvg's own refusal: a chart it cannot draw
        raise UsageError(f"--plot: PNG rendering failed: {exc}") from None
