"""A hostile-dataset ``quants pull`` corpus against the Hub emulator (the real CLI, the real
huggingface_hub client).

Each dataset is what a hostile or broken publisher could push. ``pull`` must fetch the manifest
first and then only the files it names, after the Hub's listing agrees with their declared size
and sha256; a dataset that is not a good snapshot is refused in one line (exit 1, never an
internal error), leaving the catalog byte-identical. Checked in the emulator's request log: what
was downloaded, and that nothing else was.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crawler.catalog import Catalog
from crawler.snapshot.columns import arrow_schema
from crawler.snapshot.export import export_snapshot
from crawler.snapshot.manifest import MANIFEST_NAME
from tests.catalog.populate import populate
from tests.cli import clean_env, run_quants
from tests.hub_emulator.server import HubEmulator
from tests.hub_emulator.state import Blob
from tests.reliability.test_hostile_snapshots import _good_catalog

Files = dict[str, bytes]


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Files:
    """The files of a good snapshot (with tensors), by name."""
    tmp = tmp_path_factory.mktemp("hostile-pull")
    url = f"sqlite:///{tmp / 'source.sqlite'}"
    _good_catalog(url)
    with Catalog.open(url) as catalog:
        export_snapshot(catalog, tmp / "snap", with_tensors=True)
    return {p.name: p.read_bytes() for p in (tmp / "snap").iterdir()}


def _manifest(files: Files) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(files[MANIFEST_NAME])
    return doc


def _set_manifest(files: Files, doc: dict[str, Any]) -> None:
    files[MANIFEST_NAME] = json.dumps(doc).encode()


def _rewrite(files: Files, name: str, column: str, value: Any) -> None:
    """One cell changed, the manifest made to match (a consistent but hostile snapshot)."""
    table = pq.read_table(pa.BufferReader(files[name]))
    rows = table.to_pylist()
    rows[0][column] = value
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, arrow_schema(name)), sink)
    data = sink.getvalue().to_pybytes()
    files[name] = data
    doc = _manifest(files)
    doc["files"][name].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    _set_manifest(files, doc)


def extra_junk(files: Files) -> None:
    files["junk.parquet"] = b"\0" * (3 * 1024 * 1024)
    files["data/other.parquet"] = b"PAR1" * 1000


def size_lie(files: Files) -> None:
    doc = _manifest(files)
    doc["files"]["quants.parquet"]["bytes"] += 1
    _set_manifest(files, doc)


def sha_lie(files: Files) -> None:
    doc = _manifest(files)
    doc["files"]["quants.parquet"]["sha256"] = "0" * 64
    _set_manifest(files, doc)


def huge_manifest(files: Files) -> None:
    doc = _manifest(files)
    doc["padding"] = "x" * (2 * 1024 * 1024)
    _set_manifest(files, doc)


def no_manifest(files: Files) -> None:
    del files[MANIFEST_NAME]


def manifest_not_json(files: Files) -> None:
    files[MANIFEST_NAME] = b"{not json"


def unknown_file(files: Files) -> None:
    doc = _manifest(files)
    doc["files"]["../../etc/passwd"] = doc["files"]["quants.parquet"]
    _set_manifest(files, doc)


def missing_file(files: Files) -> None:
    del files["files.parquet"]


def newer_schema(files: Files) -> None:
    doc = _manifest(files)
    doc["schema_version"] = 99
    _set_manifest(files, doc)


def shell_repo_id(files: Files) -> None:
    _rewrite(files, "repos.parquet", "repo_id", "evil/x$(touch${IFS}/tmp/PWNED)")


def future_analysis(files: Files) -> None:
    _rewrite(files, "quants.parquet", "analysed_at", datetime(9999, 1, 1, tzinfo=UTC))


def falsified_quality(files: Files) -> None:
    _rewrite(files, "quants.parquet", "quality_score", float("inf"))


def tensor_bomb(files: Files) -> None:
    _rewrite(files, "tensor_tables.parquet", "data", zlib.compress(b"0" * (40 << 20), 9))


def broken_json(files: Files) -> None:
    _rewrite(files, "memory_models.parquet", "coefficients", "{broken")


#: (case, mutation, words of the first error line, whether any Parquet byte may be downloaded)
CASES: list[tuple[str, Callable[[Files], None], tuple[str, ...], bool]] = [
    ("size-differs-from-hub", size_lie, ("quants.parquet", "bytes"), False),
    ("sha256-differs-from-hub", sha_lie, ("quants.parquet", "sha256"), False),
    ("huge-manifest", huge_manifest, ("manifest.json", "bytes"), False),
    ("no-manifest", no_manifest, ("manifest.json",), False),
    ("manifest-not-json", manifest_not_json, ("not JSON",), False),
    ("unknown-file", unknown_file, ("unknown file",), False),
    ("missing-file", missing_file, ("files.parquet", "not in the dataset"), False),
    ("newer-schema", newer_schema, ("schema version 99",), False),
    ("shell-repo-id", shell_repo_id, ("repos.parquet", "repo_id"), True),
    ("analysed-9999", future_analysis, ("quants.parquet", "analysed_at"), True),
    ("quality-inf", falsified_quality, ("quants.parquet", "quality_score"), True),
    ("tensor-bomb", tensor_bomb, ("tensor_tables.parquet", "data"), True),
    ("broken-json", broken_json, ("memory_models.parquet", "coefficients"), True),
]

DATASET = "publisher/catalog"


def _publish(emu: HubEmulator, files: Files) -> None:
    # Parquet in LFS, as the Hub's default .gitattributes of a dataset repo has it (and as
    # the emulator's own commit path stores what `quants publish` uploads).
    emu.state.create_dataset(
        DATASET,
        {
            name: Blob.from_bytes(data, lfs=name.endswith(".parquet"), name=name)
            for name, data in files.items()
        },
    )


def _parquet_bytes(emu: HubEmulator, files: Files) -> dict[str, int]:
    """Bytes served per snapshot/junk file name (LFS blobs are served by sha256)."""
    by_sha = {hashlib.sha256(d).hexdigest(): n for n, d in files.items()}
    out: dict[str, int] = {}
    for r in emu.requests(method="GET"):
        last = r.path.rsplit("/", 1)[-1]
        name = by_sha.get(last) or (last if last in files else None)
        if name is not None and r.bytes_sent:
            out[name] = out.get(name, 0) + r.bytes_sent
    return out


def _pull(emu: HubEmulator, tmp: Path, target: Path) -> Any:
    env = clean_env(tmp, QUANTS_HF_ENDPOINT=emu.endpoint, HF_HUB_DISABLE_XET="1")
    return run_quants("pull", DATASET, "--db", f"sqlite:///{target}", env=env, timeout=120)


def _digest(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


def test_pull_fetches_only_what_the_manifest_names(good: Files, tmp_path: Path) -> None:
    files = dict(good)
    extra_junk(files)
    target = tmp_path / "target.sqlite"
    with HubEmulator() as emu:
        _publish(emu, files)
        out = _pull(emu, tmp_path, target)
        assert out.returncode == 0, out.stderr
        served = _parquet_bytes(emu, files)
    assert "junk.parquet" not in served and "data/other.parquet" not in served
    assert set(served) == set(good)  # every snapshot file, nothing else
    with Catalog.open(f"sqlite:///{target}") as catalog:
        _, rows = catalog.query_readonly("SELECT DISTINCT source, source_revision FROM quants")
    assert rows == [(f"dataset {DATASET}", rows[0][1])] and len(rows[0][1]) == 40


@pytest.mark.parametrize(
    ("case", "mutate", "words", "may_download"), CASES, ids=[c[0] for c in CASES]
)
def test_hostile_dataset_is_refused_in_one_line(
    good: Files,
    tmp_path: Path,
    case: str,
    mutate: Callable[[Files], None],
    words: tuple[str, ...],
    may_download: bool,
) -> None:
    files = dict(good)
    mutate(files)
    target = tmp_path / "target.sqlite"
    populate(f"sqlite:///{target}")
    before = _digest(target)
    with HubEmulator() as emu:
        _publish(emu, files)
        out = _pull(emu, tmp_path, target)
        served = _parquet_bytes(emu, files)
    assert out.returncode == 1, out.stdout
    # The line said before the network step ("pulling dataset ... from the Hub (...) ..."), then
    # the one-line refusal.
    first = next(line for line in out.stderr.splitlines() if not line.endswith(" ..."))
    assert first.startswith("error: ") and "internal error" not in out.stderr
    for word in words:
        assert word in first, first
    assert "\x1b" not in out.stderr
    if not may_download:
        assert not {n for n in served if n.endswith(".parquet")}, served
    assert _digest(target) == before
    assert not Path("/tmp/PWNED").exists()


def test_corpus_size() -> None:
    assert len(CASES) + 1 >= 14


def test_a_missing_dataset_is_one_line(tmp_path: Path) -> None:
    target = tmp_path / "target.sqlite"
    populate(f"sqlite:///{target}")
    with HubEmulator() as emu:
        out = _pull(emu, tmp_path, target)
    said = [line for line in out.stderr.splitlines() if not line.endswith(" ...")]
    assert out.returncode == 1 and "not found" in said[0]
    shutil.rmtree(tmp_path / "data", ignore_errors=True)
