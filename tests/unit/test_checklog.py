"""``quants check-log``: llama.cpp logs (0c1e57098 and current formats) against the estimate.

The logs are rendered from measured runs (tests/fixtures/llamacpp: llama.cpp's own MiB figures)
in both log formats (tests/fixtures/llamacpp/logs.py); the models are the measured synthetic
files, written here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawler.checklog import compare, run_config
from crawler.fit import coefficients, estimate
from crawler.fit.llamalog import LogError, parse_log
from crawler.units import MIB
from tests.cli import clean_env, run_quants
from tests.fixtures.llamacpp.logs import render, strip_buffers
from tests.fixtures.llamacpp.models import load_rows, measure_module, read_header
from tests.schemas import checked

ROWS = load_rows()
# llama, gemma3 (SWA: two KV buffers), qwen35 (RS buffer), deepseek2 (MLA), -np 4 split and
# unified, FA off, MTP draft context (a second llama_context).
PICKED = [0, 32, 48, 64, 112, 113, 114, 96, 136, 137, 138]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    mod = measure_module()
    out = {}
    tmp = tmp_path_factory.mktemp("models")
    for i in PICKED:
        name = ROWS[i]["config"]["model"]
        if name not in out:
            path = mod.write_model(mod.MODELS[name](), tmp / f"{name}.gguf")
            h = read_header(path)
            out[name] = (path, h, coefficients(h))
    return out


def _check(row, models, fmt):
    path, header, c = models[row["config"]["model"]]
    n_layers = header.metadata[f"{header.architecture}.block_count"]
    experts = tuple(
        sorted({int(t.name.split(".")[1]) for t in header.tensors if "_exps." in t.name})
    )
    parsed = parse_log(render(row, str(path), n_layers, fmt=fmt, expert_layers=experts))
    run, notes = run_config(parsed.config, c, str(path))
    return parsed, compare(parsed, c, estimate(c, run), notes)


@pytest.mark.parametrize("fmt", ["old", "new"])
@pytest.mark.parametrize("index", PICKED)
def test_logged_runs_agree_with_the_estimate(index, fmt, models):
    row = ROWS[index]
    parsed, report = _check(row, models, fmt)
    cfg = row["config"]
    assert parsed.config.ctx == row["result"]["n_ctx"]
    assert (parsed.config.type_k, parsed.config.type_v) == (cfg["ctk"], cfg["ctv"])
    assert report.run.parallel == (None if cfg.get("unified") else cfg.get("np", 1))
    assert report.run.mtp == bool(cfg.get("mtp"))
    ncmoe = cfg.get("ncmoe", 0)
    assert (report.run.cpu_moe, report.run.n_cpu_moe) == (ncmoe == -1, max(ncmoe, 0))
    assert report.within_tolerance, report.to_json()
    rows = {(b.name, b.device): b for b in report.buffers}
    # The exact components agree to the log's rounding (2 decimals of MiB: +-5 KiB per line).
    lines = len(row["log"]["kv_mib"])
    kv = rows[("kv", "CUDA0")]
    assert abs(kv.predicted_bytes - kv.logged_bytes) <= lines * 0.005 * MIB
    model = rows[("model", "CUDA0")]
    assert abs(model.predicted_bytes - model.logged_bytes) <= 0.005 * MIB
    if row["log"]["rs_mib"]:
        rs = rows[("rs", "CUDA0")]
        assert abs(rs.predicted_bytes - rs.logged_bytes) <= len(row["log"]["rs_mib"]) * 0.005 * MIB


def test_the_memory_breakdown_alone_is_compared(models):
    row = ROWS[0]
    path, _, c = models["llama"]
    text = render(row, str(path), 16, fmt="new")
    only = "".join(ln for ln in text.splitlines(True) if "buffer size" not in ln)
    parsed = parse_log(only)
    assert not parsed.buffers and parsed.breakdown
    run, notes = run_config(parsed.config, c, str(path))
    report = compare(parsed, c, estimate(c, run), notes)
    assert report.source == "breakdown" and report.within_tolerance
    names = {(b.name, b.device) for b in report.buffers}
    assert {("model", "CUDA0"), ("context", "CUDA0"), ("compute", "CUDA0")} <= names


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "not a llama.cpp log"),
        ("hello world\nnothing to see\n", "not a llama.cpp log"),
        ("\x00\xff\x1b[31m garbage", "not a llama.cpp log"),
    ],
)
def test_foreign_text_is_refused(text, needle):
    with pytest.raises(LogError, match=needle):
        parse_log(text)


def test_cut_and_quiet_logs_say_what_is_missing(models):
    path, _, _ = models["llama"]
    text = render(ROWS[0], str(path), 16, fmt="new")
    cut = text[: text.index("llama_context: n_seq_max")]
    with pytest.raises(LogError, match=r"ends before llama\.cpp created its context"):
        parse_log(cut)
    with pytest.raises(LogError, match=r"-lv 4"):
        parse_log(strip_buffers(text))


def test_cli_json_contract_and_errors(models, tmp_path):
    path, _, _ = models["llama"]
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


LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "logs"


@pytest.mark.parametrize("log", sorted(LOGS.glob("*-lv3-*.log")), ids=lambda p: p.name)
def test_real_default_verbosity_logs_ask_for_lv4(log, tmp_path):
    # Real llama-server logs (branch measure, 0c1e57098, default -lv 3): no buffers are printed.
    out = run_quants("check-log", str(log), env=clean_env(tmp_path))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "verbosity 3" in out.stderr and "-lv 4" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_training_context_overflow_is_noted(models):
    path, _, c = models["llama"]
    warn = (
        "0.0 W llama_context: n_ctx_seq (4096) > n_ctx_train (2048)"
        " -- possible training context overflow\n"
    )
    parsed = parse_log(warn + render(ROWS[0], str(path), 16, fmt="new"))
    assert parsed.config.n_ctx_train == 2048
    _, notes = run_config(parsed.config, c, str(path))
    assert any("above the trained context 2048" in n for n in notes)


def test_real_log_tail_without_its_start_is_refused():
    # The last lines of a real -lv 4 run (server-measurements.jsonl index 20, branch measure):
    # a projector compute buffer and the memory breakdown, but not the start of the run.
    rows = [json.loads(line) for line in (LOGS.parent / "server-measurements.jsonl").open()]
    tail = next(r["log_tail"] for r in rows if r.get("index") == 20 and "log_tail" in r)
    assert "memory_breakdown_print" in tail
    with pytest.raises(LogError, match="lacks its beginning"):
        parse_log(tail)


def test_projector_buffers_are_left_out(models):
    path, _, c = models["llama"]
    clip = "0.0 I reserve_compute_meta:      CUDA0 compute buffer size =   121.25 MiB\n"
    text = render(ROWS[0], str(path), 16, fmt="new")
    parsed = parse_log(text + clip)
    run, notes = run_config(parsed.config, c, str(path))
    report = compare(parsed, c, estimate(c, run), notes)
    plain = compare(parse_log(text), c, estimate(c, run), notes)
    assert report.logged_total == plain.logged_total
    assert any("projector" in n for n in report.notes)


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


def test_a_context_reserving_twice_holds_one_compute_buffer():
    """The MTP draft context prints its sched_reserve twice (a second graph); ggml re-sizes the
    one buffer, so the larger size counts once, beside the target context's own."""
    parsed = parse_log((LOGS / "p4-mtp-lv4-qwen36-27b-q4_0-256k-mtp.log").read_text())
    cuda = [b.mib for b in parsed.buffers if b.kind == "compute" and b.device == "CUDA0"]
    assert cuda == [1360.28, 324.02]  # the log prints 1360.28, 324.02, 324.02
    host = [b.mib for b in parsed.buffers if b.kind == "compute" and b.device == "CUDA_Host"]
    assert host == [276.28, 276.02]


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
