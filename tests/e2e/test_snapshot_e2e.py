"""Snapshots end to end: crawl (emulator) -> ``quants export`` -> ``quants import`` (real CLI).

Into an empty SQLite and an empty PostgreSQL catalog: ``v_quants`` / ``v_tensor_groups`` and
``quants search --json`` answers equal the crawled catalog's; every analysis fact and tensor
table survives (tests/hub/snapshot.py); import twice = once; older and newer analyses; damaged
snapshots refused whole with nothing written; a crawl after an import reads no header; DuckDB
answers the query docs/snapshots.md documents.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crawler.snapshot.manifest import MANIFEST_NAME
from tests.cli import clean_env, run_quants
from tests.fixtures.shared import CrawledWorld, world_emulator
from tests.fixtures.world import FileCache
from tests.hub.snapshot import integrity_ok, snapshot
from tests.hub_emulator.server import HubEmulator
from tests.pg import databases
from tests.reliability.test_hostile_text import REPO as HOSTILE
from tests.reliability.test_hostile_text import assert_inert
from tests.schemas import checked


def quants(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return run_quants(*args, env=clean_env(tmp), timeout=180)


def ok(*args: str, tmp: Path) -> str:
    out = quants(*args, tmp=tmp)
    assert out.returncode == 0, out.stderr
    return out.stdout


def crawl(emu: HubEmulator, db: str, tmp: Path) -> dict[str, Any]:
    out = ok("crawl", "--endpoint", emu.endpoint, "--db", db, "--all", "--json", tmp=tmp)
    doc: dict[str, Any] = checked("crawl", out)
    return doc


@pytest.fixture(scope="module")
def crawled(tmp_path_factory, crawled_world: CrawledWorld) -> tuple[str, Path, Path]:
    """(catalog url, its snapshot with tensors, tmp dir): the session's crawled world, exported.

    The world holds the hostile repo: the export leaves out the rows an import refuses (a file
    name with terminal controls) and the snapshot imports."""
    tmp = tmp_path_factory.mktemp("snapshot-e2e")
    db = crawled_world.copy(tmp / "crawled")
    ok("export", str(tmp / "snap"), "--db", db, "--with-tensors", tmp=tmp)
    return db, tmp / "snap", tmp


def _has_control(text: str) -> bool:
    """What an import refuses in a name (docs/snapshots.md): C0 controls and DEL."""
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


@pytest.fixture(scope="module")
def expected(crawled) -> str:
    """The crawled catalog as an import of its snapshot must read: without the quants and files
    whose names carry control characters (and their children and files), and with their repo
    marked for a crawl to read (``scanned_sha`` empty). Made by hand here, not by the export."""
    db, _snap, tmp = crawled
    path = tmp / "expected.sqlite"
    shutil.copy(db.removeprefix("sqlite:///"), path)
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        quants = [
            (qid, repo)
            for qid, repo, qpath in conn.execute(
                "SELECT q.id, r.repo_id, q.path FROM quants q JOIN repos r ON r.id = q.repo_pk"
            )
            if _has_control(qpath)
        ]
        files = [
            (fid, repo)
            for fid, repo, fpath, qid in conn.execute(
                "SELECT f.id, r.repo_id, f.path, f.quant_id FROM files f"
                " JOIN repos r ON r.id = f.repo_pk"
            )
            if _has_control(fpath) or qid in {q for q, _ in quants}
        ]
        assert {repo for _, repo in quants} == {HOSTILE}  # the world has hostile names
        conn.executemany("DELETE FROM files WHERE id = ?", [(f,) for f, _ in files])
        conn.executemany("DELETE FROM quants WHERE id = ?", [(q,) for q, _ in quants])
        conn.execute("UPDATE repos SET scanned_sha = NULL WHERE repo_id = ?", (HOSTILE,))
        conn.commit()
    finally:
        conn.close()
    return f"sqlite:///{path}"


def _norm(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] in " T":
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            return value
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
    return value


def view(db: str, tmp: Path, name: str) -> list[tuple[Any, ...]]:
    """Every row of a stable view, normalised across SQLite and PostgreSQL, sorted."""
    rows = json.loads(ok("sql", f"SELECT * FROM {name}", "--json", "--db", db, tmp=tmp))
    return sorted(tuple(_norm(v) for v in r.values()) for r in rows)


SEARCH = ("--vram", "24", "--ctx", "32768", "--limit", "1000", "--json")


def search(db: str, tmp: Path) -> Any:
    return json.loads(ok("search", *SEARCH, "--db", db, tmp=tmp))


def same_answer(imported: Any, crawled: Any) -> bool:
    """The imported catalog answers as the crawled one did, each row saying where it came from."""
    assert all(r["provenance"]["from"] == "import" for r in imported["results"])
    assert all(r["provenance"] == {"from": "crawl"} for r in crawled["results"])

    def strip(doc: Any) -> Any:
        return {**doc, "results": [{**r, "provenance": None} for r in doc["results"]]}

    return bool(strip(imported) == strip(crawled))


def import_(snap: Path, db: str, tmp: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(ok("import", str(snap), "--db", db, "--json", tmp=tmp))
    return doc


def _children(db: str) -> dict[str, int]:
    """Rows that hang off the quants whose names carry control characters, per snapshot file."""
    conn = sqlite3.connect(db.removeprefix("sqlite:///"))
    try:
        bad = [q for q, path in conn.execute("SELECT id, path FROM quants") if _has_control(path)]
        marks = ",".join("?" * len(bad))
        return {
            f"{table}.parquet": conn.execute(
                f"SELECT count(*) FROM {table} WHERE quant_id IN ({marks})", bad
            ).fetchone()[0]
            for table in ("tensor_groups", "memory_models", "quant_versions", "tensor_tables")
        }
    finally:
        conn.close()


def test_export_leaves_out_what_import_refuses_and_the_snapshot_imports(crawled, expected) -> None:
    db, snap, tmp = crawled
    # The hostile file name's quant and file rows, and its quant's children (keyed by that
    # name too), counted by the column refused.
    manifest = json.loads((snap / MANIFEST_NAME).read_text())
    children = _children(db)
    assert all(children.values())
    assert manifest["left_out"] == {
        "files.parquet": {"path": 1},
        "quants.parquet": {"path": 1},
        **{name: {"path": n} for name, n in children.items()},
    }
    # The text output says so, escaped for the terminal.
    out = quants("export", str(tmp / "snap-text"), "--db", db, tmp=tmp)
    assert out.returncode == 0, out.stderr
    assert_inert(out.stdout, out.stderr)
    total = 2 + sum(children.values())
    untensored = total - children["tensor_tables.parquet"]  # no --with-tensors here
    assert f"left out {untensored} rows that `quants import` refuses" in out.stdout
    line = next(x for x in out.stdout.splitlines() if x.startswith("  files.parquet "))
    assert line.split()[1:4] == ["1", "row", "path:"]
    assert "path: file path" in line and "holds a control character" in line
    assert r"\x1b]0;owned\x07" in line  # the name shown, its controls escaped

    target = f"sqlite:///{tmp / 'imported-hostile.sqlite'}"
    summary = import_(snap, target, tmp)
    assert summary["left_out"] == manifest["left_out"]
    assert view(target, tmp, "v_quants") == view(expected, tmp, "v_quants")
    assert snapshot(target) == snapshot(expected)
    assert integrity_ok(target)
    # The hostile repo's other quants came along; every printed command is free of controls.
    text = quants("search", *SEARCH[:-1], "--db", target, tmp=tmp)
    assert text.returncode == 0, text.stderr
    assert_inert(text.stdout, text.stderr)
    doc = search(target, tmp)
    hostile = [r for r in doc["results"] if r["repo"] == HOSTILE]
    assert hostile and not any(_has_control(r["path"]) for r in hostile)
    assert [r["command"] for r in hostile if r["command"]]  # the commands checked below
    assert_inert(json.dumps(doc, ensure_ascii=False))
    # The import's text output names the rows left out in one note.
    out = quants("import", str(snap), "--db", target, tmp=tmp)
    assert out.returncode == 0, out.stderr
    assert f"note: the snapshot's export left out {total} rows" in out.stderr


def test_a_hand_made_snapshot_with_a_hostile_name_is_still_refused(crawled) -> None:
    """The export's leaving out is a courtesy; the import's check is the trust boundary."""
    from tests.reliability.test_hostile_text import NAME_ESC

    _db, snap, tmp = crawled
    target = f"sqlite:///{tmp / 'hand-made-target.sqlite'}"
    ok("db", "upgrade", "--db", target, tmp=tmp)
    forged = _damaged_copy(snap, tmp / "hand-made")
    table = pq.read_table(forged / "files.parquet")
    row = table.slice(0, 1).to_pylist()
    row[0].update(path=NAME_ESC, quant_path=None)
    pq.write_table(
        pa.concat_tables([table, pa.Table.from_pylist(row, table.schema)]),
        forged / "files.parquet",
    )
    _rewrite_manifest(forged, "files.parquet")
    manifest = json.loads((forged / MANIFEST_NAME).read_text())
    manifest["files"]["files.parquet"]["rows"] += 1
    manifest["left_out"] = {}
    (forged / MANIFEST_NAME).write_text(json.dumps(manifest))
    out = _refused(forged, tmp, target, "files.parquet", "column path", "control character")
    assert_inert(out.stderr)


def test_round_trip_into_empty_sqlite_equals_the_crawl(crawled, expected) -> None:
    db, snap, tmp = crawled
    target = f"sqlite:///{tmp / 'imported.sqlite'}"
    summary = import_(snap, target, tmp)
    assert summary["quants_added"] > 10 and summary["quants_updated"] == 0
    assert view(target, tmp, "v_quants") == view(expected, tmp, "v_quants")
    assert view(target, tmp, "v_tensor_groups") == view(expected, tmp, "v_tensor_groups")
    assert same_answer(search(target, tmp), search(expected, tmp))
    # Every analysis fact, history row and (decompressed) tensor table came along.
    assert snapshot(target) == snapshot(expected)
    assert integrity_ok(target)
    # The bulk load into the empty tables dropped their indexes and made them again: the schema
    # is the migrations' own; and times are stored as the text the crawl stores.
    assert sqlite_schema(target) == sqlite_schema(db)
    assert raw(target, RAW_TIMES) == raw(expected, RAW_TIMES)


def sqlite_schema(db: str) -> list[tuple[Any, ...]]:
    return sorted(
        raw(
            db, "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        )
    )


RAW_TIMES = (
    "SELECT r.repo_id, q.path, q.analysed_at, q.first_seen_at, r.scanned_at, r.first_seen_at"
    " FROM quants q JOIN repos r ON r.id = q.repo_pk ORDER BY r.repo_id, q.path"
)


def raw(db: str, statement: str) -> list[tuple[Any, ...]]:
    """Rows as SQLite stores them (no type conversion)."""
    conn = sqlite3.connect(db.removeprefix("sqlite:///"))
    try:
        return conn.execute(statement).fetchall()
    finally:
        conn.close()


def pg_schema(url: str) -> list[tuple[Any, ...]]:
    """Every index and constraint of a PostgreSQL catalog, as the server defines them."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            indexes = conn.execute(
                text(
                    "SELECT tablename, indexname, indexdef FROM pg_indexes"
                    " WHERE schemaname = 'public'"
                )
            ).all()
            keys = conn.execute(
                text(
                    "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid),"
                    " convalidated"
                    " FROM pg_constraint WHERE connamespace = 'public'::regnamespace"
                )
            ).all()
    finally:
        engine.dispose()
    return sorted(tuple(r) for r in [*indexes, *keys])


def test_import_puts_the_connections_settings_back(crawled) -> None:
    from crawler.catalog import Catalog
    from crawler.snapshot.import_ import import_snapshot

    _db, snap, tmp = crawled
    with Catalog.open(f"sqlite:///{tmp / 'settings.sqlite'}") as catalog:
        with catalog.engine.connect() as conn:
            before = conn.exec_driver_sql("PRAGMA cache_size").scalar()
            first = id(conn.connection.dbapi_connection)
        import_snapshot(catalog, snap)
        with catalog.engine.connect() as conn:
            # The pooled connection the import used, with its page cache as it was.
            assert id(conn.connection.dbapi_connection) == first
            assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == before


@pytest.mark.postgres
def test_round_trip_into_empty_postgresql_equals_the_crawl(crawled, expected) -> None:
    _db, snap, tmp = crawled
    with databases("quants_snap") as new:
        target = new()
        import_(snap, target, tmp)
        assert view(target, tmp, "v_quants") == view(expected, tmp, "v_quants")
        assert view(target, tmp, "v_tensor_groups") == view(expected, tmp, "v_tensor_groups")
        assert same_answer(search(target, tmp), search(expected, tmp))
        # The dropped indexes and foreign keys were made again, as the migrations make them.
        fresh = new()
        ok("db", "upgrade", "--db", fresh, tmp=tmp)
        assert pg_schema(target) == pg_schema(fresh)
        # And back out of PostgreSQL: the same rows give the same files.
        ok("export", str(tmp / "from-pg"), "--db", target, "--with-tensors", tmp=tmp)
        for name in ("quants.parquet", "tensor_groups.parquet", "memory_models.parquet"):
            assert pq.read_table(tmp / "from-pg" / name).equals(pq.read_table(snap / name)), name


def test_import_twice_is_import_once_and_crawl_after_import_reads_only_the_marked_repo(
    crawled,
    world_cache: FileCache,
) -> None:
    db, snap, tmp = crawled
    target = f"sqlite:///{tmp / 'twice.sqlite'}"
    import_(snap, target, tmp)
    once = snapshot(target)
    again = import_(snap, target, tmp)
    assert again["quants_added"] == again["quants_updated"] == again["repos_added"] == 0
    assert again["versions_added"] == 0 and again["quants_kept"] > 10
    assert snapshot(target) == once
    # The crawl treats the pulled entries as its own: nothing unchanged is read again, except
    # the repo whose rows the export left out (exported as not fully read): this crawl reads
    # it, its imported quants again and the left-out one for the first time.
    with world_emulator(world_cache, tmp / "hostile") as emulator:
        summary = crawl(emulator, target, tmp)
    crawled_quants = snapshot(db)["quants"]
    assert summary["quants_analysed"] == sum(q[0] == HOSTILE for q in crawled_quants) > 1
    assert {q[:2] for q in snapshot(target)["quants"]} == {q[:2] for q in crawled_quants}
    # gated/broken repos are retried, and the hostile one is read
    assert summary["repos_unchanged"] >= len(once["repos"]) - 4
    assert summary["repos_new"] == 0


def _sql(db: str, statement: str, *params: Any) -> None:
    path = db.removeprefix("sqlite:///")
    conn = sqlite3.connect(path)
    try:
        conn.execute(statement, params)
        conn.commit()
    finally:
        conn.close()


def _label(db: str, path: str) -> Any:
    conn = sqlite3.connect(db.removeprefix("sqlite:///"))
    try:
        return conn.execute("SELECT quant_label FROM quants WHERE path = ?", (path,)).fetchone()
    finally:
        conn.close()


def _just_now() -> str:
    """A time after the module's crawl and not after the import's (validate.py's cap)."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")


def test_newer_analysis_wins_older_loses_and_nothing_local_is_lost(crawled) -> None:
    db, snap, tmp = crawled
    some = snapshot(db)["quants"]
    path_a, path_b = some[0][1], some[1][1]
    # "newer": a copy of the catalog where quant A was re-analysed later (a newer rule set
    # labels it differently) and quant B is unknown (a catalog that never saw it).
    newer = tmp / "newer.sqlite"
    shutil.copy(db.removeprefix("sqlite:///"), newer)
    newer_db = f"sqlite:///{newer}"
    _sql(
        newer_db,
        "UPDATE quants SET quant_label='RELABELLED', analysed_at=? WHERE path = ?",
        _just_now(),
        path_a,
    )
    _sql(newer_db, "DELETE FROM quants WHERE path = ?", path_b)
    ok("export", str(tmp / "newer-snap"), "--db", newer_db, tmp=tmp)

    # Newer snapshot into a catalog that imported the older one: A's newer analysis wins (both
    # are imported), B stays; A now names the newer snapshot as its source.
    older_db = f"sqlite:///{tmp / 'older.sqlite'}"
    import_(snap, older_db, tmp)
    summary = import_(tmp / "newer-snap", older_db, tmp)
    assert summary["quants_updated"] == 1
    assert _label(older_db, path_a) == ("RELABELLED",)
    assert _label(older_db, path_b) is not None
    labels = {r[0]: r[3] for r in view(older_db, tmp, "v_quants") if r[2] == path_a}
    assert set(labels.values()) == {"RELABELLED"}
    sources = dict(_sources(older_db))
    assert sources[path_a] == f"directory {(tmp / 'newer-snap').resolve()}"
    assert sources[path_b] == f"directory {snap.resolve()}"

    # Into the crawled catalog itself: the local crawl's own reads outrank any import.
    local = tmp / "local.sqlite"
    shutil.copy(db.removeprefix("sqlite:///"), local)
    local_db = f"sqlite:///{local}"
    summary = import_(tmp / "newer-snap", local_db, tmp)
    assert summary["quants_updated"] == 0 and summary["quants_added"] == 0
    assert _label(local_db, path_a) == _label(db, path_a)
    assert all(source is None for _, source in _sources(local_db))

    # Older snapshot into the newer catalog: its local reads are kept; B is added back, imported.
    summary = import_(snap, newer_db, tmp)
    assert summary["quants_updated"] == 0 and summary["quants_added"] == 1
    assert _label(newer_db, path_a) == ("RELABELLED",)
    assert _label(newer_db, path_b) == _label(db, path_b)
    assert dict(_sources(newer_db))[path_b] == f"directory {snap.resolve()}"


def _sources(db: str) -> list[tuple[str, str | None]]:
    conn = sqlite3.connect(db.removeprefix("sqlite:///"))
    try:
        return conn.execute("SELECT path, source FROM quants").fetchall()
    finally:
        conn.close()


def _counts(db: str) -> dict[str, int]:
    conn = sqlite3.connect(db.removeprefix("sqlite:///"))
    try:
        return {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in (
                "repos",
                "quants",
                "files",
                "tensor_groups",
                "memory_models",
                "quant_versions",
                "tensor_tables",
            )
        }
    finally:
        conn.close()


def _damaged_copy(snap: Path, dest: Path) -> Path:
    shutil.copytree(snap, dest)
    return dest


def _rewrite_manifest(snap: Path, name: str, **changes: Any) -> None:
    import hashlib

    manifest = json.loads((snap / MANIFEST_NAME).read_text())
    data = (snap / name).read_bytes()
    manifest["files"][name].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    manifest.update(changes)
    (snap / MANIFEST_NAME).write_text(json.dumps(manifest))


def _refused(snap: Path, tmp: Path, target: str, *words: str) -> subprocess.CompletedProcess[str]:
    before = _counts(target)
    schema = sqlite_schema(target)
    out = quants("import", str(snap), "--db", target, tmp=tmp)
    assert out.returncode == 1, out.stdout
    first = out.stderr.splitlines()[0]
    assert first.startswith("error: ") and "Traceback" not in out.stderr
    for word in words:
        assert word in first, first
    assert _counts(target) == before
    assert sqlite_schema(target) == schema  # the indexes dropped for the load are back
    return out


def test_damaged_snapshots_are_refused_whole_with_nothing_written(crawled) -> None:
    _db, snap, tmp = crawled
    target = f"sqlite:///{tmp / 'damaged-target.sqlite'}"
    ok("db", "upgrade", "--db", target, tmp=tmp)
    assert sum(_counts(target).values()) == 0

    # One flipped byte: the checksum says so.
    bad = _damaged_copy(snap, tmp / "bad-sha")
    raw = bytearray((bad / "quants.parquet").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (bad / "quants.parquet").write_bytes(bytes(raw))
    _refused(bad, tmp, target, "quants.parquet", "sha256")

    # Truncated Parquet whose manifest was rewritten to match: the footer check says so.
    cut = _damaged_copy(snap, tmp / "truncated")
    data = (cut / "tensor_groups.parquet").read_bytes()
    (cut / "tensor_groups.parquet").write_bytes(data[: len(data) // 2])
    _rewrite_manifest(cut, "tensor_groups.parquet")
    _refused(cut, tmp, target, "tensor_groups.parquet", "Parquet")

    # A snapshot from a newer schema.
    new = _damaged_copy(snap, tmp / "newer-schema")
    manifest = json.loads((new / MANIFEST_NAME).read_text())
    manifest["schema_version"] = 99
    (new / MANIFEST_NAME).write_text(json.dumps(manifest))
    _refused(new, tmp, target, "schema version 99", "newer")

    # Valid files whose content is inconsistent (a version of a quant the snapshot lacks):
    # found half-way through the merge, after repos and quants were written -> rolled back.
    odd = _damaged_copy(snap, tmp / "inconsistent")
    table = pq.read_table(odd / "quant_versions.parquet")
    extra = table.slice(0, 1).to_pylist()
    extra[0]["path"] = "no-such-quant.gguf"
    pq.write_table(
        pa.concat_tables([table, pa.Table.from_pylist(extra, table.schema)]),
        odd / "quant_versions.parquet",
    )
    _rewrite_manifest(odd, "quant_versions.parquet")
    manifest = json.loads((odd / MANIFEST_NAME).read_text())
    manifest["files"]["quant_versions.parquet"]["rows"] += 1
    (odd / MANIFEST_NAME).write_text(json.dumps(manifest))
    _refused(odd, tmp, target, "no-such-quant.gguf")

    # Not a snapshot at all.
    _refused(tmp, tmp, target, "manifest.json")


DUCKDB_QUERY = """
SELECT q.repo_id, q.path, q.quant_label, q.size_bytes, q.attn_min_bits
FROM 'quants.parquet' q
WHERE q.mtp_present AND q.mtp_preserved AND q.vanished_at IS NULL
ORDER BY q.size_bytes, q.repo_id, q.path
"""


def test_duckdb_reads_the_export_and_the_documented_query_answers(crawled) -> None:
    duckdb = pytest.importorskip("duckdb")
    db, snap, tmp = crawled
    docs = (Path(__file__).resolve().parents[2] / "docs" / "snapshots.md").read_text()
    assert DUCKDB_QUERY.strip() in docs  # the query the docs show is the one tested here
    conn = duckdb.connect()
    conn.execute(f"SET file_search_path = '{snap}'")
    got = conn.execute(DUCKDB_QUERY).fetchall()
    want = json.loads(
        ok(
            "sql",
            "SELECT r.repo_id, q.path, q.quant_label, q.size_bytes, q.attn_min_bits"
            " FROM quants q JOIN repos r ON r.id = q.repo_pk WHERE q.mtp_present AND"
            " q.mtp_preserved AND q.vanished_at IS NULL"
            " ORDER BY q.size_bytes, r.repo_id, q.path",
            "--json",
            "--db",
            db,
            tmp=tmp,
        )
    )
    assert got and [list(r) for r in got] == [list(r.values()) for r in want]
    # Every query the docs show runs on the export.
    import re

    for query in re.findall(r"```sql\n(.*?)```", docs, re.S):
        conn.execute(query).fetchall()
    # Every file is readable, with the row count the manifest states.
    manifest = json.loads((snap / MANIFEST_NAME).read_text())
    for name, entry in manifest["files"].items():
        n = conn.execute(f"SELECT count(*) FROM '{snap / name}'").fetchone()[0]
        assert n == entry["rows"], name


# --- publish / pull through the emulator -------------------------------------------------------

TOKEN = "hf_test_user"
DATASET = "quants-bot/gguf-catalog"


def hub_env(tmp: Path, emu: HubEmulator, *, token: bool = True) -> dict[str, str]:
    # The emulator speaks the LFS batch protocol, not Xet: HF_HUB_DISABLE_XET=1 is
    # huggingface_hub's documented switch (constants.py) that makes it upload that way.
    extra = {"QUANTS_HF_ENDPOINT": emu.endpoint, "HF_HUB_DISABLE_XET": "1"}
    if token:
        extra["HF_TOKEN"] = TOKEN
    return clean_env(tmp, **extra)


def hub_cli(emu: HubEmulator, tmp: Path, *args: str, token: bool = True) -> Any:
    out = run_quants(*args, "--json", env=hub_env(tmp, emu, token=token), timeout=180)
    assert TOKEN not in out.stdout + out.stderr  # never printed
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def downloaded(emu: HubEmulator) -> dict[str, int]:
    """Content bytes the emulator served per file (GET bodies of the CDN and resolve-cache)."""
    out: dict[str, int] = {}
    for r in emu.requests(method="GET"):
        if r.origin == "cdn" or "/resolve-cache/" in r.path:
            out[r.path.rsplit("/", 1)[-1]] = out.get(r.path.rsplit("/", 1)[-1], 0) + r.bytes_sent
    return out


def test_publish_then_pull_on_another_machine_answers_searches_without_crawling(
    crawled, expected
) -> None:
    db, _snap, tmp = crawled
    publisher, puller = tmp / "publisher", tmp / "puller"
    target = f"sqlite:///{puller / 'pulled.sqlite'}"
    with HubEmulator() as emu:
        # Anonymous: refused with a one-line message, nothing created.
        out = run_quants("publish", DATASET, "--db", db, env=hub_env(publisher, emu, token=False))
        errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
        assert out.returncode == 1 and len(errors) == 1 and "not authorised" in errors[0]
        assert DATASET not in emu.state.datasets

        first = hub_cli(emu, publisher, "publish", DATASET, "--db", db)
        repo = emu.state.datasets[DATASET]
        assert repo.head.sha == first["commit"] and len(repo.commits) == 2  # create + one commit
        assert set(repo.head.files) == {
            ".gitattributes",
            MANIFEST_NAME,
            *[
                "repos.parquet",
                "quants.parquet",
                "files.parquet",
                "tensor_groups.parquet",
                "memory_models.parquet",
                "quant_versions.parquet",
            ],
        }
        assert all(repo.head.files[n].lfs for n in repo.head.files if n.endswith(".parquet"))

        # The second machine: pull into an empty catalog, then search it with no crawl.
        pulled = hub_cli(emu, puller, "pull", DATASET, "--db", target)
        assert pulled["commit"] == first["commit"] and pulled["imported"]["quants_added"] > 10
        assert pulled["bytes_downloaded"] == sum(downloaded(emu).values()) > 0
        assert view(target, tmp, "v_quants") == view(expected, tmp, "v_quants")
        assert same_answer(search(target, tmp), search(expected, tmp))

        # Unchanged: publishing again makes no commit; pulling again downloads 0 bytes.
        again = hub_cli(emu, publisher, "publish", DATASET, "--db", db)
        assert again["commit"] == first["commit"] and len(repo.commits) == 2
        emu.clear_log()
        second = hub_cli(emu, puller, "pull", DATASET, "--db", target)
        assert second["bytes_downloaded"] == 0 and downloaded(emu) == {}
        assert second["imported"] is None

        # One quant re-analysed: only the files whose content changed are fetched again.
        newer = tmp / "publisher.sqlite"
        shutil.copy(db.removeprefix("sqlite:///"), newer)
        path_a = snapshot(db)["quants"][0][1]
        _sql(
            f"sqlite:///{newer}",
            "UPDATE quants SET quant_label='RELABELLED', analysed_at=? WHERE path = ?",
            _just_now(),
            path_a,
        )
        third = hub_cli(emu, publisher, "publish", DATASET, "--db", f"sqlite:///{newer}")
        assert third["commit"] != first["commit"] and len(repo.commits) == 3
        emu.clear_log()
        fourth = hub_cli(emu, puller, "pull", DATASET, "--db", target)
        fetched = downloaded(emu)
        assert fourth["imported"]["quants_updated"] == 1
        assert fourth["bytes_downloaded"] == sum(fetched.values())
        assert "RELABELLED" in {r[3] for r in view(target, tmp, "v_quants")}
        # LFS blobs are served by sha256 on the CDN, git files by name from resolve-cache:
        # only the changed quants file and the manifest travelled.
        assert set(fetched) == {repo.head.files["quants.parquet"].sha256, MANIFEST_NAME}

        # --revision: the first snapshot again (older analyses lose, nothing is lost).
        old = hub_cli(emu, puller, "pull", DATASET, "--revision", first["commit"], "--db", target)
        assert old["commit"] == first["commit"] and old["imported"]["quants_updated"] == 0
        assert "RELABELLED" in {r[3] for r in view(target, tmp, "v_quants")}


def test_a_falsified_import_is_undone_by_crawl_verify_imported(
    crawled,
    world_cache: FileCache,
) -> None:
    """The "quality 100, dated 9999" attack: an imported analysis survives a plain crawl (the
    repo's commit did not change), so --verify-imported re-reads it from the Hub."""
    db, _snap, tmp = crawled
    path_a = snapshot(db)["quants"][0][1]
    honest = _label(db, path_a)
    forged = tmp / "forged.sqlite"
    shutil.copy(db.removeprefix("sqlite:///"), forged)
    forged_db = f"sqlite:///{forged}"
    _sql(
        forged_db,
        "UPDATE quants SET quant_label='FORGED', quality_score=100, analysed_at=? WHERE path = ?",
        _just_now(),
        path_a,
    )
    ok("export", str(tmp / "forged-snap"), "--db", forged_db, tmp=tmp)
    target = f"sqlite:///{tmp / 'verify.sqlite'}"
    import_(tmp / "forged-snap", target, tmp)
    assert _label(target, path_a) == ("FORGED",)
    # The world the crawled catalog came from. A plain crawl reads only the repo the export
    # marked (its hostile name was left out); the forged row survives it.
    hostile = sum(q[0] == HOSTILE for q in snapshot(db)["quants"])
    with world_emulator(world_cache, tmp / "hostile-v") as emulator:
        plain = crawl(emulator, target, tmp)
        assert plain["quants_analysed"] == hostile and _label(target, path_a) == ("FORGED",)
        out = ok(
            "crawl", "--endpoint", emulator.endpoint, "--db", target, "--all", "--json",
            "--verify-imported", tmp=tmp,
        )  # fmt: skip
    verified = json.loads(out)
    # Every imported quant re-read (the plain crawl read the hostile repo's already).
    assert verified["quants_analysed"] >= len(snapshot(db)["quants"]) - 3 - hostile
    assert _label(target, path_a) == honest
    sources = dict(_sources(target))
    assert sources[path_a] is None  # now this catalog's own read
    doc = json.loads(ok("search", *SEARCH, "--db", target, tmp=tmp))
    assert all(r["provenance"] == {"from": "crawl"} for r in doc["results"])


def test_bad_stored_rows_are_skipped_and_counted_not_fatal(crawled) -> None:
    """Rows the import would refuse, written around it (old data, a bug): search, the web app,
    changes and reprofile skip and count them; none answers an internal error or a 500."""
    from starlette.testclient import TestClient

    from crawler.web import create_app

    db, _snap, tmp = crawled
    bad = tmp / "bad-rows.sqlite"
    shutil.copy(db.removeprefix("sqlite:///"), bad)
    bad_db = f"sqlite:///{bad}"
    conn = sqlite3.connect(bad)
    try:
        qid, repo, path = conn.execute(
            "SELECT q.id, r.repo_id, q.path FROM quants q JOIN repos r ON r.id = q.repo_pk"
            " JOIN memory_models m ON m.quant_id = q.id WHERE m.status = 'ok'"
            " AND q.vanished_at IS NULL ORDER BY q.quality_score DESC LIMIT 1"
        ).fetchone()
        conn.execute("UPDATE memory_models SET coefficients = '{broken' WHERE quant_id = ?", (qid,))
        conn.execute("UPDATE quants SET claims = '{', profile = '[' WHERE id = ?", (qid,))
        conn.execute("UPDATE quant_versions SET profile = 'nope' WHERE quant_id = ?", (qid,))
        conn.execute("UPDATE tensor_tables SET data = ? WHERE quant_id = ?", (b"not zlib", qid))
        conn.commit()
    finally:
        conn.close()
    text = quants("search", *SEARCH[:-1], "--db", bad_db, tmp=tmp)
    assert text.returncode == 0, text.stderr
    assert f"1 skipped: stored analysis unreadable (e.g. {repo}/{path})" in text.stderr
    doc = json.loads(ok("search", *SEARCH, "--db", bad_db, tmp=tmp))
    assert doc["counts"]["unreadable"] == 1 and doc["unreadable"] == [f"{repo}/{path}"]
    assert (repo, path) not in {(r["repo"], r["path"]) for r in doc["results"]}
    for args in (("changes",), ("reprofile", "--json")):
        out = quants(*args, "--db", bad_db, tmp=tmp)
        assert out.returncode == 0 and "internal error" not in out.stderr, out.stderr
    reprofiled = json.loads(ok("reprofile", "--json", "--db", bad_db, tmp=tmp))
    assert reprofiled["failed"] == 1
    client = TestClient(create_app(bad_db), base_url="http://127.0.0.1")
    quant = {"repo": repo, "path": path}
    for url, params in (
        ("/api/search", {"vram": 24, "ctx": 32768, "limit": 100}),
        ("/", {"vram": 24, "ctx": 32768, "limit": 100}),
        ("/scans", {}),
        ("/api/scans", {}),
        ("/quant", quant),
    ):
        assert client.get(url, params=params).status_code == 200, url
    page = client.get("/api/quant", params=quant).json()
    assert set(page["unreadable"]) == {"memory model", "claims", "tensor table"}
