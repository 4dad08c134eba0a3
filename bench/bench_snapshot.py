"""Snapshot export / import / publish / pull over the 200k-quant benchmark catalog.

Targets: the export <= 1/5 of the SQLite file's size; import into an empty catalog
<= 60 s; a pull of an unchanged snapshot downloads 0 bytes.

Run: ``python -m bench bench_snapshot`` (or ``python bench/bench_snapshot.py [--quants N]
[--pg-admin URL]``). The catalog is bench_search's synthetic one (built in ~30 s). With
``--pg-admin`` (a PostgreSQL URL allowed to CREATE DATABASE) the import into an empty
PostgreSQL catalog is timed too. Publish and pull go through the Hub emulator of the tests
(tests/hub_emulator; LFS path, HF_HUB_DISABLE_XET=1) with the real huggingface_hub client.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_search import build  # noqa: E402
from crawler.base.config import Settings  # noqa: E402
from crawler.catalog import Catalog  # noqa: E402
from crawler.snapshot.export import export_snapshot  # noqa: E402
from crawler.snapshot.hubsync import publish_snapshot, pull_snapshot  # noqa: E402
from crawler.snapshot.import_ import import_snapshot  # noqa: E402

MIB = 1024 * 1024


def _sqlite_bytes(path: Path) -> int:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path.stat().st_size


#: CPU seconds of this process in the last _timed call: on a shared machine the wall time also
#: counts other processes' load (SQLite runs in-process, so its work is in here; a PostgreSQL
#: server's is not).
_CPU = [0.0]


def _timed(fn: Any) -> tuple[float, Any]:
    started, cpu = time.perf_counter(), time.process_time()
    out = fn()
    _CPU[0] = time.process_time() - cpu
    return time.perf_counter() - started, out


def _took(secs: float) -> str:
    return f"{secs:.1f} s ({_CPU[0]:.1f} cpu)"


def _pg_database(admin: str) -> tuple[str, Any]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    name = f"quants_bench_snap_{uuid.uuid4().hex[:8]}"
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()

    return make_url(admin).set(database=name).render_as_string(hide_password=False), drop


def main(argv: list[str]) -> None:
    """Build the catalog, export, import, publish and pull; print a table."""
    parser = argparse.ArgumentParser(prog="bench_snapshot")
    parser.add_argument("--quants", type=int, default=200_000)
    parser.add_argument("--pg-admin", default=os.environ.get("QUANTS_TEST_PG_URL"))
    args, _ = parser.parse_known_args(argv)
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="quants-bench-snap-") as tmp_name:
        tmp = Path(tmp_name)
        source = tmp / "catalog.sqlite"
        built = build(source, args.quants)
        db_bytes = _sqlite_bytes(source)
        print(f"catalog: {args.quants} quants, built in {built:.1f} s, {db_bytes / MIB:.1f} MiB")
        with Catalog.open(f"sqlite:///{source}") as catalog:
            secs, result = _timed(lambda: export_snapshot(catalog, tmp / "snap"))
        ratio = result.total_bytes / db_bytes
        rows.append(
            (
                "export (SQLite)",
                _took(secs),
                f"{result.total_bytes / MIB:.1f} MiB = 1/{1 / ratio:.1f} of the SQLite file"
                f" (target <= 1/5: {'ok' if ratio <= 0.2 else 'MISSED'})",
            )
        )
        for name, entry in sorted(result.manifest.files.items()):
            rows.append((f"  {name}", f"{entry.rows} rows", f"{entry.bytes / MIB:.2f} MiB"))
        target = tmp / "imported.sqlite"
        with Catalog.open(f"sqlite:///{target}") as catalog:
            secs, summary = _timed(lambda: import_snapshot(catalog, tmp / "snap"))
            rows.append(
                (
                    "import into empty SQLite",
                    _took(secs),
                    f"{summary.quants_added} quants (target <= 60 s: "
                    f"{'ok' if secs <= 60 else 'MISSED'})",
                )
            )
            secs, summary = _timed(lambda: import_snapshot(catalog, tmp / "snap"))
            rows.append(("import again (no change)", _took(secs), f"{summary.quants_kept} kept"))
        if args.pg_admin:
            url, drop = _pg_database(args.pg_admin)
            try:
                with Catalog.open(url) as catalog:
                    secs, summary = _timed(lambda: import_snapshot(catalog, tmp / "snap"))
                rows.append(
                    (
                        "import into empty PostgreSQL",
                        _took(secs),
                        f"{summary.quants_added} quants (target <= 60 s: "
                        f"{'ok' if secs <= 60 else 'MISSED'})",
                    )
                )
            finally:
                drop()
        rows += _hub_rows(tmp)
    width = max(len(r[0]) for r in rows)
    print(f"{'step':<{width}}  {'wall (cpu)':>18}  result")
    for step, took, what in rows:
        print(f"{step:<{width}}  {took:>18}  {what}")


def _hub_rows(tmp: Path) -> list[tuple[str, str, str]]:
    os.environ["HF_HUB_DISABLE_XET"] = "1"  # the emulator speaks LFS, not Xet
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ["HF_HOME"] = str(tmp / "hf-home")
    from huggingface_hub.utils.tqdm import disable_progress_bars

    from tests.hub_emulator import HubEmulator

    disable_progress_bars()
    rows = []
    with HubEmulator() as emu:
        settings = Settings(hf_endpoint=emu.endpoint, hf_token="hf_test_user")
        secs, pub = _timed(lambda: publish_snapshot(settings, tmp / "snap", "bench/catalog"))
        rows.append(("publish (emulator)", _took(secs), f"{pub.files} files, one commit"))
        puller = Settings(
            hf_endpoint=emu.endpoint, hf_token="hf_test_user", data_dir=tmp / "puller"
        )
        with Catalog.open(f"sqlite:///{tmp / 'pulled.sqlite'}") as catalog:
            secs, first = _timed(lambda: pull_snapshot(puller, catalog, "bench/catalog"))
            rows.append(
                (
                    "pull + import (empty)",
                    _took(secs),
                    f"{first.bytes_downloaded / MIB:.1f} MiB downloaded",
                )
            )
            emu.clear_log()
            secs, again = _timed(lambda: pull_snapshot(puller, catalog, "bench/catalog"))
            served = sum(
                r.bytes_sent
                for r in emu.requests(method="GET")
                if r.origin == "cdn" or "/resolve-cache/" in r.path
            )
            rows.append(
                (
                    "pull unchanged",
                    _took(secs),
                    f"{again.bytes_downloaded} bytes downloaded (emulator served {served} "
                    f"content bytes; target 0: {'ok' if served == 0 else 'MISSED'})",
                )
            )
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
