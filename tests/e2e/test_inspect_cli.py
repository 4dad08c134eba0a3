"""``quants inspect`` in a subprocess: a local file (JSON, table, errors) and a Hub quant."""

from __future__ import annotations

import os

from tests import synth
from tests.cli import run_quants
from tests.schemas import checked


def test_inspect_command_json_and_table(tmp_path):
    path = synth.write_gguf(
        tmp_path / "Qwen3.6-27B-MTP-UD-Q4_K_XL.gguf",
        synth.preset("qwen35"),
        synth.ud_bad_mxfp4_attn(),
    )[0]
    env = dict(os.environ)
    out = run_quants("inspect", str(path), "--json", "--tensors", env=env)
    assert out.returncode == 0, out.stderr
    data = checked("inspect", out.stdout)
    assert data["quant_label"] == "UD-Q4_K_XL" and data["attention"]["preserved"] is False
    assert data["tensors"] and data["requests"] >= 1
    assert (
        "named UD/Dynamic but attention is 4-bit (below 6-bit, the precision a dynamic mix keeps"
        " attention at)"
    ) in data["claims"]
    table = run_quants("inspect", str(path), env=env).stdout
    assert table.startswith("! named UD/Dynamic but attention is 4-bit")
    assert "linear_attn" in table and "MXFP4" in table
    bad = run_quants("inspect", str(tmp_path / "nope.gguf"), env=env)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    (tmp_path / "junk.gguf").write_bytes(b"<html>no</html>")
    bad = run_quants("inspect", str(tmp_path / "junk.gguf"), env=env)
    assert bad.returncode == 1 and "not a GGUF file" in bad.stderr


def test_inspect_command_on_a_hub_quant(shared_hub):
    env = {**os.environ, "QUANTS_HF_ENDPOINT": shared_hub.endpoint}
    env.pop("HF_TOKEN", None)
    out = run_quants("inspect", "ggml-org/Qwen3.6-27B-GGUF:Q4_0", "--json", env=env)
    assert out.returncode == 0, out.stderr
    data = checked("inspect", out.stdout)
    assert data["source"] == "ggml-org/Qwen3.6-27B-GGUF/Qwen3.6-27B-Q4_0.gguf"
    assert len(data["revision"]) == 40 and data["mtp"]["state"] == "sidecar"
    assert data["bytes_fetched"] >= data["header_bytes"] > 0 and data["requests"] >= 1
