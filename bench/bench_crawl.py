"""Crawl throughput and fetch cost against the Hub emulator with injected round-trip latency.

Run: ``python -m bench bench_crawl`` (or ``python -m bench.bench_crawl [--quick]``).

Part 1, throughput: 6 repos x 8 quants (tiny models), a fresh catalog per run, at 20/50/100 ms
RTT (added by the emulator to every request on both origins) and concurrency 1/4/8/16. Reported:
files analysed per second, HTTP requests and bytes per analysed file, and the bound
``concurrency / (requests per file x RTT)``, where requests per file counts every HTTP request of
the pass (listing, trees, the Hub's 302 and the CDN's 206) divided by the files analysed.

Part 2, fetch cost on real-size headers (Qwen3.6-27B shapes, 248k-token vocabulary, ~9.6 MB
headers): one repo of 6 quants crawled cold, then re-crawled after a re-upload of one file, then
re-crawled unchanged. Reported per file: ranged GETs, bytes fetched / header bytes.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from crawler.base.config import Settings
from crawler.catalog import Catalog
from crawler.crawl.scan import ScanSummary, run_once
from crawler.hub import HubClient
from tests.fixtures.world import FileCache, Quant, RepoSpec, populate, reupload
from tests.hub_emulator import HubEmulator

RTTS_MS = (20, 50, 100)
CONCURRENCY = (1, 4, 8, 16)
RECIPES = ("UD-Q4_K_XL", "UD-Q3_K_XL", "Q4_K_M", "Q8_0", "Q6_K", "Q4_0", "BF16", "IQ4_XS-Q8nextn")


def _repos(n_repos: int, recipes: tuple[str, ...], size: str) -> list[RepoSpec]:
    return [
        RepoSpec(
            f"bench{i}/Model{i}-GGUF",
            tuple(Quant(f"Model{i}-{r}.gguf", "qwen35", r, size) for r in recipes),
            datetime(2026, 6, 1 + i, tzinfo=UTC),
        )
        for i in range(n_repos)
    ]


def _crawl(emu: HubEmulator, db: Path, concurrency: int) -> tuple[ScanSummary, float]:
    settings = Settings(hf_endpoint=emu.endpoint, db_url=f"sqlite:///{db}", concurrency=concurrency)
    with Catalog.open(settings.resolved_db_url) as catalog:
        hub = HubClient(settings)
        started = time.perf_counter()
        summary = run_once(settings, hub=hub, catalog=catalog, authors=(), searches=())
        return summary, time.perf_counter() - started


@dataclass
class Row:
    rtt_ms: int
    concurrency: int
    files: int
    wall_s: float
    requests: int
    bytes_fetched: int

    @property
    def files_per_s(self) -> float:
        return self.files / self.wall_s

    @property
    def req_per_file(self) -> float:
        return self.requests / self.files

    @property
    def bound(self) -> float:
        return self.concurrency / (self.req_per_file * self.rtt_ms / 1000)


def throughput(cache: FileCache, tmp: Path, rtts: tuple[int, ...], conc: tuple[int, ...]) -> None:
    repos = _repos(6, RECIPES, "tiny")
    rows: list[Row] = []
    with HubEmulator() as emu:
        populate(emu.state, cache, repos)
        for rtt in rtts:
            for c in conc:
                emu.latency_s = rtt / 1000
                db = tmp / f"tp-{rtt}-{c}.sqlite"
                summary, wall = _crawl(emu, db, c)
                assert summary.errors == 0, summary
                rows.append(
                    Row(
                        rtt,
                        c,
                        summary.files_analysed,
                        wall,
                        summary.requests,
                        summary.bytes_fetched,
                    )
                )
    print("Part 1: throughput (6 repos x 8 quants, tiny headers, fresh catalog each run)")
    print(
        f"{'RTT':>6} {'conc':>4} {'files':>5} {'wall s':>7} {'files/s':>8} {'req/file':>8} "
        f"{'KB/file':>8} {'bound/s':>8} {'% bound':>7}"
    )
    for r in rows:
        print(
            f"{r.rtt_ms:>4}ms {r.concurrency:>4} {r.files:>5} {r.wall_s:>7.2f} "
            f"{r.files_per_s:>8.1f} {r.req_per_file:>8.2f} "
            f"{r.bytes_fetched / r.files / 1024:>8.1f} "
            f"{r.bound:>8.1f} {100 * r.files_per_s / r.bound:>6.0f}%"
        )


def fetch_cost(cache: FileCache, tmp: Path, n_quants: int) -> None:
    (repo,) = _repos(1, RECIPES[:n_quants], "real")
    db = tmp / "real.sqlite"
    with HubEmulator() as emu:
        populate(emu.state, cache, [repo])
        emu.latency_s = 0.02
        summary, wall = _crawl(emu, db, 8)
        cdn = sorted(emu.requests(origin="cdn"), key=lambda r: r.at)
        per_file: dict[str, list[int]] = {}
        for rec in cdn:
            per_file.setdefault(rec.path, []).append(rec.bytes_sent)
        with Catalog.open(f"sqlite:///{db}") as catalog:
            _, rows = catalog.query_readonly(
                "SELECT f.path, f.header_bytes, f.lfs_oid FROM files f ORDER BY f.analysed_at"
            )
        header = {oid: hb for _, hb, oid in rows}
        print(f"Part 2: fetch cost, 1 repo x {n_quants} real-size quants, 20 ms RTT, conc 8")
        print(f"  cold crawl: {summary.files_analysed} files in {wall:.2f} s")
        reads = []
        print(f"  {'file':<30} {'header B':>10} {'ranged GETs':>11} {'fetched B':>10} {'ratio':>6}")
        order = list(per_file)
        for i, path in enumerate(order):
            oid = path.rsplit("/", 1)[-1]
            hb = header.get(oid, 0)
            got = per_file[path]
            reads.append(len(got))
            who = "first (cold)" if i == 0 else "hinted"
            print(f"  {who:<30} {hb:>10} {len(got):>11} {sum(got):>10} {sum(got) / hb:>6.3f}")
        total_header = sum(header.values())
        total_fetched = sum(sum(v) for v in per_file.values())
        print(
            f"  repo: median ranged GETs per file {statistics.median(reads):g}, "
            f"bytes fetched / header bytes {total_fetched / total_header:.3f} "
            f"(cold file {sum(per_file[order[0]]) / header[order[0].rsplit('/', 1)[-1]]:.3f})"
        )
        print(
            "  HTTP requests per file over the pass: "
            f"{summary.requests / summary.files_analysed:.2f}"
            " (listing + tree + 302 + 206 per ranged GET)"
        )
        # A re-upload under the same name: only that file is read again, with the size hint.
        r0 = RECIPES[0]
        reupload(
            emu.state, cache, repo.repo_id, Quant(f"Model0-{r0}.gguf", "qwen35", "Q6_K", "real")
        )
        emu.clear_log()
        summary, _ = _crawl(emu, db, 8)
        reread = emu.requests(origin="cdn")
        print(
            f"  re-upload of 1 file: {summary.files_analysed} file read, {len(reread)} ranged GET, "
            f"{sum(r.bytes_sent for r in reread)} bytes"
        )
        emu.clear_log()
        summary, _ = _crawl(emu, db, 8)
        print(
            f"  unchanged re-crawl: {len(emu.requests(origin='cdn'))} ranged GETs, "
            f"{len(emu.requests(path='/resolve/'))} resolve requests, "
            f"{summary.requests} HTTP requests in all"
        )


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    with tempfile.TemporaryDirectory(prefix="quants-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        cache = FileCache(tmp / "files")
        if quick:
            throughput(cache, tmp, (20,), (1, 8))
            fetch_cost(cache, tmp, 3)
        else:
            throughput(cache, tmp, RTTS_MS, CONCURRENCY)
            print()
            fetch_cost(cache, tmp, 6)


if __name__ == "__main__":
    main(sys.argv[1:])
