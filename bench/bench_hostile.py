"""Bounded work on hostile input: time and peak memory of what used to blow up.

``python -m bench bench_hostile [--log-gib 1]``:

- ``check-log`` parse of a 300 KB hostile line for every pattern (the unanchored patterns were
  quadratic: 60 s of CPU for a 303 KB log);
- ``check-log`` streaming of a generated log of ``--log-gib`` GiB (the whole file used to be read
  into memory: 1 GiB -> 4.2 GB RSS) through crawler.fit.llamalog.read_log_lines;
- decoding an 89 KB zlib "tensor table" that inflates to gigabytes (refused at 32 MiB);
- the same three on a 1 GiB line with no newline at all.

"peak MiB" is the process's peak RSS growth during the case (VmHWM), so run cases in a
fresh process (the default: each case is a subprocess of this module).
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator

from crawler.cli._output import format_table
from fuzz.header import peak_rss_kib

_HOSTILE_LINES = {
    "buffer size": "a: " * 100_000 + " buffer size = 1 MiB",
    "kv size": "llama_kv_cache: size = " + "K (x): " * 40_000,
    "breakdown": "memory_breakdown_print: |" + " - x |" * 50_000,
    "override": "tensor blk.1.ffn_up_exps.weight (" + "(" * 300_000,
    "loading model": "load_model: loading model '" + "'" * 300_000,
    "words": "llama " + "w" * 300_000,
}


class _GeneratedLog(io.RawIOBase):
    """``size`` bytes of a plausible llama.cpp log, generated as read (nothing on disk)."""

    LINE = (
        b"llama_context: n_ctx         = 4096\nload_tensors:   CUDA0 model buffer size = 1.00 MiB\n"
    )

    def __init__(self, size: int, *, newlines: bool = True) -> None:
        self.left = size
        self.newlines = newlines

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self.left)
        if n <= 0:
            return 0
        unit = self.LINE if self.newlines else b"x" * 64
        block = (unit * (n // len(unit) + 1))[:n]
        buffer[:n] = block
        self.left -= n
        return n


def _rss_mib() -> float:
    return peak_rss_kib() / 1024


def _case(name: str, gib: float) -> dict[str, float | str]:
    from crawler.catalog.tensor_tables import TensorTableError, decode_tensor_table
    from crawler.fit.llamalog import LogError, parse_log, read_log_lines

    bomb = b""
    if name == "tensor-table bomb":
        # 2 GiB of zeros compressed block by block (never held whole): ~2 MB of zlib.
        packer = zlib.compressobj(9)
        zeros = b"0" * (1 << 20)
        bomb = b"".join(packer.compress(zeros) for _ in range(2048)) + packer.flush()
    before = _rss_mib()
    started = time.perf_counter()
    outcome = "ok"
    if name.startswith("line: "):
        line = _HOSTILE_LINES[name.removeprefix("line: ")]
        try:
            parse_log([line])
        except LogError:
            outcome = "refused (not a log)"
    elif name.startswith("stream"):
        newlines = name == "stream"
        raw = _GeneratedLog(int(gib * 1024**3), newlines=newlines)
        lines = 0
        for _ in read_log_lines(io.BufferedReader(raw, 1 << 20)):
            lines += 1
        outcome = f"{lines} lines"
    elif name == "tensor-table bomb":
        try:
            decode_tensor_table(bomb)
        except TensorTableError as exc:
            outcome = f"refused ({len(bomb) // 1024} KB: {exc})"
    return {
        "case": name,
        "seconds": round(time.perf_counter() - started, 3),
        "peak MiB": round(_rss_mib() - before, 1),
        "outcome": outcome,
    }


def _cases(gib: float) -> Iterator[str]:
    yield from (f"line: {k}" for k in _HOSTILE_LINES)
    yield "stream"
    yield "stream (no newline)"
    yield "tensor-table bomb"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench_hostile")
    parser.add_argument("--log-gib", type=float, default=1.0)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)
    if args.case:
        print(json.dumps(_case(args.case, args.log_gib)))
        return
    rows = []
    for name in _cases(args.log_gib):
        out = subprocess.run(
            [sys.executable, "-m", "bench.bench_hostile", "--case", name, "--log-gib",
             str(args.log_gib)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        r = json.loads(out.stdout)
        rows.append([r["case"], r["seconds"], r["peak MiB"], r["outcome"]])
    print(format_table(["case", "seconds", "peak MiB", "outcome"], rows, align_right=["seconds"]))


if __name__ == "__main__":
    main(sys.argv[1:])
