"""Fuzz the GGUF header parser and what the crawl does with a header; print the figures.

::

    python -m fuzz.header --runs 1000000            # coverage-guided (atheris / libFuzzer)
    python -m fuzz.header --runs 20000 --json       # what the CI smoke test runs
    python -m fuzz.header --engine random --seconds 60

Each input goes through fuzz.target.check (parse in one buffer and in small refills,
profile, memory coefficients, catalog encoding). The report gives the inputs run, the outcomes
(parsed or which GGUFError), every uncaught exception (type, message, where, the input saved to
``--out``), the slowest input (saved too), how many took over 1 s, and peak memory: the process's
peak RSS (VmHWM) and the largest per-input Python allocation peak (``tracemalloc``,
sampled on every ``--trace-every``-th input). Exit status 1 when anything was found.

Engines: ``atheris`` (default when installed; libFuzzer's coverage feedback over the bytecode of
``crawler``, seeded with fuzz/seeds.py and a dictionary of GGUF keys) and ``random`` (a
dependency-free mutator over the same seeds: bit flips, integer edges, splices; not coverage
guided). Inputs that once broke a property live in fuzz/regressions/ and are replayed by
tests/reliability/test_fuzz_smoke.py.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
import traceback
import tracemalloc
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SLOW_S = 1.0


def peak_rss_kib() -> int:
    """This process's own peak RSS in KiB.

    Linux's VmHWM belongs to the address space, which exec replaces. ru_maxrss does not reset on
    exec: a child started by a large parent (pytest after a thousand tests, through vfork) reports
    the parent's size as its own. It is the fallback where /proc is missing.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@dataclass
class Stats:
    """Figures of one fuzz run; ``run`` is called once per input."""

    check: Callable[[bytes], str]
    runs_wanted: int
    seconds: float | None
    out: Path
    trace_every: int
    engine: str
    started: float = field(default_factory=time.monotonic)
    runs: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    findings: dict[str, dict[str, Any]] = field(default_factory=dict)
    uncaught: int = 0
    over_slow: int = 0
    slowest_s: float = 0.0
    slowest_input: bytes = b""
    peak_traced: int = 0
    max_len: int = 0
    baseline_rss_kib: int = field(default_factory=peak_rss_kib)

    def run(self, data: bytes) -> None:
        """One input: time it, sample its allocations, record what escaped."""
        traced = self.trace_every > 0 and self.runs % self.trace_every == 0
        if traced:
            tracemalloc.start()
        t0 = time.perf_counter()
        try:
            self.outcomes[self.check(data)] += 1
        except Exception as exc:
            self.uncaught += 1
            self._record(exc, data)
        dt = time.perf_counter() - t0
        if traced:
            self.peak_traced = max(self.peak_traced, tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        if dt > self.slowest_s:
            self.slowest_s, self.slowest_input = dt, data
        if dt > SLOW_S:
            self.over_slow += 1
            self._save("slow", data)
        self.max_len = max(self.max_len, len(data))
        self.runs += 1
        if self.runs >= self.runs_wanted or (
            self.seconds is not None and time.monotonic() - self.started >= self.seconds
        ):
            self.finish()

    def _record(self, exc: BaseException, data: bytes) -> None:
        frames = traceback.extract_tb(exc.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
        key = f"{type(exc).__name__} at {where}"
        found = self.findings.setdefault(
            key,
            {"type": type(exc).__name__, "message": str(exc)[:300], "where": where, "count": 0},
        )
        found["count"] += 1
        if "input" not in found or len(data) < found["size"]:
            found["input"], found["size"] = str(self._save("crash", data)), len(data)

    def _save(self, kind: str, data: bytes) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"{kind}-{hashlib.sha1(data).hexdigest()[:16]}.bin"
        path.write_bytes(data)
        return path

    def confirm_slow(self) -> int:
        """Re-time each input that took over 1 s, alone and three times: a pause of the machine
        (another process, the garbage collector) is not the parser's doing."""
        confirmed = 0
        for path in sorted(self.out.glob("slow-*.bin")):
            data = path.read_bytes()
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                with contextlib.suppress(Exception):  # already recorded as a finding
                    self.check(data)
                best = min(best, time.perf_counter() - t0)
            if best > SLOW_S:
                confirmed += 1
                self._save("confirmed-slow", data)
        return confirmed

    def report(self) -> dict[str, Any]:
        """The figures as a JSON-able dict."""
        elapsed = time.monotonic() - self.started
        peak_kib = peak_rss_kib()
        return {
            "engine": self.engine,
            "runs": self.runs,
            "seconds": round(elapsed, 1),
            "exec_per_s": round(self.runs / elapsed) if elapsed else None,
            "outcomes": dict(self.outcomes.most_common()),
            "uncaught": self.uncaught,
            "findings": list(self.findings.values()),
            "over_1s": self.over_slow,
            "over_1s_confirmed": self.confirm_slow() if self.over_slow else 0,
            "slowest_s": round(self.slowest_s, 4),
            "slowest_size": len(self.slowest_input),
            "slowest_input": str(self._save("slowest", self.slowest_input)),
            "max_input_len": self.max_len,
            "peak_rss_mib": round(peak_kib / 1024, 1),
            "baseline_rss_mib": round(self.baseline_rss_kib / 1024, 1),
            "peak_traced_input_mib": round(self.peak_traced / 2**20, 2),
        }

    def finish(self) -> None:
        """Print the report and end the process (libFuzzer's loop never returns)."""
        report = self.report()
        if self.as_json:
            sys.stdout.write(json.dumps(report, indent=2) + "\n")
        else:
            _print_table(report)
        sys.stdout.flush()
        sys.stderr.flush()
        if self.work is not None and self.out.parent != self.work:
            shutil.rmtree(self.work, ignore_errors=True)  # nothing of ours is left in it
        os._exit(1 if report["uncaught"] or report["over_1s_confirmed"] else 0)

    as_json: bool = False
    work: Path | None = None


def _print_table(report: dict[str, Any]) -> None:
    rows = [
        ("engine", report["engine"]),
        ("inputs run", f"{report['runs']:,}"),
        ("time", f"{report['seconds']} s ({report['exec_per_s']}/s)"),
        ("uncaught exceptions", report["uncaught"]),
        (
            "inputs over 1 s",
            f"{report['over_1s']} ({report['over_1s_confirmed']} when re-run alone)",
        ),
        ("slowest input", f"{report['slowest_s'] * 1000:.1f} ms ({report['slowest_size']} B)"),
        ("largest input", f"{report['max_input_len']} B"),
        ("peak RSS", f"{report['peak_rss_mib']} MiB (baseline {report['baseline_rss_mib']})"),
        ("peak per input", f"{report['peak_traced_input_mib']} MiB (tracemalloc, sampled)"),
    ]
    for name, n in report["outcomes"].items():
        rows.append((f"  {name}", f"{n:,}"))
    for f in report["findings"]:
        rows.append(("FINDING", f"{f['type']} x{f['count']} at {f['where']}: {f['message']}"))
        rows.append(("  input", f["input"]))
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


# ----------------------------------------------------------------------------- engines

_EDGES = [0, 1, 2, 3, 7, 8, 12, 13, 32, 255, 256, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62]
_EDGES += [2**63 - 1, 2**63, 2**64 - 1]


def _mutate(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4, 8))):
        if not buf:
            buf += rng.choice(seeds)[:64]
        op = rng.randrange(7)
        i = rng.randrange(len(buf))
        if op == 0:
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf[i] = rng.randrange(256)
        elif op in (2, 3):
            width = 4 if op == 2 else 8
            value = rng.choice(_EDGES) % (1 << (8 * width))
            buf[i : i + width] = value.to_bytes(width, "little")
        elif op == 4:
            del buf[i : i + rng.randrange(1, 256)]
        elif op == 5:
            other = rng.choice(seeds)
            j = rng.randrange(len(other))
            buf[i:i] = other[j : j + rng.randrange(1, 512)]
        else:
            del buf[i:]
    return bytes(buf)


def _run_random(stats: Stats, seeds: list[bytes], seed: int) -> None:
    rng = random.Random(seed)
    for s in seeds:
        stats.run(s)
    while True:
        stats.run(_mutate(rng, rng.choice(seeds), seeds))


def _run_atheris(
    stats: Stats, seeds: list[bytes], tokens: list[bytes], seed: int, max_len: int, corpus: Path
) -> None:
    import atheris

    corpus.mkdir(parents=True, exist_ok=True)
    stats.out.mkdir(parents=True, exist_ok=True)
    for s in seeds:
        (corpus / f"seed-{hashlib.sha1(s).hexdigest()[:16]}").write_bytes(s)
    dict_path = stats.work / "gguf.dict"
    dict_path.write_text("".join(f'"{_escape(t)}"\n' for t in tokens))
    argv = [
        sys.argv[0],
        str(corpus),
        f"-dict={dict_path}",
        f"-max_len={max_len}",
        f"-seed={seed}",
        f"-artifact_prefix={stats.out}/",
        "-rss_limit_mb=2048",
        "-timeout=30",
        "-print_final_stats=0",
    ]
    atheris.Setup(argv, stats.run)
    atheris.Fuzz()


def _escape(token: bytes) -> str:
    return "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\x{b:02x}" for b in token)


# ----------------------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> None:
    """Parse options, import the target (instrumented under atheris), fuzz, report."""
    parser = argparse.ArgumentParser(
        prog="python -m fuzz.header", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=1_000_000, help="inputs to run")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long")
    parser.add_argument("--engine", choices=("atheris", "random", "auto"), default="auto")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-len", type=int, default=64 * 1024, help="largest input (bytes)")
    parser.add_argument("--corpus", type=Path, default=None, help="keep the corpus here")
    parser.add_argument("--out", type=Path, default=None, help="where inputs found are saved")
    parser.add_argument("--trace-every", type=int, default=64, help="tracemalloc sampling")
    parser.add_argument("--json", action="store_true", help="report as JSON on stdout")
    args = parser.parse_args(argv)

    engine = args.engine
    if engine == "auto":
        try:
            import atheris
        except ImportError:
            engine = "random"
        else:
            engine = "atheris"
    if engine == "atheris":
        import atheris

        # Instrument the code under test only (libFuzzer's coverage map over its bytecode).
        with atheris.instrument_imports(include=["crawler"]):
            from fuzz.target import check
    else:
        from fuzz.target import check
    from fuzz.seeds import build_seeds, dictionary

    seeds = build_seeds()
    work = Path(tempfile.mkdtemp(prefix="quants-fuzz-"))  # dictionary; default corpus and out
    stats = Stats(
        check=check,
        runs_wanted=args.runs,
        seconds=args.seconds,
        out=args.out or work / "found",
        trace_every=args.trace_every,
        engine=engine,
    )
    stats.as_json = args.json
    stats.work = work
    if engine == "atheris":
        corpus = args.corpus or work / "corpus"
        _run_atheris(stats, seeds, dictionary(seeds), args.seed, args.max_len, corpus)
    else:
        _run_random(stats, seeds, args.seed)


if __name__ == "__main__":
    main()
