"""The llama-server measurement fixture (tools/measure_server.py, PROVENANCE.md) stays coherent:
each kept raw log parses back to the buffer lines and breakdown its row recorded, and every valid
run's device memory is at least what llama.cpp itself says it allocated on the device."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

HERE = Path(__file__).parents[1] / "fixtures" / "llamacpp"
_BUF = re.compile(r"^(?P<fn>\w+): +(?P<dev>\S+) (?P<what>.*?) buffer size = +(?P<mib>[\d.]+) MiB")


def _rows() -> list[dict[str, Any]]:
    lines = (HERE / "server-measurements.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if not r.get("header")]


def _buffers(text: str) -> list[list[Any]]:
    out = []
    for line in text.splitlines():
        # the server prefixes "<time> <level> " before llama.cpp's own "fn: dev what buffer ..."
        m = _BUF.search(re.sub(r"^\d+\.\d+\.\d+\.\d+ [A-Z] ", "", line, count=1))
        if m:
            out.append([m["fn"], m["dev"], m["what"], float(m["mib"])])
    return out


def test_kept_logs_match_their_rows() -> None:
    kept = [r for r in _rows() if "fixture_log" in r]
    assert len(kept) >= 10
    for r in kept:
        text = (HERE / r["fixture_log"]).read_text()
        assert _buffers(text) == r["log"]["buffers"], r["fixture_log"]
        argv = r["argv"]
        if int(argv[argv.index("-lv") + 1]) >= 4:
            assert r["log"]["buffers"], r["fixture_log"]  # -lv 4 prints them
        else:
            assert not r["log"]["buffers"], r["fixture_log"]  # -lv 3 does not (0c1e57098)


def test_device_memory_covers_llama_cpp_own_device_buffers() -> None:
    checked = 0
    for r in _rows():
        if r.get("invalid") or r.get("completion_status") != 200 or not r["log"]["buffers"]:
            continue
        used = r["gpu_after_request"][0]["used_mib"] - r["gpu_before"][0]["used_mib"]
        on_dev = _device_mib(r["log"]["buffers"])
        assert on_dev <= used <= on_dev + 2048, (r["pass"], r["index"], on_dev, used)
        checked += 1
    assert checked >= 40


def _device_mib(buffers: list[list[Any]]) -> float:
    """MiB of llama.cpp's own buffers on the GPU (``CUDA<n>``; ``CUDA_Host`` is pinned host
    memory). A context's compute buffer printed twice (the MTP draft context reserves again for
    its second graph) is one buffer, re-sized: the larger size counts once. A context starts at
    its ``output`` buffer line."""
    total = 0.0
    compute: dict[str, float] = {}
    for fn, dev, what, mib in buffers:
        if what.strip() == "output":
            total += sum(compute.values())
            compute = {}
        if not re.fullmatch(r"CUDA\d+", dev):
            continue
        if fn == "sched_reserve":
            compute[dev] = max(compute.get(dev, 0.0), mib)
        else:
            total += mib
    return total + sum(compute.values())
