"""The header fuzzer in CI: its regressions and seeds replayed, then a short real fuzz run.

The full run (10^6 inputs, figures in docs/reliability.md) is
``python -m fuzz.header --runs 1000000``; this smoke run checks the harness itself works and
that nothing escapes in its first inputs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fuzz.seeds import build_seeds, regression_inputs
from fuzz.target import Finding, check

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("name", "data"), regression_inputs() or [("none", b"GGUF")], ids=lambda v: str(v)[:40]
)
def test_saved_regression_inputs_fail_cleanly_and_fast(name: str, data: bytes) -> None:
    t0 = time.perf_counter()
    assert check(data) in {
        "parsed",
        "CorruptHeader",
        "HeaderTooLarge",
        "NotGGUF",
        "UnsupportedGGUFVersion",
    }, name
    assert time.perf_counter() - t0 < 1.0, name


def test_every_seed_goes_through_the_whole_target() -> None:
    seeds = build_seeds()
    saved = {data for _, data in regression_inputs()}
    outcomes = [check(s) for s in seeds if s not in saved]
    # Real-shaped headers parse; the big-endian seed is refused as such (the saved regression
    # inputs among the seeds may be refused: the replay above checks them).
    assert outcomes.count("parsed") == len(outcomes) - 1
    assert outcomes.count("BigEndianGGUF") == 1


def test_target_reports_a_property_violation_as_a_finding() -> None:
    # The target's own checks can fail (a harness that cannot fail proves nothing): a reader
    # asked for a negative offset is one of them.
    from fuzz.target import _chunked

    read_at, _ = _chunked(b"GGUF")
    with pytest.raises(Finding):
        read_at(-1, 4)
    # And a truncated header is an expected, named outcome, not an escape.
    assert check(b"GGUF\x03\x00\x00\x00") == "CorruptHeader"


def test_short_fuzz_run_finds_nothing(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fuzz.header",
            "--runs",
            "3000",
            "--json",
            "--seed",
            "7",
            "--out",
            str(tmp_path / "found"),
            "--corpus",
            str(tmp_path / "corpus"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=240,
        check=False,
    )
    report = json.loads(out.stdout)
    assert out.returncode == 0, (report["findings"], out.stderr[-2000:])
    assert report["runs"] == 3000
    assert report["uncaught"] == 0 and report["findings"] == []
    assert report["over_1s"] == 0
    # Mutants reach every verdict, including full parses that go through profile and catalog.
    assert {"parsed", "CorruptHeader", "NotGGUF"} <= set(report["outcomes"])
    # Bounded, not a budget: 3000 runs peak near 65 MiB (the fuzzer's own high-water mark; the
    # pytest parent's size no longer leaks in through ru_maxrss).
    assert report["peak_rss_mib"] < 256
