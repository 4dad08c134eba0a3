"""The graded MTP reading (crawler/profile/mtp_grade.py) and the measured acceptance of
check-log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawler.profile.mtp_grade import EVIDENCE, draft_acceptance, mtp_grade
from tests.cli import clean_env, run_quants

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "logs"
MTP_LOG = LOGS / "p4-mtp-lv4-qwen36-27b-q4_0-256k-mtp.log"


@pytest.mark.parametrize(
    ("state", "bits", "grade"),
    [
        ("absent", None, "missing"),
        ("declared_missing", None, "broken"),
        ("present", None, "broken"),  # a type of unknown width
        ("sidecar", None, "sidecar"),
        ("present", 2.0, "low"),
        ("present", 3.0, "low"),
        ("present", 4.0, "likely_fine"),
        ("present", 5.0, "likely_fine"),
        ("present", 6.0, "at_bar"),
        ("present", 8.0, "at_bar"),
        ("present", 16.0, "at_bar"),
        (None, None, "none"),
    ],
)
def test_grades(state, bits, grade) -> None:
    assert mtp_grade(state, bits).grade == grade


def test_below_the_bar_cites_the_published_evidence() -> None:
    reading = mtp_grade("present", 4.0).reading
    assert "likely fine" in reading and "4-bit head" in reading
    for key in ("bits", "task"):
        claim, source = EVIDENCE[key]
        assert claim in reading and source in reading
    low = mtp_grade("present", 3.0).reading
    assert EVIDENCE["low"][1] in low and "untested" in low
    assert "github.com" not in mtp_grade("present", 8.0).reading  # at the bar: nothing to argue


def test_draft_acceptance_both_published_line_forms() -> None:
    text = (
        "slot print_timing: id  0 | task 1 | draft acceptance rate = 0.57576 (   19 accepted /"
        "    33 generated)\n"
        "slot print_timing: id  0 | task 2 | draft acceptance = 0.50000 (    5 accepted /    10"
        " generated), mean len =  1.50\n"
    )
    acc = draft_acceptance(text)
    assert acc is not None
    assert (acc.accepted, acc.generated, acc.requests) == (24, 43, 2)
    assert acc.rate == pytest.approx(24 / 43)
    assert draft_acceptance("no speculative decoding here\n") is None


def test_check_log_shows_the_measured_acceptance_beside_the_reading(tmp_path: Path) -> None:
    from tests.fixtures.llamacpp.tools import tool_module

    model = tool_module("measure_server").write_model("qwen36-27b", tmp_path)
    env = clean_env(tmp_path)
    out = run_quants("check-log", str(MTP_LOG), "--model", str(model), env=env)
    assert out.returncode == 0, out.stderr
    # The log's own line: "draft acceptance = 0.08333 (    1 accepted /    12 generated)".
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("MTP drafting"))
    assert "8.3% accepted (1 of 12 drafted tokens, 1 request(s))" in line
    assert line.endswith("head: at the bar: 8-bit head (6-8 bit)")  # the synthetic file's Q8_0
    doc = json.loads(
        run_quants("check-log", str(MTP_LOG), "--model", str(model), "--json", env=env).stdout
    )
    assert doc["mtp_draft"]["accepted"] == 1 and doc["mtp_draft"]["generated"] == 12
    assert doc["mtp_draft"]["grade"] == "at_bar"
    plain = LOGS / "p2-lv4-llama8b-ngl-all.log"
    llama = tool_module("measure_server").write_model("llama8b", tmp_path)
    out = run_quants("check-log", str(plain), "--model", str(llama), "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert "mtp_draft" not in json.loads(out.stdout)
