"""Search at Hub scale: a Hub-shaped synthetic catalog of up to 1M quants, every sort and tier.

Run: ``python -m bench bench_search_hub [--quants 1000000] [--db URL] [--runs 7]`` (SQLite in a
temporary file unless ``--db`` names an empty database, e.g. PostgreSQL; ``--keep FILE`` builds
the SQLite file once and reuses it, ``--reuse`` times a ``--db`` built before).

**The catalog's shape** (plan). The Hub is not ~1,200 identical uploads of a dozen
models (bench/bench_search.py's catalog): it is many base models with a long tail, a few
uploaders that quantize everything and many that upload one model once.

* Architectures and base-model sizes: the model shapes of bench/bench_search.py (Llama 3.x, Qwen3,
  Qwen3.5/3.6 hybrid with MTP, Qwen3 MoE, GLM-4.5-Air, DeepSeek-V3 MLA, Gemma 3), each with
  fine-tunes of its own (``-Instruct``, ``-abliterated``, ``-Coder``, community merges), so the
  names and repos vary while the memory shapes are real.
* Uploaders per base model: a Zipf law (exponent 1.1, up to 40 uploaders): a few bases are
  quantized by dozens of uploaders, most by one or two.
* Quants per repo, by uploader style: a full imatrix ladder (the 20+ types of llama.cpp's
  ``llama-quantize`` list, tools/quantize/quantize.cpp ``QUANT_OPTIONS``) for the large
  uploaders, a static ladder of ~12 for others, and 1-3 files for the single-quant repos that
  ggml-org's gguf-my-repo Space creates (``<user>/<model>-<TYPE>-GGUF``).
* Downloads: a log-normal spread, most repos near zero; update times spread over a year.

What public figures support, and what stays assumed. Found with public sources (no census of
the Hub's GGUF repos by architecture, uploader and quant count is published):

* the long tail of base models: Laufer, Oderinwale and Kleinberg, "Anatomy of a Machine
  Learning Ecosystem: 2 Million Models on Hugging Face" (arXiv:2508.06811, 2025) study 1.86
  million models and find fine-tuning family trees that "vary widely in size and structure";
* quantizations as a large share of the language-model part of the Hub (and rare for vision
  models): Horwitz et al., "Charting and Navigating Hugging Face's Model Atlas"
  (arXiv:2503.10633, 2025);
* downloads: the Hub counts every GET or HEAD of a GGUF file as a download
  (https://huggingface.co/docs/hub/models-download-stats), so a repo's count is file requests;
* the quant types: llama.cpp tools/quantize/quantize.cpp ``QUANT_OPTIONS``.

Assumed, with no published figure behind them: the Zipf exponent (1.1) and cap (40) of
uploaders per base model, the uploader styles (6 who quantize everything, 300 teams with a
static ladder, 200k single-quant users), 1-3 files per single-quant repo, the log-normal
downloads (mu 3, sigma 2.5, 10% at zero) and the architecture mix (uniform over bench_search's
model shapes, so the catalog has only ~150 distinct search shapes: a real catalog has many
more, one per base model size and recipe). ``plan()``'s parameters are where measured ones
would go.

Every sort (quality, speed, size, margin, ctx, downloads, updated) runs with the default tier
(gpu), ``--tier experts_cpu`` and ``--tier partial``, without a name query and with QUERIES, each
``--runs`` times after a warm-up; the table gives the median and the p95 in process (the
``crawler.library.search.search`` call on an open reader), the targets being 100 ms (SQLite) and
150 ms (PostgreSQL).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.bench_search import FAMILIES, LADDER, _coefficients
from crawler.base.errors import NothingFits
from crawler.catalog import Catalog
from crawler.catalog.reader import Reader
from crawler.catalog.store import refresh_live
from crawler.catalog.tables import MemoryModel, Quant, Repo, TensorGroup
from crawler.library.search import search
from crawler.ranking.columns import search_scalars, stored_columns

#: Uploader styles: (share of uploaders, quant labels a repo of theirs holds).
FULL = [label for label, _, _ in LADDER]
STATIC = ["Q2_K", "Q3_K_M", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "IQ4_XS", "Q5_K_S", "BF16"]
SINGLE = ["Q4_K_M", "Q8_0", "Q5_K_M", "Q4_0", "Q6_K"]
VARIANTS = ["", "-Instruct", "-abliterated", "-Coder", "-heretic", "-MTP", "-Thinking", "-merge"]
_ZIPF = 1.1
_MAX_UPLOADERS = 40


def _zipf_uploaders(rng: random.Random) -> int:
    """Uploaders of one base model: P(k) ~ k^-1.1, k = 1..40."""
    weights = [k**-_ZIPF for k in range(1, _MAX_UPLOADERS + 1)]
    return rng.choices(range(1, _MAX_UPLOADERS + 1), weights)[0]


def plan(n_quants: int, seed: int = 27) -> Iterator[tuple[str, str, str, int, list[str]]]:
    """(repo id, author, family name, family index, quant labels) of each repo, until
    ``n_quants`` quants are planned."""
    rng = random.Random(seed)
    big = [f"big{i}" for i in range(6)]  # the few who quantize everything
    done = base_no = 0
    while done < n_quants:
        base_no += 1
        fam_i = rng.randrange(len(FAMILIES))
        base = f"{FAMILIES[fam_i][0]}{rng.choice(VARIANTS)}-b{base_no}"
        authors: set[str] = set()
        for k in range(_zipf_uploaders(rng)):
            style = rng.random()
            if k < 2 and style < 0.6:
                author, labels = rng.choice(big), FULL
            elif style < 0.35:
                author, labels = f"team{rng.randrange(300)}", STATIC
            else:
                author = f"user{rng.randrange(200_000)}"
                labels = rng.sample(SINGLE, rng.choice((1, 1, 1, 2, 3)))
            labels = labels[: n_quants - done]
            if not labels:
                return
            if author in authors:
                continue  # one repo per uploader and base model
            authors.add(author)
            yield f"{author}/{base}-GGUF", author, base, fam_i, labels
            done += len(labels)


def _template_rows(fam_i: int, label: str) -> tuple[dict[str, Any], list[dict[str, Any]], dict]:
    """The quant, tensor-group and memory-model columns every copy of (family, label) shares
    (computed once: the crawl's own search-column functions)."""
    fam = FAMILIES[fam_i]
    _, bits, attn = next(x for x in LADDER if x[0] == label)
    co = _coefficients(fam, bits).to_json()
    total = fam[2] * 1e9
    groups = []
    for g, share, b in (("attn", 0.12, attn), ("ffn_exps" if fam[9] else "ffn", 0.78, bits),
                        ("output", 0.05, 6.56), ("token_embd", 0.05, bits)):  # fmt: skip
        n = int(total * share)
        groups.append({"group_name": g, "n_tensors": 64, "n_params": n, "n_bytes": int(n * b / 8),
                       "bpw": b, "min_bits": b, "max_bits": b})  # fmt: skip
    kv = sum(2 * g["count"] * (g["k_width"] + g["v_width"]) for g in co["kv_groups"])
    fixed = co["recurrent_layers"] * (co["recurrent_r"] + co["recurrent_s"]) * 4
    quant = {
        "quant_label": label, "architecture": fam[1],
        "size_bytes": co["weights_bytes"] + co["expert_bytes"] + co["host_bytes"],
        "n_params": int(total), "bpw": bits, "mtp_present": fam[12],
        "mtp_state": "present" if fam[12] else "absent",
        "mtp_min_bits": attn if fam[12] else None, "mtp_preserved": fam[12] and attn >= 6,
        "attn_min_bits": attn, "attn_preserved": attn >= 6, "dynamic": attn > bits,
        "loadable_by_mainline": True, "shard_count": 1,
        "fit_weights_bytes": co["weights_bytes"], "fit_expert_bytes": co["expert_bytes"],
        "fit_mtp_bytes": co["mtp_weights_bytes"], "fit_kv_per_token": kv,
        "fit_fixed_bytes": fixed,
        **stored_columns(
            sorted((g["group_name"], g["n_params"], g["n_bytes"], g["bpw"]) for g in groups),
            "ok", co, label,
        ),
    }  # fmt: skip
    memory = {
        "status": "ok", "weights_bytes": co["weights_bytes"],
        "mtp_weights_bytes": co["mtp_weights_bytes"], "expert_bytes": co["expert_bytes"],
        "host_bytes": co["host_bytes"], "kv_bytes_per_token_f16": kv, "fixed_bytes_f16": fixed,
        "coefficients": co, **search_scalars(co),
    }  # fmt: skip
    return quant, groups, memory


def _loader(conn: Any, table: Any) -> tuple[list[tuple[str, Any]], Any]:
    """(columns with their defaults, write(rows)) for a raw bulk load of ``table``: executemany
    on SQLite, COPY on PostgreSQL. Rows are tuples in column order, values as the driver takes
    them."""
    columns = [
        (c.name, c.default.arg if c.default is not None and c.default.is_scalar else None)
        for c in table.__table__.columns
    ]
    cols = [name for name, _ in columns]
    raw = conn.connection.driver_connection
    if conn.dialect.name == "postgresql":
        sql = f"COPY {table.__tablename__} ({', '.join(cols)}) FROM STDIN"

        def copy(rows: list[tuple[Any, ...]]) -> None:
            with raw.cursor() as cur, cur.copy(sql) as cp:
                for row in rows:
                    cp.write_row(row)

        return columns, copy
    marks = ", ".join("?" * len(cols))
    sql = f"INSERT INTO {table.__tablename__} ({', '.join(cols)}) VALUES ({marks})"

    def many(rows: list[tuple[Any, ...]]) -> None:
        raw.executemany(sql, rows)

    return columns, many


def _value(v: Any, sqlite: bool) -> Any:
    if isinstance(v, dict | list):
        return json.dumps(v, separators=(",", ":"))
    if sqlite and isinstance(v, datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S.%f")  # SQLAlchemy's SQLite DateTime storage
    return v


def build(url: str, n_quants: int, seed: int = 27) -> tuple[float, int]:
    """Write the catalog into ``url`` (raw bulk loads, 20k quants a batch); return (seconds,
    repos)."""
    started = time.perf_counter()
    rng = random.Random(seed + 1)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    cache: dict[tuple[int, str], tuple[dict[str, Any], list[dict[str, Any]], dict]] = {}
    qid = rid = 0
    with Catalog.open(url) as catalog, catalog.engine.begin() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:
            conn.exec_driver_sql("PRAGMA synchronous=OFF")
        tables = (Repo, Quant, TensorGroup, MemoryModel)
        loaders = [_loader(conn, t) for t in tables]
        pending: list[list[dict[str, Any]]] = [[], [], [], []]

        def flush() -> None:
            for (cols, write), rows in zip(loaders, pending, strict=True):
                write([tuple(_value(r.get(c, d), sqlite) for c, d in cols) for r in rows])
                rows.clear()

        repos, quants, groups, memory = pending
        for repo_id, author, base, fam_i, labels in plan(n_quants, seed):
            rid += 1
            downloads = int(math.exp(rng.gauss(3.0, 2.5))) if rng.random() < 0.9 else 0
            updated = t0 + timedelta(minutes=rng.randint(0, 525_600))
            repos.append(
                {"id": rid, "repo_id": repo_id, "author": author, "sha": f"{rid:040x}",
                 "downloads": downloads, "likes": downloads // 500, "last_modified": updated,
                 "private": False, "base_model": f"org/{base}", "first_seen_at": t0,
                 "last_seen_at": t0}
            )  # fmt: skip
            for label in labels:
                qid += 1
                key = (fam_i, label)
                if key not in cache:
                    q0, gs0, mem0 = _template_rows(fam_i, label)
                    # Serialised once: every copy stores the same JSON text.
                    mem0 = {k: _value(v, sqlite) for k, v in mem0.items()}
                    cache[key] = (q0, gs0, mem0)
                q, gs, mem = cache[key]
                quants.append(
                    {**q, "id": qid, "repo_pk": rid, "path": f"{base}-{label}.gguf",
                     "revision": "a" * 40, "base_model": f"org/{base}", "analysed_at": t0,
                     "first_seen_at": t0}
                )  # fmt: skip
                groups.extend({**g, "quant_id": qid} for g in gs)
                memory.append({**mem, "quant_id": qid})
            if len(quants) >= 20_000:
                flush()
        flush()
    loaded = time.perf_counter() - started
    with Catalog.open(url, upgrade=False, check=False) as catalog:
        refresh_live(catalog)  # live flag and search text, as the crawl's write path sets them
        if catalog.dialect == "postgresql":
            with catalog.engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                    "VACUUM ANALYZE"
                )
    print(f"  rows loaded in {loaded:.0f} s, live flags and search text in "
          f"{time.perf_counter() - started - loaded:.0f} s")  # fmt: skip
    return time.perf_counter() - started, rid


SORTS = ("quality", "speed", "size", "margin", "ctx", "downloads", "updated")
#: Name queries: a model size that ~1/12 of this catalog's quants share (8 % of them: the
#: substring index finds too many, and the search reads by the sort's order), and one base model
#: of it (its 14 quants at any size from 200k: read through the index, crawler.catalog.name_index).
QUERIES = ("qwen3.6 27b", "qwen3.6 27b b2902")
TIERS: tuple[tuple[str, list[str]], ...] = (
    ("gpu", ["--gpu", "rtx 4090", "--ctx", "32768"]),
    (
        "experts_cpu",
        ["--gpu", "rtx 3060 12 gb", "--ram", "64", "--ctx", "32768", "--tier", "experts_cpu"],
    ),
    ("partial", ["--gpu", "rtx 3060 12 gb", "--ctx", "32768", "--tier", "partial"]),
)


def _request(argv: Sequence[str]) -> Any:
    from crawler.cli.search_cmd import request_from_argv

    return request_from_argv(list(argv))


def _p95(times: Sequence[float]) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def main(argv: list[str]) -> None:
    """Build the catalog, time every sort x tier (x a name query), print a table."""
    ap = argparse.ArgumentParser(prog="bench_search_hub")
    ap.add_argument("--quants", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--db", help="an empty database URL to build into, instead of SQLite")
    ap.add_argument("--keep", type=Path, help="build the SQLite file here and keep it")
    ap.add_argument(
        "--reuse", action="store_true", help="--db already holds a built catalog: only time it"
    )
    ap.add_argument(
        "--cap", type=float, default=5.0, help="a search whose warm-up takes longer is run once"
    )
    ap.add_argument(
        "--skip",
        default="",
        help="tier:sort pairs not to run, comma-separated (e.g. partial:margin, seconds a search)",
    )
    args = ap.parse_args(argv)
    skip = {tuple(x.split(":", 1)) for x in args.skip.split(",") if ":" in x}
    with tempfile.TemporaryDirectory(prefix="quants-bench-") as tmp:
        path = args.keep or Path(tmp) / "catalog.sqlite"
        db = args.db or f"sqlite:///{path}"
        if not args.reuse and (args.keep is None or not path.exists()):
            seconds, repos = build(db, args.quants)
            print(f"catalog: {args.quants} quants in {repos} repos, built in {seconds:.0f} s")
        rows = []
        with Reader.open(db) as catalog:
            for query in (None, *QUERIES):
                for tier, targs in TIERS:
                    for sort in SORTS:
                        if (tier, sort) in skip:
                            rows.append((query or "-", tier, sort, "skipped", "skipped", "-", "-"))
                            continue
                        qargs = ([query] if query else []) + [*targs, "--sort", sort]
                        req = _request([*qargs, "--limit", "20"])
                        t = time.perf_counter()
                        try:
                            res: Any = search(catalog, req)  # warm: statement compilation
                        except NothingFits:
                            rows.append((query or "-", tier, sort, "-", "-", "0", "0"))
                            continue
                        warm = [(time.perf_counter() - t) * 1000]
                        times = []
                        for _ in range(args.runs if warm[0] < args.cap * 1000 else 0):
                            t = time.perf_counter()
                            res = search(catalog, req)
                            times.append((time.perf_counter() - t) * 1000)
                        times = times or warm  # past the cap: the one (warm-up) run
                        rows.append((query or "-", tier, sort, f"{statistics.median(times):.0f}",
                                     f"{_p95(times):.0f}", str(res.outcome.fitting),
                                     str(res.outcome.considered)))  # fmt: skip
    print(f"{'query':<18} {'tier':<12} {'sort':<10} {'median ms':>9} {'p95 ms':>7} {'fit':>7}"
          f" {'read':>7}")  # fmt: skip
    for q, tier, sort, med, p95, n, read in rows:
        print(f"{q:<18} {tier:<12} {sort:<10} {med:>9} {p95:>7} {n:>7} {read:>7}")
    worst = max((float(r[4]) for r in rows if r[4] not in ("-", "skipped")), default=0.0)
    print(json.dumps({"worst_p95_ms": worst, "targets_ms": {"sqlite": 100, "postgresql": 150}}))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
