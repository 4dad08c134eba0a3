"""``quants check-log`` in a subprocess: its JSON contract, errors and the real llama-server logs
(tests/fixtures/llamacpp/logs) against the measured synthetic models (tests/fixtures/shared.py).
The parser and comparison themselves are tested in-process in tests/unit/test_checklog.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.base.units import MIB
from tests.cli import clean_env, run_quants
from tests.fixtures.llamacpp.logs import render, strip_buffers
from tests.fixtures.llamacpp.models import load_rows
from tests.schemas import checked

ROWS = load_rows()
LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "logs"

# Real llama-server -lv 4 logs (branch measure: llama.cpp 0c1e57098 "p2/p3" and upstream 3f545becc
# "up"), of the synthetic real-size models tools/measure_server.py writes.
# log -> (model, extra check-log flags, agrees)
REAL = {
    "p2-lv4-llama8b-ngl-all.log": ("llama8b", (), True),
    "up-lv4-llama8b-ngl-all.log": ("llama8b", (), True),
    "p2-lv4-qwen36-27b-q4_0-262k.log": ("qwen36-27b", (), True),
    "p2-lv4-gemma3-12b-mmproj-text.log": ("gemma3-12b", (), True),
    "p3-lv4-gemma3-12b-mmproj-image.log": ("gemma3-12b", (), True),
    "p2-lv4-qwen36-35b-a3b-ncmoe20.log": ("qwen36-35b-a3b", ("--n-cpu-moe", "20"), True),
    "up-lv4-qwen36-35b-a3b-ncmoe20.log": ("qwen36-35b-a3b", ("--n-cpu-moe", "20"), True),
    "p2-lv4-qwen36-35b-a3b-cpumoe.log": ("qwen36-35b-a3b", ("--cpu-moe",), True),
    # Partial offload: the log's "offloaded 16/33 layers" is the run's -ngl 16.
    "p2-lv4-llama8b-ngl16.log": ("llama8b", (), True),
    "p2-lv4-qwen36-27b-q4_0-65k-ngl32.log": ("qwen36-27b", (), True),
    "up-lv4-qwen36-27b-q4_0-65k-ngl32.log": ("qwen36-27b", (), True),
    "p3-lv4-gemma3-12b-mmproj-image-ngl24.log": ("gemma3-12b", (), True),
    "p2-lv4-llama8b-ngl0.log": ("llama8b", (), True),
    # MTP drafting (pass 4): a draft context with its own cache and compute buffer, partial
    # offload with the nextn block on the GPU (ngl32) and on the CPU (ngl1, ngl0).
    "p4-mtp-lv4-qwen36-27b-q4_0-256k-mtp.log": ("qwen36-27b", (), True),
    "p4-mtp-lv4-qwen36-27b-q4_0-64k-mtp-ngl1.log": ("qwen36-27b", (), True),
    "p4-mtp-lv4-qwen36-27b-q4_0-64k-mtp-ngl32.log": ("qwen36-27b", (), True),
    "p4-mtp-host-lv4-qwen36-27b-q4_0-64k-mtp-ngl0.log": ("qwen36-27b", (), True),
    "p4-mtp-host-lv4-qwen36-35b-a3b-q4_0-64k-mtp-ngl1.log": ("qwen36-35b-a3b", (), True),
    # A quantized partial run past the trained context (pass 5).
    "p5-validate-lv4-llama8b-q4_0-256k-ngl32.log": ("llama8b", (), True),
    "p4-mtp-lv4-qwen36-35b-a3b-q4_0-128k-mtp-ncmoe20.log": (
        "qwen36-35b-a3b",
        ("--n-cpu-moe", "20"),
        True,
    ),
}


def test_cli_json_contract_and_errors(measured_models, tmp_path):
    path = measured_models.path("llama")
    env = clean_env(tmp_path)
    log = tmp_path / "server.log"
    log.write_text(render(ROWS[0], str(path), 16, fmt="new"))
    out = run_quants("check-log", str(log), "--json", env=env)
    assert out.returncode == 0, out.stderr
    data = checked("check-log", out.stdout)
    assert set(data["config"]) == {
        "ctx", "type_k", "type_v", "flash_attn", "n_seq", "ubatch", "n_gpu_layers"
    }  # fmt: skip
    assert set(data["buffers"][0]) == {"name", "device", "logged_bytes", "predicted_bytes"}
    assert {"logged_bytes", "predicted_bytes", "diff_bytes", "diff_pct"} <= set(data["total"])
    assert data["total"]["within_tolerance"] is True
    text = run_quants("check-log", str(log), env=env)
    assert "agrees" in text.stdout and "model" in text.stdout
    # --model wins over the path in the log (here: a path that does not exist)
    moved = tmp_path / "moved.log"
    moved.write_text(render(ROWS[0], "/nowhere/llama.gguf", 16))
    out = run_quants("check-log", str(moved), env=env)
    assert out.returncode == 2 and "--model" in out.stderr and "Traceback" not in out.stderr
    assert run_quants("check-log", str(moved), "--model", str(path), env=env).returncode == 0
    quiet = tmp_path / "quiet.log"
    quiet.write_text(strip_buffers(render(ROWS[0], str(path), 16, fmt="new")))
    out = run_quants("check-log", str(quiet), env=env)
    assert out.returncode == 1 and "-lv 4" in out.stderr
    assert len(out.stderr.strip().splitlines()) <= 2 and "Traceback" not in out.stderr
    missing = run_quants("check-log", str(tmp_path / "none.log"), env=env)
    assert missing.returncode == 2 and "cannot read" in missing.stderr


@pytest.mark.parametrize("log", sorted(LOGS.glob("*-lv3-*.log")), ids=lambda p: p.name)
def test_real_default_verbosity_logs_ask_for_lv4(log, tmp_path):
    # Real llama-server logs (branch measure, 0c1e57098, default -lv 3): no buffers are printed.
    out = run_quants("check-log", str(log), env=clean_env(tmp_path))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "verbosity 3" in out.stderr and "-lv 4" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def server_models(tmp_path_factory):
    from tests.fixtures.llamacpp.tools import tool_module

    mod = tool_module("measure_server")
    tmp = tmp_path_factory.mktemp("server-models")
    return {name: mod.write_model(name, tmp) for name in {m for m, _, _ in REAL.values()}}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_lv4_logs(name, server_models, tmp_path):
    model, flags, agrees = REAL[name]
    out = run_quants(
        "check-log", str(LOGS / name), "--model", str(server_models[model]), *flags, "--json",
        env=clean_env(tmp_path),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    data = checked("check-log", out.stdout)
    assert data["total"]["within_tolerance"] is agrees, data["total"]
    rows = {(b["name"], b["device"]): b for b in data["buffers"]}
    assert agrees
    # Weights and caches are exact to the log's rounding (2 decimals of MiB), on the GPU's share
    # too when only some layers were offloaded.
    # (With -ngl 0 the GPU holds no weights or cache: the log has no such buffers.)
    compared = [key for key in (("model", "CUDA0"), ("kv", "CUDA0")) if key in rows]
    assert compared or "ngl0" in name
    for key in compared:
        assert abs(rows[key]["predicted_bytes"] - rows[key]["logged_bytes"]) < 0.01 * MIB
