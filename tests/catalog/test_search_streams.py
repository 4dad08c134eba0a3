"""The streamed search (every --sort, early stop, SQL bounds) against a full ranking.

The catalog is the benchmark's synthetic one (bench/bench_search.py: 12 model families, dense,
hybrid, MoE and MLA, 14 quant types, many exact ties between uploaders), small enough for a test.
The oracle reads every candidate under a budget nothing exceeds, completes them all and ranks them
without any early stop; the search must return exactly its head, in its order, for every sort.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.bench_search import build
from crawler.base.errors import NothingFits
from crawler.catalog import Catalog
from crawler.catalog.candidates import materializer
from crawler.catalog.ordered import stream_candidates
from crawler.catalog.reader import Reader
from crawler.library.search import search
from crawler.library.search_request import SearchRequest, resolve_budget
from crawler.ranking.model import SORT_KEYS, Budget, Candidate, Filters, RunSpec
from crawler.ranking.rank import rank_candidates
from tests.pg import BOTH_DATABASES, built_catalog

SPECS = [
    RunSpec(ctx=32768),
    RunSpec(ctx=262144, auto_cache=True),
    RunSpec(),  # no --ctx: each quant's largest context
    RunSpec(ctx=131072, mtp=True),
    RunSpec(ctx=65536, type_k="q8_0", type_v="q8_0", cpu_moe=True),
]
FILTERS = [
    Filters(),
    Filters(query="qwen3.6 27b"),
    Filters(author="unsloth", min_attn_bits=6),
    # two MoE families: their per-layer cost makes speed order differ from bytes-read order
    Filters(query="a3b"),
]


def _key(r) -> tuple[str, str]:
    return (r.candidate.repo_id, r.candidate.path)


# The oracle's answers by request, with the candidates they were ranked from: the PostgreSQL run
# reuses an answer only when its candidates equal the SQLite run's (the same catalog, built alike).
_ORACLES: dict[tuple[object, ...], tuple[list[Candidate], list[tuple[str, str]]]] = {}


def _oracle(full: list[Candidate], req: SearchRequest) -> list[tuple[str, str]]:
    key = (req.spec, req.filters, req.sort, req.vram_gib, req.gpu)
    hit = _ORACLES.get(key)
    if hit is not None and hit[0] == full:
        return hit[1]
    budget, _ = resolve_budget(req)
    out = rank_candidates(full, budget, req.spec, req.filters, sort=req.sort, limit=None)
    _ORACLES[key] = (full, [_key(r) for r in out.results])
    return _ORACLES[key][1]


@pytest.fixture(scope="module", params=BOTH_DATABASES)
def synthetic_url(request, tmp_path_factory) -> Iterator[str]:
    """The synthetic catalog, built once per module and database (the tests only read it)."""
    with built_catalog(request.param, tmp_path_factory.mktemp("streams"), "quants_streams",
                       _build) as url:  # fmt: skip
        yield url


def _build(url: str) -> None:
    build(url, 1000)
    with Catalog.open(url):  # the schema check a real search does
        pass


# One test per sort, so that the workers share them out.
@pytest.mark.parametrize("sort", SORT_KEYS)
def test_every_sort_returns_the_head_of_the_full_ranking(synthetic_url, sort):
    checked = stopped_early = 0
    with Reader.open(synthetic_url) as reader:
        # Every quant, completed: a budget none exceeds, so the SQL bound drops nothing.
        everything = stream_candidates(
            reader, RunSpec(), Budget.from_gib(1e6), Filters(), "quality"
        )
        full = materializer(reader)(list(everything))
        for spec in SPECS:
            for filters in FILTERS:
                req = SearchRequest(spec=spec, filters=filters, vram_gib=24, sort=sort)
                if sort == "speed":
                    req = SearchRequest(spec=spec, filters=filters, gpu="rtx 4090", sort=sort)
                expected = _oracle(full, req)
                for limit in (3, 20, 60):
                    # The early stop (a saved search's path): the same head, fewer reads.
                    limited = SearchRequest(**{**_fields(req), "limit": limit, "count_cap": None})
                    try:
                        res = search(reader, limited)
                    except NothingFits:
                        assert expected == [], (spec, filters, sort)
                        continue
                    got = [_key(r) for r in res.outcome.results]
                    assert got == expected[:limit], (spec, filters, sort, limit)
                    if limit == 3:
                        # The count says how many fit in all, not the shown ones (a cap above
                        # the catalog's size: exact), and the head is the same.
                        counted = {**_fields(req), "limit": 3, "count_cap": 10_000}
                        full_count = search(reader, SearchRequest(**counted))
                        assert full_count.fit_count == len(expected)
                        assert full_count.fit_count_exact
                        # A small cap: a lower bound, and "exact" only when it is.
                        capped = {**_fields(req), "limit": 3, "count_cap": 50}
                        low = search(reader, SearchRequest(**capped))
                        assert low.fit_count <= len(expected)
                        if low.fit_count_exact:
                            assert low.fit_count == len(expected)
                        assert [_key(r) for r in full_count.outcome.results] == got
                    checked += 1
                    stopped_early += res.outcome.unevaluated > 0 or (
                        res.outcome.considered < len(expected)
                    )
    # The comparison ran on real answers (57 of the 60 cases fit something), and the early stop
    # was exercised (24 to 45 times per sort).
    assert checked > 50 and stopped_early > 20, (checked, stopped_early)


def _fields(req: SearchRequest) -> dict:
    return {name: getattr(req, name) for name in req.__dataclass_fields__}


def test_a_quant_exactly_at_the_budget_is_found(synthetic_url):
    # The SQL memory bound is a lower bound of the estimate: a quant whose exact total is the
    # whole budget must survive it, on every architecture of the synthetic catalog.
    from crawler.fit import estimate

    with Reader.open(synthetic_url) as reader:
        everything = stream_candidates(
            reader, RunSpec(), Budget.from_gib(1e6), Filters(), "quality"
        )
        full = materializer(reader)(list(everything))
        for spec in (RunSpec(ctx=32768), RunSpec(ctx=131072, mtp=True)):
            one_per_family: dict[str | None, Candidate] = {}
            for c in full:
                if c.mtp_preserved or not spec.mtp:
                    one_per_family.setdefault(c.base_model, c)
            assert len(one_per_family) >= (4 if spec.mtp else 12)
            for c in one_per_family.values():
                total = estimate(c.coefficients, spec.base_config()).total
                req = SearchRequest(
                    spec=spec,
                    filters=Filters(query=c.repo_id, mtp=spec.mtp),
                    vram_gib=total / 1024**3,
                    headroom_gib=0,
                    sort="margin",
                    limit=1000,
                )
                found = {
                    (r.candidate.path, r.margin_bytes) for r in search(reader, req).outcome.results
                }
                assert (c.path, 0) in found, (c.repo_id, c.path, spec)
