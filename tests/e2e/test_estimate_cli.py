"""``quants estimate`` in a subprocess: JSON and advice, an invalid configuration, a Hub quant
(emulated Hub). The memory model itself is tested in-process in tests/unit/test_fit.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cli import run_quants
from tests.schemas import checked


@pytest.fixture(scope="module")
def qwen36_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.fixtures.llamacpp.models import measure_module

    mod = measure_module()
    path = tmp_path_factory.mktemp("cli") / "Qwen3.6-27B-UD-Q3_K_XL.gguf"
    return mod.write_model(mod.qwen36_27b_ud_q3_k_xl(n_vocab=248320), path)


def _quants(*args: str) -> subprocess.CompletedProcess[str]:
    return run_quants(*args, env=dict(os.environ), timeout=120)


def test_cli_estimate_json_and_advice(qwen36_file):
    out = _quants(
        "estimate", str(qwen36_file), "--ctx", "262144", "--cache-type-k", "q4_0",
        "--flash-attn", "on", "--vram", "24", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    data = checked("estimate", out.stdout)
    assert data["fits"] is False and data["margin_bytes"] < 0
    assert data["bytes"]["kv"] == 16 * 262144 * (576 + 2048)
    assert data["bytes"]["total"] == sum(v for k, v in data["bytes"].items() if k != "total")
    assert 0 < data["max_ctx"] < 262144
    assert "-ctk q4_0 -ctv q4_0" in data["alternatives"][0]["command"]
    assert data["command"].endswith("-fa on -ctk q4_0 -np 1")

    human = _quants("estimate", str(qwen36_file), "--ctx", "262144", "--cache-type-k", "q4_0",
                    "--vram", "24")  # fmt: skip
    assert human.returncode == 0
    assert "does NOT fit" in human.stdout and "-ctk q4_0 -ctv q4_0" in human.stdout


def test_cli_estimate_rejects_invalid_config(qwen36_file):
    out = _quants("estimate", str(qwen36_file), "--ctx", "4096", "--cache-type-v", "q4_0",
                  "--flash-attn", "off")  # fmt: skip
    assert out.returncode == 1
    assert "flash attention" in out.stderr and "Traceback" not in out.stderr


def test_cli_estimate_from_the_hub(tmp_path, world_cache):
    """A Hub quant reference (emulated Hub): the header is read over HTTP, the command is -hf."""
    import os

    from tests.fixtures.world import REAL_WORLD, populate
    from tests.hub_emulator.server import HubEmulator

    emulator = HubEmulator()
    populate(emulator.state, world_cache, REAL_WORLD[:1])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUANTS_", "HF_"))}
    env.update(HF_HOME=str(tmp_path), QUANTS_DATA_DIR=str(tmp_path / "data"))
    with emulator:
        env["QUANTS_HF_ENDPOINT"] = emulator.endpoint
        out = run_quants(
            "estimate", "unsloth/Qwen3.6-27B-MTP-GGUF:UD-Q4_K_XL",
            "--ctx", "262144", "--cache-type-k", "q4_0", "--cache-type-v", "q4_0", "--mtp",
            "--vram", "24", "--json", env=env, timeout=120,
        )  # fmt: skip
    assert out.returncode == 0, out.stderr
    data = checked("estimate", out.stdout)
    assert data["architecture"] == "qwen35" and data["mtp"] is True
    assert data["bytes"]["mtp_kv"] == 262144 * 4 * 256 * 2 * 2  # one nextn layer, f16 draft KV
    assert data["command"].startswith("llama-server -hf unsloth/Qwen3.6-27B-MTP-GGUF")
    assert "--spec-type draft-mtp" in data["command"] and "-m " not in data["command"]
