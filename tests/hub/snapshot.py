"""A comparable picture of a crawled catalog: every analysis fact, no timestamps or row ids.

Two crawls that saw the same Hub must give equal snapshots, however they were interrupted.
"""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path
from typing import Any

_QUERIES = {
    "repos": "SELECT repo_id, author, sha, scanned_sha, vanished_at IS NULL, downloads, likes,"
    " base_model FROM repos ORDER BY repo_id",
    "quants": "SELECT r.repo_id, q.path, q.revision, q.content_key, q.quant_label,"
    " q.architecture, q.base_model, q.file_type, q.shard_count, q.size_bytes, q.header_bytes,"
    " q.n_tensors, q.n_params, q.bpw, q.mtp_present, q.mtp_state, q.mtp_layers,"
    " q.mtp_min_bits, q.mtp_preserved, q.attn_min_bits, q.attn_preserved, q.dynamic,"
    " q.loadable_by_mainline, q.claims, q.profile, q.analysed_at IS NULL,"
    " q.vanished_at IS NULL FROM quants q JOIN repos r ON r.id = q.repo_pk"
    " ORDER BY r.repo_id, q.path",
    "files": "SELECT r.repo_id, f.path, f.kind, f.shard_index, f.shard_count, f.size_bytes,"
    " f.lfs_oid, f.blob_id, f.revision, f.analysed_oid, f.header_bytes, q.path,"
    " f.vanished_at IS NULL FROM files f JOIN repos r ON r.id = f.repo_pk"
    " LEFT JOIN quants q ON q.id = f.quant_id ORDER BY r.repo_id, f.path",
    "groups": "SELECT r.repo_id, q.path, g.group_name, g.n_tensors, g.n_params, g.n_bytes,"
    " g.bpw, g.min_bits, g.max_bits, g.types FROM tensor_groups g"
    " JOIN quants q ON q.id = g.quant_id JOIN repos r ON r.id = q.repo_pk"
    " ORDER BY r.repo_id, q.path, g.group_name",
    "memory": "SELECT r.repo_id, q.path, m.status, m.reason, m.weights_bytes,"
    " m.mtp_weights_bytes, m.expert_bytes, m.host_bytes, m.kv_bytes_per_token_f16,"
    " m.fixed_bytes_f16, m.coefficients FROM memory_models m"
    " JOIN quants q ON q.id = m.quant_id JOIN repos r ON r.id = q.repo_pk"
    " ORDER BY r.repo_id, q.path",
    "versions": "SELECT r.repo_id, q.path, v.revision, v.content_key, v.size_bytes, v.profile"
    " FROM quant_versions v JOIN quants q ON q.id = v.quant_id"
    " JOIN repos r ON r.id = q.repo_pk ORDER BY r.repo_id, q.path, v.id",
}


def sqlite_path(url: str) -> Path:
    """The file of a ``sqlite:///`` URL."""
    assert url.startswith("sqlite:///"), url
    return Path(url.removeprefix("sqlite:///"))


def snapshot(url: str) -> dict[str, Any]:
    """Every table's facts (tensor tables decompressed) as sorted lists of tuples."""
    conn = sqlite3.connect(f"file:{sqlite_path(url)}?mode=ro", uri=True)
    try:
        out: dict[str, Any] = {name: conn.execute(q).fetchall() for name, q in _QUERIES.items()}
        out["tensor_tables"] = [
            (repo_id, path, revision, encoding, n, zlib.decompress(data))
            for repo_id, path, revision, encoding, n, data in conn.execute(
                "SELECT r.repo_id, q.path, t.revision, t.encoding, t.n_tensors, t.data"
                " FROM tensor_tables t JOIN quants q ON q.id = t.quant_id"
                " JOIN repos r ON r.id = q.repo_pk ORDER BY r.repo_id, q.path"
            )
        ]
        return out
    finally:
        conn.close()


def integrity_ok(url: str) -> bool:
    """``PRAGMA integrity_check`` says ok and foreign keys hold."""
    conn = sqlite3.connect(str(sqlite_path(url)))
    try:
        ok = conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        return ok and conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()


def rows(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """The rows of one query on the SQLite catalog at ``url``."""
    conn = sqlite3.connect(str(sqlite_path(url)))
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()
