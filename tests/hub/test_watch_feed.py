"""Watch evaluation and the feed files, with a search function written for the test.

The real search (``quants search``) is exercised end to end in tests/e2e/test_watch_e2e.py;
here the results are fixed so each rule (baseline, fire once, re-upload, feed shape) is pinned.
The options are the real ones: checked by the library as api.search checks them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from sqlalchemy import select

from crawler.base.config import Settings
from crawler.base.errors import NothingFits, UsageError
from crawler.catalog import Catalog
from crawler.catalog.tables import Quant, Repo
from crawler.catalog.watches import get_watch, list_hits
from crawler.crawl.watch import add_watch, evaluate_watches, feed_paths
from crawler.library.search_request import SearchRequest

ATOM = "{http://www.w3.org/2005/Atom}"


class FakeSearch:
    """Returns whatever ``results`` holds; records the requests it was given."""

    def __init__(self) -> None:
        self.results: list[dict[str, Any]] = []
        self.calls: list[SearchRequest] = []

    def __call__(self, catalog: Catalog, req: SearchRequest) -> list[dict[str, Any]]:
        self.calls.append(req)
        if not self.results:
            raise NothingFits("nothing fits")
        return [dict(r) for r in self.results]


def _result(repo: str, path: str, **extra: Any) -> dict[str, Any]:
    return {"repo": repo, "path": path, "quant_label": "Q4_K_M", "size_bytes": 2**30, **extra}


def _put_quant(catalog: Catalog, repo_id: str, path: str, key: str) -> None:
    now = datetime.now(UTC)
    with catalog.session() as s:
        repo = s.scalars(select(Repo).where(Repo.repo_id == repo_id)).first()
        if repo is None:
            repo = Repo(repo_id=repo_id, first_seen_at=now, last_seen_at=now)
            s.add(repo)
            s.flush()
        quant = s.scalars(select(Quant).where(Quant.repo_pk == repo.id, Quant.path == path)).first()
        if quant is None:
            quant = Quant(repo_pk=repo.id, path=path, size_bytes=1, first_seen_at=now)
            s.add(quant)
        quant.content_key = key


@pytest.fixture
def env(tmp_path: Path, catalog_url: str):
    settings = Settings(data_dir=tmp_path, db_url=catalog_url)
    with Catalog.open(settings.resolved_db_url) as catalog:
        yield settings, catalog, FakeSearch()


def test_baseline_then_fire_once_then_reupload(env) -> None:
    settings, catalog, search = env
    _put_quant(catalog, "u/A-GGUF", "A-Q4_K_M.gguf", "k1")
    search.results = [_result("u/A-GGUF", "A-Q4_K_M.gguf")]
    _watch, baseline = add_watch(settings, catalog, "w24", {"vram": 24}, search=search)
    assert baseline == 1 and [r.vram_gib for r in search.calls] == [24]

    # Nothing new: the baseline result does not fire.
    assert evaluate_watches(settings, catalog, scan_id=None, search=search) == []

    # A new fitting quant fires once.
    _put_quant(catalog, "b/B-GGUF", "B-Q5_K_M.gguf", "k2")
    search.results.append(_result("b/B-GGUF", "B-Q5_K_M.gguf", max_ctx=262144))
    fired = evaluate_watches(settings, catalog, scan_id=None, search=search)
    assert [(h.payload["repo"], h.payload["reason"]) for h in fired] == [("b/B-GGUF", "new")]
    assert evaluate_watches(settings, catalog, scan_id=None, search=search) == []

    # The first quant is re-uploaded under the same name: an improved result fires again.
    _put_quant(catalog, "u/A-GGUF", "A-Q4_K_M.gguf", "k1b")
    fired = evaluate_watches(settings, catalog, scan_id=None, search=search)
    assert [(h.result_key, h.payload["reason"]) for h in fired] == [
        ("u/A-GGUF:A-Q4_K_M.gguf@k1b", "reupload")
    ]
    assert fired[0].payload["changes"] == []  # no analysed versions in this test's catalog
    assert evaluate_watches(settings, catalog, scan_id=None, search=search) == []
    assert get_watch(catalog, "w24").hits == 3
    assert [h.payload["reason"] for h in list_hits(catalog, "w24")] == [
        "reupload",
        "new",
        "baseline",
    ]

    atom, jsonl = feed_paths(settings)
    lines = [json.loads(line) for line in jsonl.read_text("utf-8").splitlines()]
    assert [(x["watch"], x["repo"], x["reason"]) for x in lines] == [
        ("w24", "b/B-GGUF", "new"),
        ("w24", "u/A-GGUF", "reupload"),
    ]
    root = ET.parse(atom).getroot()
    entries = root.findall(f"{ATOM}entry")
    assert [e.findtext(f"{ATOM}title") for e in entries] == [
        "w24: re-uploaded u/A-GGUF/A-Q4_K_M.gguf (Q4_K_M)",
        "w24: new b/B-GGUF/B-Q5_K_M.gguf (Q4_K_M)",
    ]
    assert len({e.findtext(f"{ATOM}id") for e in entries}) == 2
    assert "max_ctx: 262144" in (entries[1].findtext(f"{ATOM}content") or "")
    assert entries[1].find(f"{ATOM}link").get("href") == settings.hf_endpoint + "/b/B-GGUF"


def test_bad_options_refused_at_add_and_skipped_later(env, caplog) -> None:
    settings, catalog, search = env
    with pytest.raises(UsageError, match="unknown search option 'bad'"):
        add_watch(settings, catalog, "w", {"vram": 8, "bad": 1}, search=search)
    with pytest.raises(UsageError, match=r"--vram must be >= 0\.1"):
        add_watch(settings, catalog, "w", {"vram": 0}, search=search)
    with pytest.raises(UsageError, match="search option ctx"):
        add_watch(settings, catalog, "w", {"vram": 8, "ctx": "lots"}, search=search)
    assert search.calls == []  # refused before any search
    # A watch that fails later (e.g. options retired) is logged; the others still run.
    add_watch(settings, catalog, "ok", {"vram": 8}, search=search)
    from crawler.catalog.watches import add_watch as store_watch

    store_watch(catalog, "broken", {"vram": 8, "bad": 1})
    search.results = [_result("x/X-GGUF", "X.gguf")]
    fired = evaluate_watches(settings, catalog, scan_id=None, search=search)
    assert [h.watch for h in fired] == ["ok"]
    assert "watch broken: search failed" in caplog.text


def test_nothing_fits_is_no_results_and_feed_is_valid_xml(env) -> None:
    settings, catalog, search = env
    add_watch(settings, catalog, "empty", {"vram": 1}, search=search)
    assert evaluate_watches(settings, catalog, scan_id=None, search=search) == []
    atom, jsonl = feed_paths(settings)
    assert ET.parse(atom).getroot().findall(f"{ATOM}entry") == []
    assert not jsonl.exists()


def test_hostile_hub_text_stays_valid_xml_and_escaped_json(env) -> None:
    settings, catalog, search = env
    add_watch(settings, catalog, "w", {"vram": 24}, search=search)
    evil = "evil/\x1b[31mRED\x07-GGUF"
    search.results = [_result(evil, "a\x01b<&>.gguf", command="llama-server -m 'x'")]
    fired = evaluate_watches(settings, catalog, scan_id=None, search=search)
    assert len(fired) == 1
    atom, jsonl = feed_paths(settings)
    title = ET.parse(atom).getroot().find(f"{ATOM}entry").findtext(f"{ATOM}title")
    assert title == "w: new evil/[31mRED-GGUF/ab<&>.gguf (Q4_K_M)"
    raw = jsonl.read_text("utf-8")
    assert "\x1b" not in raw and "\\u001b" in raw
    assert json.loads(raw)["repo"] == evil
