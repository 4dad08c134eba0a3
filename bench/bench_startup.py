"""CLI start-up: ``quants --help`` and ``quants search`` on a warm catalog, whole processes.

Run: ``python -m bench bench_startup [--runs 9] [--quants 20000]``. Builds a Hub-shaped SQLite
catalog (bench/bench_search_hub.py's generator) in a temporary directory, then runs each command
``--runs`` times after one warm-up as ``python -m crawler`` from the repository root, and prints
the median and max of the wall time and of the CPU time the child used (user + system, from
``os.wait4``). Targets: ``--help`` <= 0.1 s, ``search`` <= 0.2 s from the shell
(docs/performance.md, CLI start-up).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one ``python -m crawler ARGV``."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawler", *argv],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 3):
        raise SystemExit(f"quants {' '.join(argv)} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def main(argv: list[str]) -> None:
    """Build the catalog, time the commands, print a table."""
    ap = argparse.ArgumentParser(prog="bench_startup")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--quants", type=int, default=20_000)
    args = ap.parse_args(argv)
    from bench.bench_search_hub import build

    with tempfile.TemporaryDirectory(prefix="quants-startup-") as tmp:
        db = f"sqlite:///{Path(tmp) / 'catalog.sqlite'}"
        build(db, args.quants)
        commands = {
            "quants --help": ["--help"],
            "quants search --gpu 'rtx 4090' --ctx 32768 --offline --json": [
                "search", "--gpu", "rtx 4090", "--ctx", "32768", "--offline", "--json", "--db", db,
            ],
        }  # fmt: skip
        print(f"{'command':<62} {'wall med':>9} {'wall max':>9} {'cpu med':>8}")
        for name, cmd in commands.items():
            _run(cmd)  # warm-up: the page cache, the catalog's first open
            runs = [_run(cmd) for _ in range(args.runs)]
            walls, cpus = [w for w, _ in runs], [c for _, c in runs]
            print(
                f"{name:<62} {statistics.median(walls):>8.3f}s {max(walls):>8.3f}s"
                f" {statistics.median(cpus):>7.3f}s"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
