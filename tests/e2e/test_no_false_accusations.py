"""Truncation, shards, check-log on CPU runs and messages, on real files where there are some
(tests/corpus) and through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawler.base.units import MIB
from crawler.fit import RunConfig
from crawler.fit.llamalog import LogConfig
from crawler.library.checklog import CheckReport
from tests import synth
from tests.cli import clean_env, run_quants
from tests.unit.test_source import RangeServer

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "logs"


@pytest.fixture
def env(tmp_path):
    return clean_env(tmp_path)


def _json(env, *args):
    out = run_quants(*args, "--json", env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# 4. A truncated file is never "loads", and estimate refuses it saying why.
def test_a_truncated_file_does_not_load_and_is_not_estimated(real_corpus, env):
    part = str(real_corpus.r1_part)  # the first 99.6 MB of a 4.68 GB Q4_K_M
    data = _json(env, "inspect", part)
    assert data["loadable_by_mainline"] is False
    assert data["claims"] == [c for c in data["claims"] if "truncated" in c] != []
    text = run_quants("inspect", part, env=env).stdout
    assert "CANNOT load (the file ends before its tensors' data)" in text and "loads\n" not in text
    out = run_quants("estimate", part, "--ctx", "4096", env=env)
    assert out.returncode != 0 and "llama-server" not in out.stdout
    assert "is truncated: it has 99,614,720 bytes" in out.stderr
    assert "not within the file bounds" in out.stderr and "Traceback" not in out.stderr
    # The whole file estimates (the Gemma file's header with its real size).
    ok = run_quants("estimate", str(real_corpus.gemma), "--ctx", "4096", env=env)
    assert ok.returncode == 0 and "llama-server" in ok.stdout


# 5. Over HTTP the known size is compared with what the header needs; parts join by size.
def test_http_reads_see_truncation_and_join_parts(real_corpus, tmp_path, env):
    root = tmp_path / "www"
    root.mkdir()
    (root / "r1-Q4_K_M.gguf").symlink_to(real_corpus.r1_part)
    for i, part in enumerate(real_corpus.gemma_parts, start=1):
        (root / f"gemma-3-270m-Q4_K_M.gguf.part{i}of4").symlink_to(part)
    (root / "gemma-3-270m-Q4_K_M-first-part-only.gguf").symlink_to(real_corpus.gemma_parts[0])
    with RangeServer(root) as server:
        cut = _json(env, "inspect", f"{server.url}/r1-Q4_K_M.gguf")
        assert cut["size_bytes"] == 99_614_720 and cut["loadable_by_mainline"] is False
        assert any("truncated" in c for c in cut["claims"])
        alone = _json(env, "inspect", f"{server.url}/gemma-3-270m-Q4_K_M-first-part-only.gguf")
        assert any("truncated" in c for c in alone["claims"]) and not alone["loadable_by_mainline"]
        joined = _json(env, "inspect", f"{server.url}/gemma-3-270m-Q4_K_M.gguf.part1of4")
        assert joined["size_bytes"] == real_corpus.gemma.stat().st_size
        assert joined["claims"] == [] and joined["loadable_by_mainline"] is True
        late = run_quants("inspect", f"{server.url}/gemma-3-270m-Q4_K_M.gguf.part2of4", env=env)
        assert late.returncode == 2 and "the header is in" in late.stderr


# 6. A file is a shard when its split.* keys say so, not because of its name.
def test_a_whole_file_with_a_split_name_loads(tmp_path, env):
    (whole,) = synth.write_gguf(tmp_path / "w.gguf", synth.preset("llama"), synth.q4_k_m_like())
    named = tmp_path / "Llama-Q4_K_M-00001-of-00002.gguf"
    whole.rename(named)
    data = _json(env, "inspect", str(named))
    assert data["claims"] == [] and data["loadable_by_mainline"] is True
    assert data["size_bytes"] == named.stat().st_size
    est = run_quants("estimate", str(named), "--ctx", "4096", env=env)
    assert est.returncode == 0 and "-00001-of-00002.gguf" in est.stdout
    # A real shard (split.count = 2 in its keys) without its sibling is still refused.
    (tmp_path / "s").mkdir()
    shards = synth.write_gguf(
        tmp_path / "s" / "G-Q4_K_M.gguf", synth.preset("llama"), synth.q4_k_m_like(), split=2
    )
    shards[1].unlink()
    out = run_quants("inspect", str(shards[0]), env=env)
    assert out.returncode == 2 and "missing shard" in out.stderr


@pytest.fixture(scope="module")
def llama8b(tmp_path_factory):
    from tests.fixtures.llamacpp.tools import tool_module

    return tool_module("measure_server").write_model("llama8b", tmp_path_factory.mktemp("m"))


def test_check_log_reads_a_split_named_whole_model(llama8b, tmp_path, env):
    named = tmp_path / "llama8b-00001-of-00002.gguf"
    named.symlink_to(llama8b)
    log = LOGS / "p2-lv4-llama8b-ngl-all.log"
    data = _json(env, "check-log", str(log), "--model", str(named))
    assert data["total"]["within_tolerance"] is True


# 7. check-log estimates the configuration the log ran: -ngl 0 keeps weights and KV on the host.
def test_check_log_on_an_ngl0_run_predicts_the_host_buffers(llama8b, env):
    data = _json(env, "check-log", str(LOGS / "p2-lv4-llama8b-ngl0.log"), "--model", str(llama8b))
    rows = {(b["name"], b["device"]): b for b in data["buffers"]}
    for key in (("model", "CPU_Mapped"), ("kv", "CPU")):
        logged, predicted = rows[key]["logged_bytes"], rows[key]["predicted_bytes"]
        assert predicted is not None and abs(predicted - logged) < 0.01 * MIB, key
    assert data["total"]["scope"] == "GPU" and data["total"]["within_tolerance"] is True


def test_check_log_without_any_gpu_buffer_is_a_cpu_run(llama8b, tmp_path, env):
    # The real -ngl 0 log with every GPU line taken out (devices, offload lines, the GPU's
    # compute buffers and breakdown row): what is left is host buffers only, as a CPU build logs.
    lines = (LOGS / "p2-lv4-llama8b-ngl0.log").read_text().splitlines()
    kept = [ln for ln in lines if "CUDA" not in ln and "offload" not in ln]
    log = tmp_path / "cpu.log"
    log.write_text("\n".join(kept) + "\n")
    data = _json(env, "check-log", str(log), "--model", str(llama8b))
    assert data["config"]["n_gpu_layers"] is None
    assert data["total"]["scope"] == "host" and data["total"]["n_compared"] == 3
    rows = {(b["name"], b["device"]): b for b in data["buffers"]}
    assert set(rows) == {("model", "CPU_Mapped"), ("kv", "CPU"), ("output", "CPU")}
    assert all(abs(b["predicted_bytes"] - b["logged_bytes"]) < 0.01 * MIB for b in rows.values())
    assert data["total"]["within_tolerance"] is True
    assert any("CPU-only run (-ngl 0" in n for n in data["notes"])
    text = run_quants("check-log", str(log), "--model", str(llama8b), env=env).stdout
    assert "None/None" not in text and "-ngl 0 (no GPU buffer logged)" in text
    assert "total (host)" in text


def test_no_verdict_on_an_empty_comparison():
    cfg = LogConfig()
    empty = CheckReport(cfg, RunConfig(ctx=4096), (), 0, 0, n_compared=0)
    assert empty.within_tolerance is None
    assert empty.to_json()["total"]["within_tolerance"] is None


# 8. A big-endian header says it is big-endian, not that the download was cut.
def test_big_endian_message(tmp_path, env):
    data = synth.header_bytes(synth.preset("llama"), synth.q8_0(), big_endian=True)
    path = tmp_path / "Llama-Q8_0-be.gguf"
    path.write_bytes(data)
    out = run_quants("inspect", str(path), env=env)
    assert out.returncode != 0 and "big-endian" in out.stderr
    assert "cut" not in out.stderr and "fetched again" not in out.stderr
    assert "Traceback" not in out.stderr


# 9. --tensors shows each layer's attention kind.
def test_tensors_show_the_attention_kind(real_corpus, env):
    text = run_quants("inspect", str(real_corpus.gemma), "--tensors", env=env).stdout
    table = text.split("layer  attention")[1].split("\n\n")[0]
    kinds = [line.split()[1] for line in table.splitlines()[2:]]
    assert len(kinds) == 18
    assert kinds.count("sliding-window") == 15 and kinds.count("full") == 3
    assert [i for i, k in enumerate(kinds) if k == "full"] == [5, 11, 17]


def test_tensors_show_recurrent_layers(tmp_path, env):
    (path,) = synth.write_gguf(
        tmp_path / "Q-Q4_K_M.gguf", synth.preset("qwen35"), synth.q4_k_m_like()
    )
    text = run_quants("inspect", str(path), "--tensors", env=env).stdout
    table = text.split("layer  attention")[1].split("\n\n")[0]
    kinds = {line.split()[1] for line in table.splitlines()[2:]}
    assert {"recurrent", "full"} <= kinds and "attention" not in kinds


def test_hub_split_named_whole_file_is_read_as_one(hub, tmp_path):
    from crawler.base.config import Settings
    from crawler.base.errors import HubNotFound
    from crawler.hub import HubClient
    from crawler.library.targets import read_target
    from tests.hub_emulator.state import Blob

    (whole,) = synth.write_gguf(tmp_path / "w.gguf", synth.preset("llama"), synth.q4_k_m_like())
    shards = synth.write_gguf(
        tmp_path / "S-Q4_K_M.gguf", synth.preset("llama"), synth.q4_k_m_like(), split=2
    )
    hub.state.create_repo(
        "someone/Split-Named-GGUF",
        {
            "M-Q4_K_M-00001-of-00002.gguf": Blob.from_bytes(whole.read_bytes(), lfs=True),
            shards[0].name: Blob.from_bytes(shards[0].read_bytes(), lfs=True),
        },
    )
    settings = Settings(hf_endpoint=hub.endpoint)
    client = HubClient(settings, sleep=lambda s: None)
    read = read_target(
        "someone/Split-Named-GGUF/M-Q4_K_M-00001-of-00002.gguf", settings, hub=client
    )
    assert read.shards == ("M-Q4_K_M-00001-of-00002.gguf",)
    assert read.size_bytes == whole.stat().st_size and not read.header.data_truncated
    with pytest.raises(HubNotFound, match="missing shard"):
        read_target(f"someone/Split-Named-GGUF/{shards[0].name}", settings, hub=client)
