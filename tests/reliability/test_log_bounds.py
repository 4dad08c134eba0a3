"""``check-log`` on hostile logs: the path it reads a log file by (crawler/library/checklog.py:
streamed lines, windowed patterns) stays linear in time and bounded in memory.

A 300 KB line aimed at each pattern used to take up to 60 s of CPU, and a 1 GiB log 4.2 GB of
RSS. Bounds here are generous (timing tests must not flake on a busy machine); the measured
figures are in docs/reliability.md (bench/bench_hostile.py).
"""

from __future__ import annotations

import contextlib
import time
import tracemalloc
from pathlib import Path

import pytest

from crawler.fit.llamalog import MAX_LINE, LogError
from crawler.fit.speedlog import LogTimings, parse_timings, timing_lines
from crawler.library import checklog

#: One ~300 KB line per pattern family: repeated partial matches that an unanchored or lazy
#: pattern would rescan from every position.
HOSTILE_LINES = {
    "buffer size": "a: " * 100_000 + " buffer size = 1 MiB",
    "kv size": "llama_kv_cache: size = " + "K (x): " * 43_000,
    "breakdown": "memory_breakdown_print: |" + " - x |" * 50_000,
    "override": "tensor blk.1.ffn_up_exps.weight (" + "(" * 300_000,
    "loading model": "load_model: loading model '" + "'" * 300_000,
    "context": "llama_context: n_ctx" + " " * 150_000 + "llama_context: " * 10_000,
    "eval time": "eval time = " + "1 " * 150_000 + "draft acceptance = " * 1_000,
}
MIB = 1024**2


def read_like_check_log(path: Path) -> LogTimings | None:
    """What ``quants check-log`` does with the log before it needs the model: the buffers (or
    the refusal of a non-log), then the decode timings."""
    with contextlib.suppress(LogError):
        checklog.parse_log_file(path)
    return parse_timings(timing_lines(checklog.log_lines(path)))


def test_the_hostile_lines_are_long() -> None:
    assert len(HOSTILE_LINES) == 7
    assert all(290_000 < len(line) < 320_000 for line in HOSTILE_LINES.values())


@pytest.mark.parametrize("name", sorted(HOSTILE_LINES))
def test_a_hostile_300_kb_line_parses_in_linear_time(tmp_path: Path, name: str) -> None:
    path = tmp_path / "server.log"
    path.write_text(HOSTILE_LINES[name] + "\n")
    started = time.process_time()
    read_like_check_log(path)
    cpu = time.process_time() - started
    assert cpu < 0.5, f"{name}: {cpu:.3f} CPU-s"  # ~1 ms measured; quadratic was tens of s


def _write(path: Path, block: bytes, total: int) -> None:
    with path.open("wb") as fh:
        for _ in range(total // len(block)):
            fh.write(block)


def _peak(path: Path) -> tuple[float, LogTimings | None]:
    """Peak MiB of Python allocations while check-log reads ``path``, and the timings read."""
    tracemalloc.start()
    try:
        timings = read_like_check_log(path)
        return tracemalloc.get_traced_memory()[1] / MIB, timings
    finally:
        tracemalloc.stop()


def test_a_48_mib_line_without_a_newline_keeps_memory_bounded(tmp_path: Path) -> None:
    path = tmp_path / "one-line.log"
    _write(path, b"llama buffer size " * (MIB // 18), 48 * MIB)
    assert path.stat().st_size > 47 * MIB
    peak, _ = _peak(path)
    assert peak < 12, f"{peak:.1f} MiB"  # ~3 MiB measured: 1 MiB reads, lines cut at MAX_LINE
    lines = list(checklog.log_lines(path))
    assert len(lines) == 1 and len(lines[0]) == MAX_LINE


def test_a_long_log_of_timing_lines_keeps_memory_bounded(tmp_path: Path) -> None:
    """A long-running llama-server's log: timing lines for every request, the last one counts
    (8 MiB here, ~50k requests: holding them all took 2.7x the log's size)."""
    path = tmp_path / "server.log"
    line = (
        b"eval time =   123.45 ms /    64 tokens (    1.93 ms per token,   518.43 tokens per"
        b" second)\ndraft acceptance = 0.50000 (  10 accepted /   20 generated), mean len = 2.00\n"
    )
    _write(path, line * 64, 8 * MIB)
    with path.open("ab") as fh:
        fh.write(
            b"eval time =   100.00 ms /    10 tokens (   10.00 ms per token,   100.00 tokens per"
            b" second)\nprompt eval time = 1.00 ms / 1 tokens (1.00 ms per token, 1000.00 tokens"
            b" per second)\ndraft acceptance = 0.75000 (  30 accepted /   40 generated), mean"
            b" len = 3.00\n"
        )
    peak, t = _peak(path)
    assert peak < 12, f"{peak:.1f} MiB"
    assert t is not None
    assert (t.tok_s, t.n_tokens, t.draft_accepted, t.draft_generated, t.mean_len) == (
        100.0, 10, 30, 40, 3.0,
    )  # fmt: skip


def test_the_bounded_timing_lines_read_as_the_whole_log_would() -> None:
    """Keeping only the last request's lines changes no answer: random mixes of llama-server,
    llama-cli and JSON timing lines read the same as their whole text."""
    import random

    kinds = [
        "eval time =   {a}.00 ms /   {b} tokens (  1.00 ms per token,   {c}.00 tokens per second)",
        "prompt eval time = {a}.00 ms / {b} tokens (1.00 ms per token, {c}.00 tokens per second)",
        "llama_perf_context_print:        eval time = {a}.00 ms / {b} runs   (  1.00 ms per token,"
        " {c}.00 tokens per second)",
        "draft acceptance = 0.{a} ( {b} accepted / {c} generated), mean len = 2.{a}",
        '"timings": {{"predicted_per_second": {c}.5, "draft_n": {c}, "draft_n_accepted": {b}}}',
        '{{"predicted_per_second": {a}.25}}',
        "srv  update_slots: all slots are idle",
    ]
    rng = random.Random(24)
    for _ in range(400):
        lines = [
            rng.choice(kinds).format(
                a=rng.randint(1, 999), b=rng.randint(1, 99), c=rng.randint(100, 999)
            )
            for _ in range(rng.randint(0, 12))
        ]
        assert parse_timings(timing_lines(lines)) == parse_timings("\n".join(lines)), lines
