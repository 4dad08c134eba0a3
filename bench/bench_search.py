"""Search over a synthetic catalog of 200k quants: in-process query time and CLI wall time.

Targets: <= 100 ms in process, <= 0.5 s for the whole ``quants search`` invocation.
Also measures ``quants --help`` and reports which imports dominate CLI start-up.

Run: ``python -m bench bench_search`` (or ``python bench/bench_search.py [--quants N] [--db URL]``).
The catalog is built once into a temporary SQLite file (about 30 s for 200k quants), or into the
empty database ``--db`` names.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from crawler.base.errors import NothingFits
from crawler.catalog import Catalog
from crawler.catalog.reader import Reader
from crawler.catalog.store import refresh_live
from crawler.catalog.tables import MemoryModel, Quant, Repo, TensorGroup
from crawler.fit import KVGroup, MemoryCoefficients
from crawler.library.search import search
from crawler.library.search_request import SearchRequest
from crawler.ranking.columns import search_scalars, stored_columns

ROOT = Path(__file__).resolve().parents[1]
GIB = 1024**3

# (family, arch, total params B, active params B, layers, kv layers, kv width, n_embd, vocab,
#  experts, used, hybrid recurrent layers, has MTP). Real-model shapes, rounded.
FAMILIES = [
    ("Llama-3.2-1B", "llama", 1.2, 1.2, 16, 16, 512, 2048, 128256, 0, 0, 0, False),
    ("Llama-3.2-3B", "llama", 3.2, 3.2, 28, 28, 1024, 3072, 128256, 0, 0, 0, False),
    ("Llama-3.1-8B", "llama", 8.0, 8.0, 32, 32, 1024, 4096, 128256, 0, 0, 0, False),
    ("Qwen3-14B", "qwen3", 14.8, 14.8, 40, 40, 1024, 5120, 151936, 0, 0, 0, False),
    ("Qwen3-32B", "qwen3", 32.8, 32.8, 64, 64, 1024, 5120, 151936, 0, 0, 0, False),
    ("Llama-3.3-70B", "llama", 70.6, 70.6, 80, 80, 1024, 8192, 128256, 0, 0, 0, False),
    ("Qwen3.6-27B", "qwen35", 27.0, 27.0, 64, 16, 1024, 5120, 248320, 0, 0, 48, True),
    ("Qwen3.6-35B-A3B", "qwen35moe", 35.0, 3.0, 40, 10, 512, 2048, 248320, 256, 8, 30, True),
    ("Qwen3-30B-A3B", "qwen3moe", 30.5, 3.3, 48, 48, 512, 2048, 151936, 128, 8, 0, False),
    ("GLM-4.5-Air", "glm4moe", 106.0, 12.0, 46, 46, 1024, 4096, 151552, 128, 8, 0, True),
    ("DeepSeek-V3", "deepseek2", 671.0, 37.0, 61, 61, 576, 7168, 129280, 256, 8, 0, True),
    ("Gemma-3-4B", "llama", 4.3, 4.3, 34, 34, 1024, 2560, 262144, 0, 0, 0, False),
]
# (label, bits per weight of the bulk, attention bits)
LADDER = [
    ("IQ1_S", 1.56, 4.5), ("IQ2_XXS", 2.06, 4.5), ("Q2_K", 2.63, 4.5), ("Q3_K_M", 3.44, 4.5),
    ("IQ4_XS", 4.25, 4.25), ("Q4_K_M", 4.5, 4.5), ("UD-Q4_K_XL", 4.6, 8.5), ("Q5_K_M", 5.5, 5.5),
    ("Q6_K", 6.56, 6.56), ("Q8_0", 8.5, 8.5), ("UD-Q3_K_XL", 3.6, 8.5), ("Q4_0", 4.5, 4.5),
    ("Q5_K_S", 5.5, 5.5), ("BF16", 16.0, 16.0),
]  # fmt: skip
UPLOADERS = [
    "unsloth", "bartowski", "mradermacher", "lmstudio-community", "ggml-org", "QuantFactory",
    "AesSedai", "havenoammo", "localweights", "someone", "ubergarm", "DavidAU",
]  # fmt: skip


def _coefficients(f: tuple[Any, ...], bits: float) -> MemoryCoefficients:
    _name, arch, total, active, layers, kv_layers, kv_w, embd, vocab, n_exp, used, rec, mtp = f
    trunk = total * 1e9 - vocab * embd  # the input embedding stays on the host
    expert_params = (total - active) * 1e9 * (n_exp / max(n_exp - used, 1)) if n_exp else 0.0
    dense_params = max(trunk - expert_params, trunk * 0.05)
    per_layer = int(expert_params * bits / 8 / layers) if n_exp else 0
    return MemoryCoefficients(
        status="ok",
        architecture=arch,
        n_layer=layers,
        n_nextn=1 if mtp else 0,
        n_embd=embd,
        n_vocab=vocab,
        n_head=32,
        n_ff=0 if n_exp else embd * 3,
        n_ff_exp=embd // 4 if n_exp else 0,
        n_expert=n_exp,
        n_expert_used=used,
        n_ctx_train=262144 if rec else 131072,
        weights_bytes=int(dense_params * bits / 8),
        mtp_weights_bytes=int(active * 1e9 / layers * bits / 8) if mtp else 0,
        expert_bytes=per_layer * layers,
        host_bytes=int(vocab * embd * bits / 8),
        expert_layers=tuple((il, per_layer, per_layer) for il in range(layers)) if n_exp else (),
        kv_groups=(KVGroup(kv_layers, kv_w, 0 if arch == "deepseek2" else kv_w, False, 128, 128),),
        mtp_kv_groups=(KVGroup(1, kv_w, kv_w, False, 128, 128),) if mtp else (),
        mla=arch == "deepseek2",
        v_width_max=kv_w,
        recurrent_layers=rec,
        recurrent_r=3 * 10240 if rec else 0,
        recurrent_s=786432 if rec else 0,
        rs_rollback=bool(rec),
        conv_dim=10240 if rec else 0,
        mtp_available=mtp,
    )


def build(path: Path | str, n_quants: int, seed: int = 6) -> float:
    """Write a catalog of ``n_quants`` quants into ``path`` (or a database URL); return seconds."""
    started = time.perf_counter()
    rng = random.Random(seed)
    url = path if isinstance(path, str) else f"sqlite:///{path}"
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    repos, quants, groups, memory = [], [], [], []
    coeff_cache: dict[tuple[str, str], dict[str, Any]] = {}
    qid = rid = 0
    while qid < n_quants:
        rid += 1
        fam = rng.choice(FAMILIES)
        author = rng.choice(UPLOADERS)
        variant = rng.choice(["", "-Instruct", "-abliterated", "-heretic", "-Coder", "-MTP"])
        repo_id = f"{author}/{fam[0]}{variant}-{rid}-GGUF"
        repos.append(
            {"id": rid, "repo_id": repo_id, "author": author, "sha": f"{rid:040x}",
             "downloads": rng.randint(0, 500_000), "likes": rng.randint(0, 900),
             "last_modified": t0 + timedelta(hours=rng.randint(0, 8000)), "private": False,
             "base_model": f"org/{fam[0]}", "first_seen_at": t0, "last_seen_at": t0}
        )  # fmt: skip
        for label, bits, attn in LADDER:
            if qid >= n_quants:
                break
            qid += 1
            key = (fam[0], label)
            if key not in coeff_cache:
                coeff_cache[key] = _coefficients(fam, bits).to_json()
            co = coeff_cache[key]
            size = co["weights_bytes"] + co["expert_bytes"] + co["host_bytes"]
            quants.append(
                {"id": qid, "repo_pk": rid, "path": f"{fam[0]}-{label}.gguf", "revision": "a" * 40,
                 "quant_label": label, "architecture": fam[1], "base_model": f"org/{fam[0]}",
                 "size_bytes": size, "n_params": int(fam[2] * 1e9), "bpw": bits,
                 "mtp_present": fam[12], "mtp_state": "present" if fam[12] else "absent",
                 "mtp_min_bits": attn if fam[12] else None, "mtp_preserved": fam[12] and attn >= 6,
                 "attn_min_bits": attn, "attn_preserved": attn >= 6, "dynamic": attn > bits,
                 "loadable_by_mainline": True, "analysed_at": t0, "first_seen_at": t0,
                 "shard_count": 1}
            )  # fmt: skip
            total = fam[2] * 1e9
            mine = []
            for g, share, b in (("attn", 0.12, attn), ("ffn_exps" if fam[9] else "ffn", 0.78, bits),
                                ("output", 0.05, 6.56), ("token_embd", 0.05, bits)):  # fmt: skip
                n = int(total * share)
                mine.append(
                    {"quant_id": qid, "group_name": g, "n_tensors": 64, "n_params": n,
                     "n_bytes": int(n * b / 8), "bpw": b, "min_bits": b, "max_bits": b}
                )  # fmt: skip
            groups += mine
            # What the crawl stores (crawler.catalog.store): quality score, memory bound copies.
            quants[-1].update(
                fit_weights_bytes=co["weights_bytes"], fit_expert_bytes=co["expert_bytes"],
                fit_mtp_bytes=co["mtp_weights_bytes"],
                fit_kv_per_token=sum(2 * g["count"] * (g["k_width"] + g["v_width"])
                                     for g in co["kv_groups"]),
                fit_fixed_bytes=co["recurrent_layers"]
                * (co["recurrent_r"] + co["recurrent_s"]) * 4,
                **stored_columns(
                    sorted((g["group_name"], g["n_params"], g["n_bytes"], g["bpw"]) for g in mine),
                    "ok", co, label,
                ),
            )  # fmt: skip
            memory.append(
                {"quant_id": qid, "status": "ok", "weights_bytes": co["weights_bytes"],
                 "mtp_weights_bytes": co["mtp_weights_bytes"], "expert_bytes": co["expert_bytes"],
                 "host_bytes": co["host_bytes"],
                 "kv_bytes_per_token_f16": sum(2 * g["count"] * (g["k_width"] + g["v_width"])
                                               for g in co["kv_groups"]),
                 "fixed_bytes_f16": co["recurrent_layers"]
                 * (co["recurrent_r"] + co["recurrent_s"]) * 4,
                 "coefficients": co, **search_scalars(co)}
            )  # fmt: skip
    with Catalog.open(url) as catalog, catalog.engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA synchronous=OFF")
        tables = ((Repo, repos), (Quant, quants), (TensorGroup, groups), (MemoryModel, memory))
        for table, rows in tables:
            for i in range(0, len(rows), 20_000):
                conn.execute(insert(table.__table__), rows[i : i + 20_000])  # type: ignore[attr-defined]
    with Catalog.open(url, upgrade=False, check=False) as catalog:
        refresh_live(catalog)  # live flag and search text, as the crawl's write path sets them
        if catalog.dialect == "postgresql":
            # What autovacuum does after a crawl's inserts: statistics, and the visibility map
            # that lets index-only scans skip the table.
            with catalog.engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                    "VACUUM ANALYZE"
                )
    return time.perf_counter() - started


QUERIES: list[tuple[str, list[str]]] = [
    ("--vram 24 --ctx 262144 -ctk f16 -ctv f16",
     ["--vram", "24", "--ctx", "262144", "-ctk", "f16", "-ctv", "f16"]),
    ("--vram 24 --ctx 262144 (cache and MTP per quant)", ["--vram", "24", "--ctx", "262144"]),
    ("--vram 24 --ctx 262144 --no-mtp", ["--vram", "24", "--ctx", "262144", "--no-mtp"]),
    ("--vram 12 --ctx 32768 --tier partial",
     ["--vram", "12", "--ctx", "32768", "--tier", "partial"]),
    ("--vram 12 --ctx 32768 -ngl 20", ["--vram", "12", "--ctx", "32768", "-ngl", "20"]),
    ("'qwen3.6 27b' --vram 24 --ctx 262144 --auto-cache",
     ["qwen3.6 27b", "--vram", "24", "--ctx", "262144", "--auto-cache"]),
    ("--gpu 'rtx 4090' --ctx 32768 -ctk q8_0 -ctv q8_0",
     ["--gpu", "rtx 4090", "--ctx", "32768", "-ctk", "q8_0", "-ctv", "q8_0"]),
    ("--vram 24 (max ctx per quant)", ["--vram", "24"]),
    ("--vram 24 --ctx 131072 --mtp", ["--vram", "24", "--ctx", "131072", "--mtp"]),
    ("--vram 24 --ctx 32768 --sort size", ["--vram", "24", "--ctx", "32768", "--sort", "size"]),
    ("--vram 24 --ctx 32768 --sort downloads",
     ["--vram", "24", "--ctx", "32768", "--sort", "downloads"]),
    ("--vram 24 --ctx 32768 --sort updated",
     ["--vram", "24", "--ctx", "32768", "--sort", "updated"]),
    ("--gpu 'rtx 4090' --ctx 32768 --sort speed",
     ["--gpu", "rtx 4090", "--ctx", "32768", "--sort", "speed"]),
    ("'qwen3.6 27b' --gpu 'rtx 4090' --ctx 32768 --sort speed",
     ["qwen3.6 27b", "--gpu", "rtx 4090", "--ctx", "32768", "--sort", "speed"]),
    ("'a3b' --gpu 'rtx 4090' --ctx 32768 --sort speed (MoE)",
     ["a3b", "--gpu", "rtx 4090", "--ctx", "32768", "--sort", "speed"]),
    ("--gpu 'rtx 4090' --ctx 131072 --mtp --sort speed",
     ["--gpu", "rtx 4090", "--ctx", "131072", "--mtp", "--sort", "speed"]),
    ("--vram 24 --ctx 32768 --sort margin", ["--vram", "24", "--ctx", "32768", "--sort", "margin"]),
    ("--vram 24 --sort ctx", ["--vram", "24", "--sort", "ctx"]),
    # selective: one repo of the 200k-quant catalog (repo 1007 exists for the default seed)
    ("'Qwen3.6-27B-MTP-1007' --vram 24 --ctx 262144 --auto-cache",
     ["Qwen3.6-27B-MTP-1007", "--vram", "24", "--ctx", "262144", "--auto-cache"]),
]  # fmt: skip


def _request(argv: list[str]) -> SearchRequest:
    from crawler.cli.search_cmd import request_from_argv

    return request_from_argv(argv)


def _median_ms(fn: Any, runs: int) -> tuple[float, Any]:
    out = None
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), out


def _cli(args: list[str], db: str) -> float:
    # Offline: the synthetic catalog's model names must not send `quants search` to the Hub.
    env = {**os.environ, "QUANTS_DB": db, "QUANTS_OFFLINE": "1"}
    t = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "crawler", *args], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=False)  # fmt: skip
    elapsed = (time.perf_counter() - t) * 1000
    if run.returncode not in (0, 3):  # 3: nothing fits, an answer too
        raise SystemExit(f"quants {' '.join(args)}: exit {run.returncode}: {run.stderr.strip()}")
    return elapsed


def _import_profile(db: str) -> list[tuple[str, float]]:
    """Self import time (ms) of one real ``quants search`` run, summed by top-level package
    (what the command imports while parsing its options counts too: typer's coercion layer)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "crawler", "search", "--vram", "24",
         "--ctx", "262144", "--json"],
        capture_output=True, text=True, cwd=ROOT, check=False,
        env={**os.environ, "QUANTS_DB": db},
    )  # fmt: skip
    totals: dict[str, float] = {}
    for line in out.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if m:
            pkg = m.group(2).split(".")[0]
            totals[pkg] = totals.get(pkg, 0.0) + int(m.group(1)) / 1000
    return sorted(totals.items(), key=lambda kv: -kv[1])[:10]


def main(argv: list[str]) -> None:
    """Build the catalog, time the queries, print a table."""
    ap = argparse.ArgumentParser(prog="bench_search")
    ap.add_argument("--quants", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--db", help="an empty database URL (e.g. PostgreSQL) to build into, instead of SQLite"
    )
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="quants-bench-") as tmp:
        path = Path(tmp) / "catalog.sqlite"
        db = args.db or f"sqlite:///{path}"
        seconds = build(db, args.quants)
        size = f", {path.stat().st_size / 1e6:.0f} MB" if path.exists() else ""
        print(f"catalog: {args.quants} quants, built in {seconds:.1f} s{size}")
        rows = []
        with Reader.open(db) as catalog:  # what `quants search` reads through
            for name, qargs in QUERIES:
                req = _request([*qargs, "--limit", "20"])
                try:
                    search(catalog, req)  # warm: statement compilation, first imports
                except NothingFits:
                    rows.append((name, "-", "-", "0", "0", "0"))
                    continue
                ms, res = _median_ms(lambda req=req: search(catalog, req), args.runs)
                o = res.outcome
                considered = o.considered + res.prefiltered_out
                cli = statistics.median(
                    _cli(["search", *qargs, "--json"], db) for _ in range(args.runs)
                )
                rows.append((name, f"{ms:.0f}", f"{cli:.0f}", str(o.considered), str(considered),
                             str(o.fitting)))  # fmt: skip
        help_ms = statistics.median(_cli(["--help"], db) for _ in range(args.runs))
        imports = _import_profile(db)
        python_ms = statistics.median(
            (lambda t: (subprocess.run([sys.executable, "-c", "pass"], check=False),
                        (time.perf_counter() - t) * 1000)[1])(time.perf_counter())
            for _ in range(args.runs)
        )  # fmt: skip
    width = max(len(r[0]) for r in rows)
    print(f"{'query':<{width}}  in-process ms  CLI wall ms  after SQL  of  fit")
    for name, ms, cli, after, total, fit in rows:
        print(f"{name:<{width}}  {ms:>13}  {cli:>11}  {after:>9}  {total:>4}  {fit:>4}")
    print(f"\nquants --help: {help_ms:.0f} ms wall (bare python start: {python_ms:.0f} ms)")
    print("import time of `quants search`, by top-level package (ms, cumulative):")
    for pkg, ms in imports:
        print(f"  {pkg:<16} {ms:7.1f}")
    print(json.dumps({"targets": {"in_process_ms": 100, "cli_ms": 500}}))


if __name__ == "__main__":
    main(sys.argv[1:])
