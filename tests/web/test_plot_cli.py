"""``quants estimate --plot`` and ``quants compare --plot``: the web app's charts as SVG or PNG
files."""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import tests.synth as synth
from tests.cli import clean_env, run_quants
from tests.web.conftest import Served


def _tiny_gguf(path: Path) -> None:
    lay = synth.layout(synth.preset("llama", "tiny"), synth.q4_k_m_like())
    with path.open("wb") as fh:
        fh.write(lay.header)
        fh.truncate(lay.size)


def test_estimate_plot_writes_the_memory_chart(tmp_path: Path) -> None:
    model = tmp_path / "tiny-Q4_K_M.gguf"
    _tiny_gguf(model)
    out_svg = tmp_path / "mem.svg"
    env = clean_env(tmp_path)
    run = run_quants("estimate", str(model), "--ctx", "4096", "--vram", "1", "--headroom", "0",
                     "--plot", str(out_svg), env=env, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert f"wrote {out_svg}" in run.stderr
    svg = out_svg.read_text("utf-8")
    root = ET.fromstring(svg.split("?>", 1)[1])
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert svg.count('class="curve"') >= 2 and 'class="budget"' in svg
    assert "VRAM budget 1.0 GiB" in svg and "prefers-color-scheme: dark" in svg


def test_estimate_plot_png_is_the_chart_rendered_at_twice_its_size(tmp_path: Path) -> None:
    model = tmp_path / "tiny-Q4_K_M.gguf"
    _tiny_gguf(model)
    env = clean_env(tmp_path)
    for name in ("mem.svg", "mem.png"):
        run = run_quants("estimate", str(model), "--ctx", "4096", "--vram", "1", "--headroom", "0",
                         "--plot", str(tmp_path / name), env=env, timeout=60)  # fmt: skip
        assert run.returncode == 0, run.stderr
    svg = (tmp_path / "mem.svg").read_text("utf-8")
    root = ET.fromstring(svg.split("?>", 1)[1])
    png = (tmp_path / "mem.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (
        2 * int(float(root.get("width"))),
        2 * int(float(root.get("height"))),
    )
    # The labels are drawn: this chart is ~27 KB with a system font, ~6.5 KB with lines alone.
    assert len(png) > 15_000


def test_plot_refuses_other_suffixes_before_any_work(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    other = run_quants("compare", "x", "--plot", str(tmp_path / "m.pdf"), env=env, timeout=60)
    assert other.returncode == 2 and "ending in .svg or .png" in other.stderr
    assert "Traceback" not in other.stderr and not (tmp_path / "m.pdf").exists()


def test_compare_plot_writes_heatmap_and_scatter(served: Served, tmp_path: Path) -> None:
    out_svg = tmp_path / "cmp.svg"
    run = run_quants("compare", "Qwen/Qwen3.6-27B", "--db", served.db, "--plot", str(out_svg),
                     env=clean_env(served.tmp), timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    svg = out_svg.read_text("utf-8")
    ET.fromstring(svg.split("?>", 1)[1])
    assert svg.count('class="cell"') > 10 and 'class="pareto"' in svg
    assert "Bits per tensor group: Qwen/Qwen3.6-27B" in svg
