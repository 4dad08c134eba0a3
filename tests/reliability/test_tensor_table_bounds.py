"""A stored tensor table that decodes huge (a decompression bomb, or more tensors than any model)
is refused quickly wherever the catalog decodes one: the /quant page and its API, and reprofile.

The import refuses such a table (test_hostile_snapshots.py); these rows are written around it, as
old data or a bug could have left them. An 89 KB table once took 16 s and 2.2 GB per /quant.
"""

from __future__ import annotations

import gc
import json
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from crawler.catalog import Catalog
from crawler.catalog.tables import Quant, Repo, TensorTable
from crawler.catalog.tensor_tables import (
    MAX_DECODED_BYTES,
    MAX_TENSORS,
    TensorTableError,
    decode_tensor_table,
)
from crawler.crawl.reprofile import reprofile
from tests.cli import Cli
from tests.reliability.test_hostile_snapshots import _good_catalog

MIB = 1024**2


def zlib_bomb(mib: int) -> bytes:
    """A valid zlib stream of ``mib`` MiB of "0", built without compressing them all: after a
    full flush the deflate state restarts, so each further MiB compresses to the same block."""
    chunk = b"0" * MIB
    packer = zlib.compressobj(9)
    first = packer.compress(chunk) + packer.flush(zlib.Z_FULL_FLUSH)
    block = packer.compress(chunk) + packer.flush(zlib.Z_FULL_FLUSH)
    end = packer.flush()[:-4]  # the final empty block; its Adler-32 is for 2 MiB, not ``mib``
    check = 1
    for _ in range(mib):
        check = zlib.adler32(chunk, check)
    return first + block * (mib - 1) + end + check.to_bytes(4, "big")


BOMB = zlib_bomb(512)  # 512 MiB in ~0.5 MB
#: Within the decoded-size cap, but more tensors than any model has.
MANY = zlib.compress(json.dumps({"shards": [{"tensors": [["t", [1], 0, 0]] * (MAX_TENSORS + 1)}]})
                     .encode(), 9)  # fmt: skip


def test_the_bombs_are_what_they_claim() -> None:
    small = zlib_bomb(3)
    assert zlib.decompress(small) == b"0" * 3 * MIB  # the construction gives a valid stream
    assert len(BOMB) < MIB and len(BOMB) * 500 < 512 * MIB
    assert len(zlib.decompress(MANY)) < MAX_DECODED_BYTES


def _measured(call: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, CPU seconds, peak MiB of Python allocations) of ``call()``, called twice: once
    traced for the peak, once untraced for the CPU time (tracing every allocation of the
    tensor-count bomb's decode took 2-4x its untraced CPU time on a 2-core machine)."""
    tracemalloc.start()
    try:
        result = call()
        peak = tracemalloc.get_traced_memory()[1] / MIB
    finally:
        tracemalloc.stop()
    # The process's CPU time, less a collection of what earlier tests left (a long test worker's
    # heap): the call's own cost.
    gc.collect()
    gc.disable()
    try:
        started = time.process_time()
        call()
        return result, time.process_time() - started, peak
    finally:
        gc.enable()


@pytest.mark.parametrize(
    ("data", "words"),
    [(BOMB, f"decodes to more than {MAX_DECODED_BYTES} bytes"),
     (MANY, f"more than {MAX_TENSORS} tensors")],
    ids=["size-bomb", "tensor-count"],
)  # fmt: skip
def test_the_decoder_refuses_quickly_in_bounded_memory(data: bytes, words: str) -> None:
    def decode() -> str:
        with pytest.raises(TensorTableError) as info:
            decode_tensor_table(data)
        return str(info.value)

    message, cpu, peak = _measured(decode)
    assert words in message
    assert cpu < 2, cpu  # ~0.06 s measured (size bomb)
    assert peak < 3 * MAX_DECODED_BYTES / MIB, peak  # ~65 MiB: the capped output, copied once


@pytest.fixture(scope="module")
def catalogs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str, str]]:
    """A good catalog per bomb, one quant's stored table replaced by it:
    name -> (catalog URL, repo, path of that quant)."""
    tmp = tmp_path_factory.mktemp("tensor-bombs")
    out = {}
    for name, data in (("size-bomb", BOMB), ("tensor-count", MANY)):
        url = f"sqlite:///{tmp / name}.sqlite"
        _good_catalog(url)
        with Catalog.open(url) as catalog, catalog.session() as s:
            q, repo = s.execute(
                select(Quant, Repo.repo_id).join(Repo, Repo.id == Quant.repo_pk)
                .where(Quant.vanished_at.is_(None)).order_by(Quant.id)
            ).first()  # fmt: skip
            s.get(TensorTable, q.id).data = data
            out[name] = (url, repo, q.path)
    return out


@pytest.mark.parametrize("name", ["size-bomb", "tensor-count"])
def test_the_quant_page_and_api_skip_the_table_quickly(catalogs, name: str) -> None:
    from starlette.testclient import TestClient

    from crawler.web import create_app

    url, repo, path = catalogs[name]
    with TestClient(create_app(url), base_url="http://127.0.0.1") as client:
        client.get("/scans")  # warm: templates compiled, the catalog opened once

        def get_both() -> tuple[Any, Any]:
            page = client.get("/quant", params={"repo": repo, "path": path})
            api = client.get("/api/quant", params={"repo": repo, "path": path})
            return page, api

        (page, api), cpu, peak = _measured(get_both)
    assert page.status_code == 200 and api.status_code == 200
    assert "unreadable stored data, shown as absent: tensor table" in page.text
    assert api.json()["unreadable"] == ["tensor table"]
    assert cpu < 2, cpu
    assert peak < 3 * MAX_DECODED_BYTES / MIB, peak


@pytest.mark.parametrize("name", ["size-bomb", "tensor-count"])
def test_reprofile_counts_the_table_as_failed_and_does_the_rest(catalogs, name: str) -> None:
    url = catalogs[name][0]
    with Catalog.open(url) as catalog:
        summary, cpu, peak = _measured(lambda: reprofile(catalog))
    assert summary.quants == 4 and summary.failed == 1, summary  # 4 live quants, 1 bomb
    assert cpu < 5, cpu
    assert peak < 3 * MAX_DECODED_BYTES / MIB, peak


def test_reprofile_cli_reports_it_without_an_internal_error(catalogs, tmp_path: Path) -> None:
    url = catalogs["size-bomb"][0]
    started = time.monotonic()
    out = Cli(tmp_path).run("reprofile", "--json", "--db", url, ok=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["failed"] == 1
    assert "internal error" not in out.stderr and "Traceback" not in out.stderr
    assert "decodes to more than" in out.stderr  # the warning names why
    assert time.monotonic() - started < 30
