"""``quants serve`` on a PostgreSQL catalog: the same routes answer, read-only sessions, and a
parameter PostgreSQL text cannot hold (NUL) is a 400 like any bad parameter, never a 503."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cli import clean_env, run_quants
from tests.fixtures.shared import CrawledWorld
from tests.schemas import checked
from tests.web.conftest import Served, serving

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def pg_served(tmp_path_factory, pg_crawled_world: CrawledWorld):
    with serving(pg_crawled_world.db, tmp_path_factory.mktemp("serve-pg")) as served:
        yield served


def test_routes_answer_on_postgresql(pg_served: Served) -> None:
    status, doc = pg_served.json("/api/search", {"vram": 24, "ctx": 32768})
    assert status == 200 and doc["results"]
    cli = run_quants("search", "--vram", "24", "--ctx", "32768", "--db", pg_served.db, "--json",
                     env=clean_env(pg_served.tmp), timeout=120)  # fmt: skip
    assert doc == checked("search", cli.stdout)
    top = doc["results"][0]
    status, quant = pg_served.json("/api/quant", {"repo": top["repo"], "path": top["path"]})
    assert status == 200 and quant["layers"]["rows"] and quant["memory"]["curves"]
    assert pg_served.json("/api/compare", {"q": top["base_model"] or top["repo"]})[0] == 200
    status, scans = pg_served.json("/api/scans")
    assert status == 200 and scans["scans"]
    for path in ("/", "/scans"):
        assert pg_served.get(path)[0] == 200
        assert pg_served.get(path, method="POST")[0] == 405


NUL_PARAMS: list[tuple[str, dict[str, Any], str]] = [
    ("/api/search", {"vram": 24, "ctx": 4096, "q": "qwen\x00"}, "q"),
    ("/api/search", {"vram": 24, "ctx": 4096, "author": "\x00"}, "author"),
    ("/api/compare", {"q": "Qwen3.6\x00-27B"}, "q"),
    ("/api/quant", {"repo": "o/r\x00", "path": "x.gguf"}, "repo"),
    ("/api/quant", {"repo": "o/r", "path": "x\x00.gguf"}, "path"),
    ("/api/scans", {"limit": "1\x00"}, "limit"),
    ("/", {"vram": 24, "ctx": 4096, "q": "a\x00b"}, "q"),
    ("/model", {"q": "\x00"}, "q"),
    ("/quant", {"repo": "o/r", "path": "\x00"}, "path"),
]


@pytest.mark.parametrize(("path", "params", "name"), NUL_PARAMS)
def test_nul_in_a_parameter_is_a_400_on_postgresql(
    pg_served: Served, path: str, params: dict[str, Any], name: str
) -> None:
    status, headers, body = pg_served.get(path, params)
    assert status == 400, (status, body[:300])
    if path.startswith("/api/"):
        assert headers["content-type"].startswith("application/json")
        error = json.loads(body)["error"]
        assert error.startswith(name) and "\x00" not in error, error
    else:
        assert name in body and "\x00" not in body
    # The server still answers: no session was left broken by the refused value.
    assert pg_served.get("/api/scans")[0] == 200
