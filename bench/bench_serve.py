"""``quants serve`` on the 200k-quant benchmark catalog: page and API latency, then load.

1. Start time: ``quants serve`` from process start to the first answered page.
2. Latency: 100 sequential requests per route (10 for the model pages and ``/api/compare``);
   server time (the app's ``Server-Timing`` header: request to response body, templates and
   charts included) and client wall time, p50 and p95. Target: search page
   <= 150 ms server time, p95.
3. Load: 50 concurrent clients (threads, keep-alive connections) for 30 s against 127.0.0.1,
   mixing the search page and ``/api/search`` with varied budgets and contexts; every answer
   must be a 200 (a 404 "nothing fits" would be counted as an error too: the mix avoids it).

Run: ``python -m bench bench_serve`` (or ``python bench/bench_serve.py [--quants N]
[--seconds S] [--clients N] [--catalog FILE]``). The catalog is built as bench_search builds
it (30-130 s), or ``--catalog`` reuses one.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from bench.bench_search import build

ROOT = Path(__file__).resolve().parents[1]

SEARCH = {"vram": 24, "ctx": 32768}
MIX = [
    ("/", {"vram": 24, "ctx": 32768}),
    ("/", {"vram": 16, "ctx": 8192, "q": "qwen"}),
    ("/api/search", {"vram": 24, "ctx": 262144, "auto_cache": 1}),
    ("/api/search", {"gpu": "RTX 4090", "ctx": 32768, "sort": "speed"}),
    ("/api/search", {"vram": 48, "ctx": 65536, "mtp": 1}),
    ("/api/search", {"vram": 12, "ctx": 4096, "sort": "size"}),
]


def _start(db: str) -> tuple[subprocess.Popen[str], str, int, float, float]:
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawler", "serve", "--db", db, "--port", "0"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:
        m = re.search(r"http://([\d.]+):(\d+)/", line)
        if m:
            listening = (time.perf_counter() - t) * 1000
            host, port = m.group(1), int(m.group(2))
            conn = http.client.HTTPConnection(host, port, timeout=60)
            conn.request("GET", "/")
            conn.getresponse().read()
            conn.close()
            return proc, host, port, listening, (time.perf_counter() - t) * 1000
    raise RuntimeError("quants serve did not start")


def _get(conn: http.client.HTTPConnection, path: str, params: dict[str, Any]) -> tuple[int, float]:
    conn.request("GET", path + "?" + urlencode(params))
    resp = conn.getresponse()
    resp.read()
    timing = resp.getheader("Server-Timing") or ""
    m = re.search(r"dur=([\d.]+)", timing)
    return resp.status, float(m.group(1)) if m else float("nan")


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _routes(host: str, port: int) -> list[tuple[str, str, dict[str, Any]]]:
    conn = http.client.HTTPConnection(host, port, timeout=60)
    conn.request("GET", "/api/search?" + urlencode(SEARCH))
    top = json.loads(conn.getresponse().read())["results"][0]
    conn.close()
    quant = {"repo": top["repo"], "path": top["path"], "vram": 24}
    base = top["base_model"] or top["repo"]
    words = base.rsplit("/", 1)[-1].replace("-", " ")
    return [
        ("search page (24 GiB, 32K)", "/", SEARCH),
        ("/api/search (24 GiB, 32K)", "/api/search", SEARCH),
        ("/api/search (24 GiB, 256K, auto cache)", "/api/search",
         {"vram": 24, "ctx": 262144, "auto_cache": 1}),
        ("/api/search (RTX 4090, sort speed)", "/api/search",
         {"gpu": "RTX 4090", "ctx": 32768, "sort": "speed"}),
        ("model page", "/model", {"q": base}),
        # The same model in words (not its exact name): compare's fuzzy scan of every quant.
        ("model page (words, fuzzy)", "/model", {"q": words}),
        ("/api/compare", "/api/compare", {"q": base}),
        ("quant page (charts)", "/quant", quant),
        ("/api/quant", "/api/quant", quant),
        ("scans page", "/scans", {}),
        ("/api/scans", "/api/scans", {}),
    ]  # fmt: skip


#: Routes whose library call reads every quant of a base model (17,000 quants of one base
#: model in this catalog; ``/api/compare`` answers all of them, 10 MB) get fewer requests.
HEAVY = ("/model", "/api/compare")


def latency(
    host: str, port: int, n: int, n_heavy: int
) -> list[tuple[str, int, float, float, float, float, int]]:
    """Per route: requests, server p50/p95 ms, client p50/p95 ms, non-200 answers."""
    rows = []
    conn = http.client.HTTPConnection(host, port, timeout=120)
    for name, path, params in _routes(host, port):
        _get(conn, path, params)  # warm
        server, client, bad = [], [], 0
        count = n_heavy if path in HEAVY else n
        for _ in range(count):
            t = time.perf_counter()
            status, dur = _get(conn, path, params)
            client.append((time.perf_counter() - t) * 1000)
            server.append(dur)
            bad += status != 200
        rows.append((name, count, _pct(server, 50), _pct(server, 95), _pct(client, 50),
                     _pct(client, 95), bad))  # fmt: skip
    conn.close()
    return rows


def load(host: str, port: int, clients: int, seconds: float) -> dict[str, Any]:
    """``clients`` threads hitting MIX for ``seconds``; counts, errors, latency."""
    stop = time.perf_counter() + seconds
    lock = threading.Lock()
    times: list[float] = []
    errors: list[str] = []

    def client(i: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=60)
        k = i
        while time.perf_counter() < stop:
            path, params = MIX[k % len(MIX)]
            k += 1
            t = time.perf_counter()
            try:
                status, _ = _get(conn, path, params)
            except (OSError, http.client.HTTPException) as exc:
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}")
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=60)
                continue
            with lock:
                times.append((time.perf_counter() - t) * 1000)
                if status != 200:
                    errors.append(f"HTTP {status} {path}")
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - started
    return {
        "clients": clients,
        "seconds": round(wall, 1),
        "requests": len(times),
        "errors": len(errors),
        "first_errors": errors[:5],
        "req_per_s": round(len(times) / wall, 1),
        "p50_ms": round(_pct(times, 50), 1) if times else None,
        "p95_ms": round(_pct(times, 95), 1) if times else None,
        "max_ms": round(max(times), 1) if times else None,
    }


def main(argv: list[str]) -> None:
    """Build the catalog, start the server, print the latency table and the load result."""
    ap = argparse.ArgumentParser(prog="bench_serve")
    ap.add_argument("--quants", type=int, default=200_000)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--heavy-requests", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--catalog", help="a catalog bench_search/bench_serve built (reused as is)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="quants-bench-serve-") as tmp:
        if args.catalog:
            db = f"sqlite:///{Path(args.catalog).resolve()}"
            print(f"catalog: {args.catalog} (reused)", flush=True)
        else:
            db = f"sqlite:///{Path(tmp) / 'catalog.sqlite'}"
            built = build(db, args.quants)
            print(f"catalog: {args.quants} quants, built in {built:.1f} s", flush=True)
        proc, host, port, listen_ms, start_ms = _start(db)
        try:
            rows = latency(host, port, args.requests, args.heavy_requests)
            result = load(host, port, args.clients, args.seconds)
        finally:
            proc.terminate()
            proc.wait(10)
    print(f"quants serve: listening {listen_ms:.0f} ms after process start, first page answered"
          f" at {start_ms:.0f} ms")  # fmt: skip
    width = max(len(r[0]) for r in rows)
    print(f"{'route':<{width}}  requests  server p50  server p95  client p50  client p95"
          "  non-200   (ms)")  # fmt: skip
    for name, count, s50, s95, c50, c95, bad in rows:
        print(f"{name:<{width}}  {count:>8}  {s50:>10.1f}  {s95:>10.1f}  {c50:>10.1f}"
              f"  {c95:>10.1f}  {bad:>7}")  # fmt: skip
    print(f"\nload: {result['clients']} clients x {result['seconds']} s: {result['requests']}"
          f" requests, {result['errors']} errors, {result['req_per_s']} req/s,"
          f" p50 {result['p50_ms']} ms, p95 {result['p95_ms']} ms,"
          f" max {result['max_ms']} ms")  # fmt: skip
    if result["first_errors"]:
        print("first errors:", *result["first_errors"], sep="\n  ")
    print(json.dumps({"targets": {"search_page_server_p95_ms": 150, "load_errors": 0}}))


if __name__ == "__main__":
    main(sys.argv[1:])
