"""``quants estimate`` in a subprocess on the measured server models: llama.cpp's option
spellings, vision, several GPUs, every budget shape, a Mac. The setups themselves are tested
in-process in tests/unit/test_setups.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.cli import run_quants
from tests.fixtures.llamacpp.server import server_module
from tests.schemas import checked

ESTIMATE_ALIASES = [
    (["--ctx", "8192"], ["-c", "8192"]),
    (["--cache-type-k", "q8_0"], ["-ctk", "q8_0"]),
    (["--cache-type-v", "q8_0", "--flash-attn", "on"], ["-ctv", "q8_0", "-fa", "on"]),
    (["--parallel", "2"], ["-np", "2"]),
    (["--ubatch", "256"], ["-ub", "256"]),
    (["--n-gpu-layers", "10"], ["-ngl", "10"]),
    (["--n-cpu-moe", "4"], ["--n-cpu-moe", "4"]),
    (["--cpu-moe"], ["--cpu-moe"]),
    ([], ["--no-mmproj"]),
]


def _estimate(path: Path, *args: str) -> dict[str, Any]:
    out = run_quants("estimate", str(path), *args, "--json", env=dict(os.environ), timeout=120)
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = checked("estimate", out.stdout)
    return doc


@pytest.mark.parametrize("long,short", ESTIMATE_ALIASES)
def test_estimate_accepts_llama_cpp_spellings(server_models, server_coeffs, long, short):
    path = server_models / "qwen36-35b-a3b.gguf"
    base = [] if "-c" in short or "--ctx" in long else ["--ctx", "8192"]
    a, b = _estimate(path, *base, *long), _estimate(path, *base, *short)
    assert a == b
    if "-ngl" in short:
        assert a["n_gpu_layers"] == 10 and a["tier"] == "partial" and "-ngl 10" in a["command"]


def test_estimate_mmproj_adds_the_projector(server_models, server_coeffs, server_mmproj):
    path = server_models / "gemma3-12b.gguf"
    proj = server_models / f"{server_module().MMPROJ}.gguf"
    plain = _estimate(path, "-c", "32768")
    vision = _estimate(path, "-c", "32768", "--mmproj", str(proj))
    assert vision["bytes"]["total"] - plain["bytes"]["total"] == server_mmproj.total
    assert vision["mmproj"]["weights"] == server_mmproj.weights and "--mmproj" in vision["command"]
    auto = _estimate(path, "-c", "32768", "-ngl", "auto", "--vram", "8", "--mmproj", str(proj))
    assert auto["bytes"]["total"] <= 8 * 1024**3 and auto["tier"] == "partial"


def test_estimate_several_gpus_json(server_models, server_coeffs):  # coeffs write the models
    path = server_models / "qwen36-27b.gguf"
    doc = _estimate(path, "-c", "65536", "-ctk", "q4_0", "-ctv", "q4_0",
                    "--gpu", "2x 3090", "-ts", "3,1")  # fmt: skip
    devs = doc["devices"]
    assert [d["name"] for d in devs] == ["GeForce RTX 3090"] * 2
    assert devs[0]["slots"][1] == devs[1]["slots"][0] and devs[1]["slots"][1] == 66
    assert devs[0]["total_bytes"] > devs[1]["total_bytes"]  # 3:1
    assert doc["fits"] == all(d["fits"] for d in devs)


@pytest.mark.parametrize(
    ("args", "says", "code"),
    [
        (("--gpu", "3090"), "budget 24.00 GiB - 0.50 headroom = 23.50 GiB: fits", 0),
        (("--gpu", "m4 max"), "largest context at these settings", 0),
        (("--gpu", "2x 3090"), "tightest device", 0),
        (("--vram", "24", "-ts", "1,1"), "GPU1 24 GiB: layers", 0),
        (("-ngl", "16", "--vram", "8"), "-ngl 16 keeps ctx 32768", 0),
        (("--vram", "2"), "it does not fit at any context", 3),  # the "nothing fits" code
    ],
)
def test_estimate_text_answers_every_budget_shape(server_models, server_coeffs, args, says, code):
    """The table and verdict for one GPU by name, a Mac, several GPUs and a partial offload."""
    out = run_quants(
        "estimate", str(server_models / "llama8b.gguf"), "-c", "32768", *args,
        env=dict(os.environ), timeout=120,
    )  # fmt: skip
    assert out.returncode == code, out.stderr
    assert says in out.stdout and "Traceback" not in out.stderr


def test_estimate_budget_from_one_gpu_and_a_partial_offload_json(server_models, server_coeffs):
    path = server_models / "llama8b.gguf"
    one = _estimate(path, "-c", "32768", "--gpu", "3090")
    # The budget is the GPU's memory less the headroom, as search takes it (crawler.base.budget).
    assert one["budget"]["vram_bytes"] == 24 * 1024**3 and one["fits"]
    assert one["budget_bytes"] == 24 * 1024**3 - one["budget"]["headroom_bytes"] == 23.5 * 1024**3
    assert one["max_ctx"] == server_coeffs["llama8b"].n_ctx_train  # it reaches the trained context
    part = _estimate(path, "-c", "32768", "-ngl", "16", "--vram", "8")
    assert part["tier"] == "partial" and part["max_ctx"] is None and "-ngl 16" in part["command"]
    assert part["margin_bytes"] == 7.5 * 1024**3 - part["bytes"]["total"]


def test_estimate_on_a_mac_says_it_is_not_measured(server_models, server_coeffs):
    doc = _estimate(server_models / "llama8b.gguf", "-c", "32768", "--gpu", "m4 max")
    assert doc["backend"] == "metal" and "not measured" in doc["note"]
    assert doc["bytes"]["overhead"] == 0
    from crawler.fit.gpus import resolve_gpu

    budget = resolve_gpu("m4 max").gpu.budget_bytes  # the working-set share, not all the RAM
    assert budget < resolve_gpu("m4 max").gpu.memory_bytes
    assert doc["margin_bytes"] == budget - 2**29 - doc["bytes"]["total"]  # less 0.5 headroom
