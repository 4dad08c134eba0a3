"""Decode speed and draft acceptance read from real llama-server logs (crawler.fit.speedlog), and
check-log's speed comparison."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawler.fit.speedlog import parse_timings
from crawler.ranking.speed import expected_tokens, per_token_acceptance
from tests.cli import clean_env, run_quants
from tests.fixtures.llamacpp.speed import FIXTURE

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "logs"
SPEED_LOGS = sorted((LOGS / "speed").glob("*.log"))


def _row(log: Path) -> dict[str, object]:
    """The fixture row of a pN-III-mtp-MODEL.log (pass N, job III)."""
    pass_no, job = int(log.name[1]), int(log.name.split("-")[1])
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    return next(r for r in rows if r["pass"] == pass_no and r["job"] == job)


@pytest.mark.parametrize("log", SPEED_LOGS, ids=lambda p: p.name)
def test_the_last_request_matches_the_servers_own_timings(log):
    t = parse_timings(log.read_text())
    row = _row(log)
    assert t is not None
    assert t.tok_s == pytest.approx(row["tok_s"], abs=0.01)  # the log rounds to 2 decimals
    assert t.n_tokens == 256
    assert t.draft_generated == row["draft_n"] and t.draft_accepted == row["draft_n_accepted"]
    if row["k"]:
        assert t.mean_len is not None and t.acceptance is not None
        # alpha 0 / 1: nothing / everything accepted
        if row["alpha"] == 0.0:
            assert t.draft_accepted == 0 and t.mean_len == 1.0
        if row["alpha"] == 1.0:
            assert t.draft_accepted == t.draft_generated
    else:
        assert t.acceptance is None


def test_json_form_and_text_without_timings():
    body = '{"timings": {"predicted_n": 256, "predicted_per_second": 106.88, "draft_n": 265,'
    body += ' "draft_n_accepted": 165}}'
    t = parse_timings(body)
    assert t is not None and t.tok_s == 106.88 and t.acceptance == pytest.approx(165 / 265)
    assert parse_timings("llama_model_loader: loaded meta data") is None
    # prompt eval lines alone are not decode timings
    assert (
        parse_timings(
            "prompt eval time = 10.0 ms / 5 tokens (2.0 ms per token, 500.0 tokens per second)"
        )
        is None
    )


def test_acceptance_from_mean_length_round_trips():
    for a in (0.0, 0.3, 0.789, 0.95, 1.0):
        for k in (1, 3, 5):
            assert per_token_acceptance(expected_tokens(a, k), k) == pytest.approx(a, abs=1e-6)


def test_check_log_reports_measured_and_predicted_decode_speed(tmp_path):
    from tests.fixtures.llamacpp.tools import tool_module

    model = tool_module("measure_server").write_model("qwen36-27b", tmp_path / "m")
    log = LOGS / "p2-lv4-qwen36-27b-q4_0-262k.log"
    env = clean_env(tmp_path)
    out = run_quants("check-log", str(log), "--model", str(model), "--gpu", "H200 SXM", "--json",
                     env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    speed = json.loads(out.stdout)["speed"]
    assert speed["measured"]["tok_s"] == 52.57  # "eval time = ... 52.57 tokens per second"
    assert speed["gpu"].startswith("H200") and speed["basis"].startswith("measured GPU class")
    assert speed["predicted_tok_s"] > 0
    assert speed["diff_pct"] == pytest.approx(100 * (speed["predicted_tok_s"] / 52.57 - 1), abs=0.2)
    text = run_quants("check-log", str(log), "--model", str(model), env=env)
    assert "decode: measured 52.6 tok/s" in text.stdout and "--gpu" in text.stdout


def test_label_type_mix():
    from crawler.ranking.speed import label_type_mix

    assert label_type_mix("Q8_0") == (("Q8_0", 1.0),)
    assert label_type_mix("IQ4_XS") == (("IQ4_XS", 1.0),)
    assert label_type_mix("Q4_K_M") == (("Q4_K", 0.75), ("Q6_K", 0.25))
    assert label_type_mix("UD-Q3_K_XL") == (("IQ3_XXS", 0.5), ("Q6_K", 0.5))
    assert label_type_mix("UD-Q4_K_XL") == (("Q4_K", 0.5), ("Q6_K", 0.5))
    assert label_type_mix("BF16") == () and label_type_mix(None) == ()


def test_the_search_path_predicts_the_seed_setup(tmp_path):
    """What search computes for the seed's file (coefficients from its header, the type mix
    from its label; no per-type bytes) against the measured H200 rows of the same file."""
    import dataclasses

    from crawler.fit import RunConfig, coefficients
    from crawler.ranking.evaluate import speed_inputs
    from crawler.ranking.speed import estimate_speed
    from tests.fixtures.llamacpp.models import read_header
    from tests.fixtures.llamacpp.speed import inputs
    from tests.fixtures.llamacpp.tools import tool_module

    path = tool_module("measure_server").write_model("qwen36-27b", tmp_path)  # UD-Q3_K_XL-like
    header = read_header(path)
    co = coefficients(header)
    head = next(t for t in header.tensors if t.name == "output.weight")  # as search's groups
    cfg = RunConfig(ctx=262144, type_k="q4_0", type_v="q4_0", mtp=True, spec_draft_n_max=3)
    x = speed_inputs(co, cfg, output_bytes=head.n_bytes or 0, label="UD-Q3_K_XL")
    on = estimate_speed(x, 4890.0, acceptance=0.789)
    off = estimate_speed(dataclasses.replace(x, mtp=False), 4890.0)
    at32k = estimate_speed(dataclasses.replace(x, mtp=False, ctx=32768), 4890.0)
    assert off.tok_s == pytest.approx(65.1, rel=0.15)  # llama-server, -c 262144, empty context
    assert on.tok_s == pytest.approx(102.3, rel=0.15)  # k=3, a=0.789
    # llama-bench at depth 32K (no server step): 58.3 tok/s
    assert at32k.tok_s_at_ctx == pytest.approx(58.3, rel=0.15)
    # the attention geometry read off the header, as the fixture's own inputs have it: 24 query
    # heads over 4 KV heads of 256 (llama.cpp's tensor-core kernel for an f16 cache)
    fixture = inputs("qwen36-27b", "ud_q3_k_xl_like", "q4_0")
    assert (x.gqa_ratio, x.head_dim, x.q_width) == (6, 256, 6144)
    assert (fixture.gqa_ratio, fixture.head_dim) == (x.gqa_ratio, x.head_dim)


def test_check_log_predicts_at_the_depth_the_log_decoded_at(tmp_path):
    """A request after a 131,072-token prompt: the prediction is for that depth (the slot's
    release line: 131,327 tokens in its cache, 256 generated), not for an empty cache."""
    from crawler.cli.checklog_cmd import _render_speed
    from crawler.fit import RunConfig, coefficients
    from crawler.library.checklog import speed_check
    from tests.fixtures.llamacpp.models import read_header
    from tests.fixtures.llamacpp.tools import tool_module

    log = LOGS / "speed" / "p5-080-mtp-qwen36-27b.log"  # MTP off, -c 262144, q4_0 cache, H100
    text = log.read_text()
    t = parse_timings(text)
    assert t is not None and t.cache_tokens is not None and t.n_tokens == 256
    assert t.depth == t.cache_tokens - 128 and t.depth > 131072
    model = tool_module("measure_server").write_model("qwen36-27b", tmp_path)
    co = coefficients(read_header(model))
    run = RunConfig(ctx=262144, type_k="q4_0", type_v="q4_0")
    source = "Qwen3.6-27B-UD-Q3_K_XL.gguf"  # the label gives search its type mix
    speed = speed_check(text, co, run, "H100 SXM5", source)
    assert speed is not None and speed["measured"]["depth"] == t.depth
    # 35.7 tok/s measured; predicted for an empty cache: 68.4 (+92 %)
    assert abs(speed["diff_pct"]) < 10, speed
    empty = speed_check(text.replace("stop processing", "stopped"), co, run, "H100 SXM5", source)
    assert empty is not None and empty["measured"]["depth"] is None
    assert empty["diff_pct"] > 40
    assert f"with ~{t.depth:,} tokens in the cache" in _render_speed(speed)
    assert "tokens in the cache" not in _render_speed(empty)
