"""Export leaves out exactly the rows an import refuses, so one hostile value never makes a
whole snapshot unimportable.

Each case stores in a good catalog (tests/reliability/test_hostile_snapshots.py's) one value
that the crawl takes from the Hub or a GGUF header without a bound an import has: a listing's
repo id, author, sha, gated mode, counters or dates; a card's base model or a tag; a tree's LFS
oid; a header's architecture, base model URL, file type or expert count (read from
crawler/hub/records.py, crawler/crawl/repo.py and crawler/profile/analysis.py). Then: the
export's manifest counts the row by the column refused and the rows that hang off it, the
snapshot imports, the catalog it makes lacks exactly those rows, and a repo that kept its row
but lost others comes with ``scanned_sha`` empty (for the importer's crawl to read).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from crawler.catalog import Catalog
from crawler.snapshot.export import export_snapshot
from crawler.snapshot.import_ import import_snapshot
from crawler.snapshot.manifest import MANIFEST_NAME
from tests.reliability.test_hostile_snapshots import _good_catalog

REPO = "unsloth/Qwen3.6-27B-GGUF"
QUANT = "Qwen3.6-27B-UD-Q3_K_XL.gguf"
_CHILDREN = ("tensor_groups", "memory_models", "quant_versions", "tensor_tables")

#: (case, table, column, value): one value the crawl can store and an import refuses.
CASES: list[tuple[str, str, str, Any]] = [
    # the listing (repo_info / list_models): parse_listing checks only the one "/" of the id
    ("repo-id-escape", "repos", "repo_id", "unsloth/x\x1b[2J"),
    ("author-long", "repos", "author", "x" * 200),
    ("sha-not-hex", "repos", "sha", "g" * 40),
    ("gated-unknown", "repos", "gated", "yes"),
    ("likes-overflow", "repos", "likes", 1 << 31),
    ("downloads-negative", "repos", "downloads", -1),
    ("last-modified-1970", "repos", "last_modified", "1970-01-01 00:00:00.000000"),
    ("created-in-2999", "repos", "created_at", "2999-01-01 00:00:00.000000"),
    # the model card
    ("card-base-model-long", "repos", "base_model", "o/" + "b" * 300),
    ("tag-long", "repos", "tags", json.dumps(["gguf", "t" * 2000])),
    # the tree: a file name with terminal controls, an LFS oid that is not hex
    ("path-escape", "quants", "path", "\x1b]0;owned\x07-Q4_K_M.gguf"),
    ("lfs-oid-not-hex", "files", "lfs_oid", "z" * 64),
    # the GGUF header
    ("architecture-long", "quants", "architecture", "A" * 100),
    ("gguf-base-model-long", "quants", "base_model", "o/" + "b" * 300),
    ("file-type-overflow", "quants", "file_type", 1 << 40),
    ("expert-count-overflow", "memory_models", "n_expert", 1 << 40),
]


def _db(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _ids(conn: sqlite3.Connection) -> tuple[int, int]:
    repo_pk, quant_id = conn.execute(
        "SELECT r.id, q.id FROM quants q JOIN repos r ON r.id = q.repo_pk"
        " WHERE r.repo_id = ? AND q.path = ?",
        (REPO, QUANT),
    ).fetchone()
    return repo_pk, quant_id


def _set(
    conn: sqlite3.Connection, ids: tuple[int, int], table: str, column: str, value: Any
) -> None:
    repo_pk, quant_id = ids
    key, ident = {
        "repos": ("id", repo_pk),
        "quants": ("id", quant_id),
        "files": ("quant_id", quant_id),
        "memory_models": ("quant_id", quant_id),
    }[table]
    conn.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", (value, ident))
    conn.commit()


def _expected(
    conn: sqlite3.Connection, ids: tuple[int, int], table: str, column: str
) -> dict[str, dict[str, int]]:
    """What the manifest must count, from the catalog's own rows (not from the export)."""
    repo_pk, quant_id = ids

    def count(sql: str, *args: Any) -> int:
        n: int = conn.execute(sql, args).fetchone()[0]
        return n

    if table == "repos":
        # Every row of the repo goes; a row that carries the bad value itself (the repo id is
        # in every file) is counted by that column, the others by their repo.
        reason = column if column == "repo_id" else "repo_left_out"
        out = {"repos.parquet": {column: 1}}
        for name in ("quants", "files"):
            out[f"{name}.parquet"] = {
                reason: count(f"SELECT count(*) FROM {name} WHERE repo_pk = ?", repo_pk)
            }
        for name in _CHILDREN:
            out[f"{name}.parquet"] = {
                reason: count(
                    f"SELECT count(*) FROM {name} c JOIN quants q ON q.id = c.quant_id"
                    " WHERE q.repo_pk = ?",
                    repo_pk,
                )
            }
        return out
    if table == "quants":
        # The quant and what hangs off it: its children (keyed by its path) and its files.
        child = "path" if column == "path" else "quant_left_out"
        out = {
            "quants.parquet": {column: 1},
            "files.parquet": {
                "quant_path" if column == "path" else "quant_left_out": count(
                    "SELECT count(*) FROM files WHERE quant_id = ?", quant_id
                )
            },
        }
        for name in _CHILDREN:
            n = count(f"SELECT count(*) FROM {name} WHERE quant_id = ?", quant_id)
            out[f"{name}.parquet"] = {child: n}
        return out
    # A file or memory-model row alone.
    return {f"{table}.parquet": {column: 1}}


@pytest.mark.parametrize(("case", "table", "column", "value"), CASES, ids=[c[0] for c in CASES])
def test_export_leaves_out_what_import_refuses(
    tmp_path: Path, case: str, table: str, column: str, value: Any
) -> None:
    source = tmp_path / "source.sqlite"
    _good_catalog(f"sqlite:///{source}")
    with _db(source) as conn:
        conn.execute("UPDATE repos SET scanned_sha = sha")  # both repos read completely
        conn.commit()
        ids = _ids(conn)
        _set(conn, ids, table, column, value)
        want = _expected(conn, ids, table, column)
        rows = {
            f"{t}.parquet": conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("repos", "quants", "files", *_CHILDREN)
        }
    with Catalog.open(f"sqlite:///{source}") as catalog:
        result = export_snapshot(catalog, tmp_path / "snap", with_tensors=True)
    manifest = json.loads((tmp_path / "snap" / MANIFEST_NAME).read_text())
    assert manifest["left_out"] == want == result.manifest.left_out
    # Every row not counted was written.
    for name, n in rows.items():
        written = manifest["files"][name]["rows"]
        assert written == n - sum(want.get(name, {}).values()), name
    # Why the first row of each reason was refused, as the import would have said it.
    for name, reasons in want.items():
        if column in reasons:
            assert result.examples[(name, column)], name

    with Catalog.open(f"sqlite:///{tmp_path / 'imported.sqlite'}") as catalog:
        summary = import_snapshot(catalog, tmp_path / "snap")
    assert summary.to_json()["left_out"] == want
    assert summary.quants_added == rows["quants.parquet"] - sum(
        want.get("quants.parquet", {}).values()
    )
    repos = {
        r["repo_id"]: r["scanned_sha"]
        for r in pq.read_table(tmp_path / "snap" / "repos.parquet").to_pylist()
    }
    with _db(tmp_path / "imported.sqlite") as conn:
        imported = dict(conn.execute("SELECT repo_id, scanned_sha FROM repos").fetchall())
    assert imported == repos
    if table == "repos":
        assert set(imported) == {"someone/Qwen3.6-27B-GGUF"}
    else:
        # The repo kept its row but lost others: its crawl is not taken as complete.
        assert imported[REPO] is None and imported["someone/Qwen3.6-27B-GGUF"] is not None


def test_a_clean_catalog_leaves_nothing_out(tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 'source.sqlite'}"
    _good_catalog(source)
    with Catalog.open(source) as catalog:
        result = export_snapshot(catalog, tmp_path / "snap")
    assert result.manifest.left_out == {} and result.manifest.rows_left_out == 0
    assert json.loads((tmp_path / "snap" / MANIFEST_NAME).read_text())["left_out"] == {}
