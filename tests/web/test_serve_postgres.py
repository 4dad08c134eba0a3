"""``quants serve`` on a PostgreSQL catalog: the same routes answer, read-only sessions."""

from __future__ import annotations

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
