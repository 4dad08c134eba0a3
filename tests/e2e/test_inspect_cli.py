"""``quants inspect`` in a subprocess: a local file (JSON, table, errors) and a Hub quant."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import synth
from tests.schemas import checked

ROOT = Path(__file__).resolve().parents[2]


def test_inspect_command_json_and_table(tmp_path):
    path = synth.write_gguf(
        tmp_path / "Qwen3.6-27B-MTP-UD-Q4_K_XL.gguf",
        synth.preset("qwen35"),
        synth.ud_bad_mxfp4_attn(),
    )[0]
    cmd = [sys.executable, "-m", "crawler", "inspect", str(path)]
    out = subprocess.run(
        [*cmd, "--json", "--tensors"], capture_output=True, text=True, cwd=ROOT, check=True
    )
    data = checked("inspect", out.stdout)
    assert data["quant_label"] == "UD-Q4_K_XL" and data["attention"]["preserved"] is False
    assert data["tensors"] and data["requests"] >= 1
    assert (
        "named UD/Dynamic but attention is 4-bit (below 6-bit, the precision a dynamic mix keeps"
        " attention at)"
    ) in data["claims"]
    table = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert table.startswith("! named UD/Dynamic but attention is 4-bit")
    assert "linear_attn" in table and "MXFP4" in table
    bad = subprocess.run(
        [*cmd[:-1], str(tmp_path / "nope.gguf")], capture_output=True, text=True, cwd=ROOT
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    (tmp_path / "junk.gguf").write_bytes(b"<html>no</html>")
    bad = subprocess.run(
        [*cmd[:-1], str(tmp_path / "junk.gguf")], capture_output=True, text=True, cwd=ROOT
    )
    assert bad.returncode == 1 and "not a GGUF file" in bad.stderr


def test_inspect_command_on_a_hub_quant(shared_hub):
    env = {**os.environ, "QUANTS_HF_ENDPOINT": shared_hub.endpoint}
    env.pop("HF_TOKEN", None)
    out = subprocess.run(
        [sys.executable, "-m", "crawler", "inspect", "ggml-org/Qwen3.6-27B-GGUF:Q4_0", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=True,
    )
    data = checked("inspect", out.stdout)
    assert data["source"] == "ggml-org/Qwen3.6-27B-GGUF/Qwen3.6-27B-Q4_0.gguf"
    assert len(data["revision"]) == 40 and data["mtp"]["state"] == "sidecar"
    assert data["bytes_fetched"] >= data["header_bytes"] > 0 and data["requests"] >= 1
