"""A hostile-snapshot corpus: each case is refused whole and leaves the catalog byte-identical.

The base snapshot is a good export (tests/catalog/populate.py's catalog, with file rows, real
memory coefficients and a stored tensor table); each case changes one thing the way a hostile
or broken publisher could, rewrites the manifest so the checksums match, and imports it into a
populated catalog. Every case must raise SnapshotError naming the file (and the row and column
where there is one), with the catalog file's bytes unchanged. A few go through the real CLI:
exit 1, "error: ..." on the first line, never "internal error".
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from crawler.base.errors import SnapshotError
from crawler.catalog import Catalog
from crawler.catalog.tables import File, MemoryModel, Quant, Repo, TensorTable
from crawler.catalog.tensor_tables import TENSOR_TABLE_ENCODING, encode_tensor_table
from crawler.fit import MemoryCoefficients
from crawler.gguf.model import GGUFHeader, TensorInfo
from crawler.profile.analysis import AnalysedShard
from crawler.snapshot.columns import arrow_schema
from crawler.snapshot.export import export_snapshot
from crawler.snapshot.import_ import import_snapshot
from crawler.snapshot.manifest import MANIFEST_NAME
from tests.catalog.populate import T0, populate
from tests.cli import Cli

FUTURE = datetime(9999, 1, 1, tzinfo=UTC)


def _good_catalog(url: str) -> None:
    """populate()'s catalog plus what a crawl also stores: file rows, coefficients, a table."""
    populate(url)
    with Catalog.open(url) as catalog, catalog.session() as s:
        coeffs = MemoryCoefficients(status="ok", architecture="qwen35", n_layer=64).to_json()
        for m in s.scalars(select(MemoryModel)):
            m.coefficients = coeffs
        for q, repo in s.execute(select(Quant, Repo).join(Repo, Repo.id == Quant.repo_pk)):
            s.add(
                File(
                    repo_pk=repo.id,
                    quant_id=q.id,
                    path=q.path,
                    kind="gguf",
                    size_bytes=q.size_bytes,
                    lfs_oid="e" * 64,
                    revision="a" * 40,
                    first_seen_at=T0,
                )
            )
            header = GGUFHeader(
                version=3,
                metadata={"general.architecture": "qwen35"},
                tensors=(TensorInfo("blk.0.attn_q.weight", (4096, 4096), 8, 0),),
                alignment=32,
                data_offset=4096,
            )
            data = encode_tensor_table([AnalysedShard(q.path, "e" * 64, 4096, header)])
            s.add(
                TensorTable(
                    quant_id=q.id,
                    revision="a" * 40,
                    encoding=TENSOR_TABLE_ENCODING,
                    n_tensors=1,
                    data=data,
                )
            )


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, Path]:
    """(a good snapshot, a populated target catalog file)."""
    tmp = tmp_path_factory.mktemp("hostile-snapshots")
    source = f"sqlite:///{tmp / 'source.sqlite'}"
    _good_catalog(source)
    with Catalog.open(source) as catalog:
        export_snapshot(catalog, tmp / "good", with_tensors=True)
    target = tmp / "target.sqlite"
    populate(f"sqlite:///{target}")
    return tmp / "good", target


# -- mutations ------------------------------------------------------------------------------


def _rows(snap: Path, name: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(snap / name).to_pylist()
    return rows


def _write(
    snap: Path, name: str, rows: list[dict[str, Any]], table: pa.Table | None = None
) -> None:
    table = table if table is not None else pa.Table.from_pylist(rows, arrow_schema(name))
    pq.write_table(table, snap / name)
    _fix_manifest(snap, name, table.num_rows)


def _fix_manifest(snap: Path, name: str, rows: int | None = None) -> None:
    manifest = json.loads((snap / MANIFEST_NAME).read_text())
    data = (snap / name).read_bytes()
    entry = manifest["files"].setdefault(name, {})
    entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    if rows is not None:
        entry["rows"] = rows
    (snap / MANIFEST_NAME).write_text(json.dumps(manifest))


def cell(name: str, column: str, value: Any, row: int = 0) -> Callable[[Path], None]:
    def mutate(snap: Path) -> None:
        rows = _rows(snap, name)
        rows[row][column] = value
        _write(snap, name, rows)

    return mutate


def duplicate(name: str, **changes: Any) -> Callable[[Path], None]:
    def mutate(snap: Path) -> None:
        rows = _rows(snap, name)
        rows.append({**rows[0], **changes})
        _write(snap, name, rows)

    return mutate


def manifest(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def mutate(snap: Path) -> None:
        doc = json.loads((snap / MANIFEST_NAME).read_text())
        change(doc)
        (snap / MANIFEST_NAME).write_text(json.dumps(doc))

    return mutate


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _bomb(snap: Path) -> None:
    # 40 MiB of zeros in ~40 KB: the decompression bomb of a stored tensor table.
    cell("tensor_tables.parquet", "data", zlib.compress(b"0" * (40 * 1024 * 1024), 9))(snap)


def _many_tensors(snap: Path) -> None:
    doc = {"shards": [{"tensors": [["t", [1], 0, 0]] * 100_001}]}
    cell("tensor_tables.parquet", "data", zlib.compress(json.dumps(doc).encode()))(snap)


def _dictionary_bomb(snap: Path) -> None:
    # One 600 KB value used by 1000 rows: a small file that decodes to ~600 MB.
    rows = _rows(snap, "repos.parquet")
    big = json.dumps({"x": "a" * 600_000})
    many = [{**rows[0], "repo_id": f"bomb/r{i}", "card_data": big} for i in range(1000)]
    table = pa.Table.from_pylist(many, arrow_schema("repos.parquet"))
    _write(snap, "repos.parquet", many, table)


def _wrong_type(snap: Path) -> None:
    table = pq.read_table(snap / "quants.parquet")
    i = table.schema.get_field_index("bpw")
    table = table.set_column(i, "bpw", pa.array([str(v) for v in table.column(i).to_pylist()]))
    _write(snap, "quants.parquet", [], table)


def _symlink(snap: Path) -> None:
    # A link to a device: reading it would never end.
    (snap / "quants.parquet").unlink()
    os.symlink("/dev/zero", snap / "quants.parquet")


def _missing_repo(snap: Path) -> None:
    rows = _rows(snap, "quants.parquet")
    rows[0]["repo_id"] = "nobody/Unknown-GGUF"
    _write(snap, "quants.parquet", rows)


def _truncated(snap: Path) -> None:
    data = (snap / "files.parquet").read_bytes()
    (snap / "files.parquet").write_bytes(data[: len(data) // 2])
    _fix_manifest(snap, "files.parquet")


def _flipped(snap: Path) -> None:
    data = bytearray((snap / "quants.parquet").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (snap / "quants.parquet").write_bytes(bytes(data))


def _now(delta: timedelta) -> datetime:
    return datetime.now(UTC) + delta


R, Q, F, G, M, V, T = (
    "repos.parquet",
    "quants.parquet",
    "files.parquet",
    "tensor_groups.parquet",
    "memory_models.parquet",
    "quant_versions.parquet",
    "tensor_tables.parquet",
)

#: (case id, mutation, words the first line of the refusal must hold)
CASES: list[tuple[str, Callable[[Path], None], tuple[str, ...]]] = [
    # repo ids, by the Hub's grammar (the command-injection id of the report first)
    ("repo-id-shell", cell(R, "repo_id", "evil/x$(touch${IFS}/tmp/PWNED)"), (R, "repo_id")),
    ("repo-id-3-parts", cell(R, "repo_id", "a/b/c"), (R, "row 1", "repo_id")),
    ("repo-id-empty", cell(R, "repo_id", ""), (R, "repo_id")),
    ("repo-id-dash", cell(R, "repo_id", "-evil/x"), (R, "repo_id")),
    ("repo-id-escape", cell(R, "repo_id", "evil/x\x1b[2J"), (R, "repo_id")),
    ("repo-id-long", cell(R, "repo_id", "o/" + "a" * 200), (R, "repo_id")),
    ("repo-id-git", cell(R, "repo_id", "o/r.git"), (R, "repo_id")),
    ("repo-id-dashdash", cell(R, "repo_id", "o--r/x"), (R, "repo_id")),
    ("repo-id-dotdot", cell(R, "repo_id", "../etc"), (R, "repo_id")),
    ("repo-id-unicode", cell(R, "repo_id", "évil/x"), (R, "repo_id")),
    ("repo-id-space", cell(R, "repo_id", "o/r x"), (R, "repo_id")),
    ("quant-repo-id-shell", cell(Q, "repo_id", "o/r;id"), (Q, "repo_id")),
    ("repo-duplicate", duplicate(R), (R, "duplicate")),
    # repo values
    ("downloads-negative", cell(R, "downloads", -1), (R, "downloads")),
    ("likes-overflow", cell(R, "likes", 1 << 31), (R, "likes")),
    ("scanned-9999", cell(R, "scanned_at", FUTURE), (R, "scanned_at")),
    ("last-modified-1970", cell(R, "last_modified", datetime(1970, 1, 1, tzinfo=UTC)), (R,)),
    ("first-seen-tomorrow", cell(R, "first_seen_at", _now(timedelta(days=1))), (R,)),
    ("sha-not-hex", cell(R, "sha", "g" * 40), (R, "sha")),
    ("gated-unknown", cell(R, "gated", "yes"), (R, "gated")),
    ("author-long", cell(R, "author", "x" * 200), (R, "author")),
    ("tags-object", cell(R, "tags", '{"a": 1}'), (R, "tags")),
    ("tags-numbers", cell(R, "tags", "[1, 2]"), (R, "tags")),
    ("tags-not-json", cell(R, "tags", "not json"), (R, "tags")),
    ("card-list", cell(R, "card_data", "[1]"), (R, "card_data")),
    ("card-deep", cell(R, "card_data", _nested(5000)), (R, "card_data")),
    ("card-nan", cell(R, "card_data", '{"x": NaN}'), (R, "card_data")),
    ("card-infinity", cell(R, "card_data", '{"x": -Infinity}'), (R, "card_data")),
    ("card-huge", cell(R, "card_data", json.dumps({"x": "a" * (5 << 20)})), (R, "card_data")),
    ("dictionary-bomb", _dictionary_bomb, (R, "decode")),
    # quants: paths by the Hub's grammar
    ("path-dotdot", cell(Q, "path", "../x.gguf"), (Q, "path")),
    ("path-absolute", cell(Q, "path", "/abs.gguf"), (Q, "path")),
    ("path-empty-segment", cell(Q, "path", "a//b.gguf"), (Q, "path")),
    ("path-git", cell(Q, "path", ".git/x.gguf"), (Q, "path")),
    ("path-newline", cell(Q, "path", "x\nrm -rf.gguf"), (Q, "path")),
    ("path-empty", cell(Q, "path", ""), (Q, "path")),
    ("path-long", cell(Q, "path", "a" * 2000 + ".gguf"), (Q, "path")),
    ("label-long", cell(Q, "quant_label", "Q" * 100), (Q, "quant_label")),
    # quants: numbers
    ("bpw-nan", cell(Q, "bpw", float("nan")), (Q, "bpw")),
    ("bpw-inf", cell(Q, "bpw", float("inf")), (Q, "bpw")),
    ("bpw-negative", cell(Q, "bpw", -1.0), (Q, "bpw")),
    ("bpw-1000", cell(Q, "bpw", 1000.0), (Q, "bpw")),
    ("quality-1e9", cell(Q, "quality_score", 1e9), (Q, "quality_score")),
    ("quality-nan", cell(Q, "quality_score", float("nan")), (Q, "quality_score")),
    ("attn-bits-minus-inf", cell(Q, "attn_min_bits", float("-inf")), (Q, "attn_min_bits")),
    ("size-negative", cell(Q, "size_bytes", -5), (Q, "size_bytes")),
    ("n-tensors-overflow", cell(Q, "n_tensors", 1 << 40), (Q, "n_tensors")),
    ("shard-count-negative", cell(Q, "shard_count", -1), (Q, "shard_count")),
    ("verify-experts-nan", cell(Q, "fit_verify_experts", float("nan")), (Q,)),
    ("analysed-9999", cell(Q, "analysed_at", FUTURE), (Q, "analysed_at")),
    ("analysed-next-hour", cell(Q, "analysed_at", _now(timedelta(hours=1))), (Q, "analysed_at")),
    ("revision-not-hex", cell(Q, "revision", "main; rm -rf /"), (Q, "revision")),
    # quants: JSON shapes
    ("claims-object", cell(Q, "claims", '{"x": 1}'), (Q, "claims")),
    ("claims-numbers", cell(Q, "claims", "[1]"), (Q, "claims")),
    ("profile-list", cell(Q, "profile", "[]"), (Q, "profile")),
    ("profile-broken", cell(Q, "profile", "{bad json"), (Q, "profile")),
    ("profile-infinity", cell(Q, "profile", '{"bpw": Infinity}'), (Q, "profile")),
    ("quant-duplicate", duplicate(Q), (Q, "duplicate")),
    ("quant-of-unknown-repo", _missing_repo, ("nobody/Unknown-GGUF",)),
    # files
    ("file-kind", cell(F, "kind", "evil"), (F, "kind")),
    ("file-path-dotdot", cell(F, "path", "x/../y.gguf"), (F, "path")),
    ("file-quant-path", cell(F, "quant_path", "/etc/passwd"), (F, "quant_path")),
    ("file-oid-not-hex", cell(F, "lfs_oid", "not-hex"), (F, "lfs_oid")),
    ("file-size-negative", cell(F, "size_bytes", -1), (F, "size_bytes")),
    ("file-duplicate", duplicate(F), (F, "duplicate")),
    # tensor groups
    ("types-strings", cell(G, "types", '{"Q8_0": "many"}'), (G, "types")),
    ("types-negative", cell(G, "types", '{"Q8_0": -1}'), (G, "types")),
    ("min-bits-99", cell(G, "min_bits", 99.0), (G, "min_bits")),
    ("group-duplicate", duplicate(G), (G, "duplicate")),
    # memory models: the coefficients the crawl writes
    ("coeffs-string", cell(M, "coefficients", '{"status": "ok", "n_layer": "x"}'), (M,)),
    ("coeffs-missing", cell(M, "coefficients", "{}"), (M, "coefficients")),
    ("coeffs-kv-group", cell(M, "coefficients", '{"status":"ok","kv_groups":[{"count":1}]}'), (M,)),
    ("coeffs-negative", cell(M, "coefficients", '{"status":"ok","n_embd":-5}'), (M,)),
    ("coeffs-float", cell(M, "coefficients", '{"status":"ok","weights_bytes":1e400}'), (M,)),
    ("coeffs-layers", cell(M, "coefficients", '{"status":"ok","expert_layers":[[1,2]]}'), (M,)),
    ("memory-status", cell(M, "status", "pwned"), (M, "status")),
    ("memory-bytes-negative", cell(M, "weights_bytes", -1), (M, "weights_bytes")),
    # history
    ("version-9999", cell(V, "analysed_at", FUTURE), (V, "analysed_at")),
    ("version-profile-string", cell(V, "profile", '"x"'), (V, "profile")),
    # tensor tables
    ("tensor-table-bomb", _bomb, (T, "data")),
    ("tensor-table-not-zlib", cell(T, "data", b"not zlib at all"), (T, "data")),
    ("tensor-table-shape", cell(T, "data", zlib.compress(b'{"shards": 1}')), (T, "data")),
    ("tensor-table-100k", _many_tensors, (T, "data")),
    ("tensor-table-encoding", cell(T, "encoding", "pickle"), (T, "encoding")),
    ("tensor-table-count", cell(T, "n_tensors", -1), (T, "n_tensors")),
    # the files and the manifest themselves
    ("wrong-column-type", _wrong_type, (Q, "columns")),
    ("symlink-to-device", _symlink, (Q, "not a regular file")),
    ("truncated-parquet", _truncated, (F,)),
    ("flipped-byte", _flipped, (Q, "sha256")),
    ("newer-schema", manifest(lambda d: d.update(schema_version=99)), ("schema version 99",)),
    ("not-a-manifest", manifest(lambda d: d.update(format="other")), ("manifest",)),
    ("unknown-file", manifest(lambda d: d["files"].update({"../../x": d["files"][Q]})), ("x",)),
    ("rows-mismatch", manifest(lambda d: d["files"][Q].update(rows=99)), (Q, "rows")),
    ("rows-huge", manifest(lambda d: d["files"][Q].update(rows=10**12)), (Q, "rows")),
    ("missing-required", manifest(lambda d: d["files"].pop(F)), (F,)),
    ("sha-short", manifest(lambda d: d["files"][Q].update(sha256="ab")), (Q, "sha256")),
    # the export's count of rows left out: read, so of the shape the export writes
    ("left-out-list", manifest(lambda d: d.update(left_out=[1])), ("left_out",)),
    ("left-out-file", manifest(lambda d: d.update(left_out={"../x": {"path": 1}})), ("left_out",)),
    ("left-out-escape", manifest(lambda d: d.update(left_out={Q: {"\x1b[2J": 1}})), ("left_out",)),
    ("left-out-negative", manifest(lambda d: d.update(left_out={Q: {"path": -1}})), ("left_out",)),
    ("left-out-bool", manifest(lambda d: d.update(left_out={Q: {"path": True}})), ("left_out",)),
]


def _catalog_bytes(target: Path) -> bytes:
    return hashlib.sha256(target.read_bytes()).digest()


def test_the_base_snapshot_is_good(base, tmp_path) -> None:
    good, _ = base
    url = f"sqlite:///{tmp_path / 'fresh.sqlite'}"
    with Catalog.open(url) as catalog:
        summary = import_snapshot(catalog, good)
    assert summary.quants_added == 5 and summary.files_written == 5


@pytest.mark.parametrize(("case", "mutate", "words"), CASES, ids=[c[0] for c in CASES])
def test_hostile_snapshot_is_refused_and_the_catalog_is_byte_identical(
    base, tmp_path, case: str, mutate: Callable[[Path], None], words: tuple[str, ...]
) -> None:
    good, target = base
    snap = tmp_path / "snap"
    shutil.copytree(good, snap)
    mutate(snap)
    before = _catalog_bytes(target)
    with Catalog.open(f"sqlite:///{target}") as catalog, pytest.raises(SnapshotError) as info:
        import_snapshot(catalog, snap)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    assert _catalog_bytes(target) == before
    assert not Path("/tmp/PWNED").exists()


def test_corpus_size() -> None:
    assert len(CASES) >= 60


@pytest.mark.parametrize("case", ["repo-id-shell", "analysed-9999", "tensor-table-bomb"])
def test_cli_refuses_in_one_line(base, tmp_path, case: str) -> None:
    good, target = base
    mutate, words = next((m, w) for c, m, w in CASES if c == case)
    snap = tmp_path / "snap"
    shutil.copytree(good, snap)
    mutate(snap)
    before = _catalog_bytes(target)
    out = Cli(tmp_path).run("import", str(snap), "--db", f"sqlite:///{target}", ok=False)
    assert out.returncode == 1, out.stdout
    first = out.stderr.splitlines()[0]
    assert first.startswith("error: ") and "internal error" not in out.stderr
    assert "row 1" in first and all(w in first for w in words), first
    assert "\x1b" not in out.stderr  # the hostile text is escaped for the terminal
    assert _catalog_bytes(target) == before


def test_export_never_writes_through_a_planted_symlink(base, tmp_path) -> None:
    good, _ = base
    out = tmp_path / "export"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for name in ("quants.parquet.tmp", "manifest.json.tmp"):
        os.symlink(victim, out / name)
    os.symlink(victim, out / "repos.parquet")  # the final name too: replaced, not followed
    source = f"sqlite:///{tmp_path / 'source.sqlite'}"
    with Catalog.open(source) as catalog:
        import_snapshot(catalog, good)
        export_snapshot(catalog, out)
    assert victim.read_text() == "precious"
    assert not (out / "repos.parquet").is_symlink()
    assert not any(p.name.endswith(".tmp") for p in out.iterdir())
    with Catalog.open(f"sqlite:///{tmp_path / 'again.sqlite'}") as catalog:
        assert import_snapshot(catalog, out).quants_added == 5
