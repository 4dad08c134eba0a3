"""``quants check-log``: llama.cpp logs (0c1e57098 and current formats) against the estimate.

The logs are rendered from measured runs (tests/fixtures/llamacpp: llama.cpp's own MiB figures)
in both log formats (tests/fixtures/llamacpp/logs.py); the models are the measured synthetic
files (the session's ``measured_models``). The command itself: tests/e2e/test_checklog_cli.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawler.base.units import MIB
from crawler.fit import coefficients, estimate
from crawler.fit.llamalog import LogError, parse_log
from crawler.library.checklog import compare, run_config
from tests.fixtures.llamacpp.logs import render, strip_buffers
from tests.fixtures.llamacpp.models import load_rows

ROWS = load_rows()
# llama, gemma3 (SWA: two KV buffers), qwen35 (RS buffer), deepseek2 (MLA), -np 4 split and
# unified, FA off, MTP draft context (a second llama_context).
PICKED = [0, 32, 48, 64, 112, 113, 114, 96, 136, 137, 138]


@pytest.fixture(scope="module")
def models(measured_models):
    out = {}
    for i in PICKED:
        name = ROWS[i]["config"]["model"]
        if name not in out:
            h = measured_models.header(name)
            out[name] = (measured_models.path(name), h, coefficients(h))
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


LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "logs"


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


def test_a_context_reserving_twice_holds_one_compute_buffer():
    """The MTP draft context prints its sched_reserve twice (a second graph); ggml re-sizes the
    one buffer, so the larger size counts once, beside the target context's own."""
    parsed = parse_log((LOGS / "p4-mtp-lv4-qwen36-27b-q4_0-256k-mtp.log").read_text())
    cuda = [b.mib for b in parsed.buffers if b.kind == "compute" and b.device == "CUDA0"]
    assert cuda == [1360.28, 324.02]  # the log prints 1360.28, 324.02, 324.02
    host = [b.mib for b in parsed.buffers if b.kind == "compute" and b.device == "CUDA_Host"]
    assert host == [276.28, 276.02]
