"""Search by shape (quants.search_shape, migration 0009) against the per-quant reads and a full
ranking, on a Hub-shaped catalog (bench/bench_search_hub.py: many base models, thousands of
copies of one memory shape across uploaders, long-tailed downloads).

For every sort read by shape, every tier, with and without a name query, the shape read, the
per-quant read and a ranking of every quant without early stop must return the same rows in the
same order (the other sorts read per quant either way: tests/catalog/test_search_streams.py).
"""

from __future__ import annotations

import pytest

from bench.bench_search_hub import TIERS, build
from crawler.catalog import Catalog
from crawler.catalog.candidates import materializer, sibling_lookup
from crawler.catalog.ordered import stream_candidates
from crawler.catalog.reader import Reader
from crawler.cli.search_cmd import request_from_argv
from crawler.library.search import validate_request
from crawler.ranking.model import BOUNDED_SORTS, Budget, Filters, RunSpec
from crawler.ranking.rank import pre_key, rank_candidates


@pytest.fixture(scope="module")
def hub_url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('hub') / 'hub.sqlite'}"
    build(url, 1200)
    with Catalog.open(url):  # the schema check a real search does
        pass
    return url


def _ranked(reader, req, *, by_shape: bool) -> list[tuple[str, str]]:
    budget, _, spec = validate_request(req)
    stream = stream_candidates(reader, spec, budget, req.filters, req.sort, by_shape=by_shape)
    try:
        out = rank_candidates(
            stream, budget, spec, req.filters, sort=req.sort, limit=req.limit,
            siblings=sibling_lookup(reader), materialize=materializer(reader), presorted=True,
        )  # fmt: skip
    finally:
        stream.close()
    return [(r.candidate.repo_id, r.candidate.path) for r in out.results]


def _streamed(reader, req, *, by_shape: bool) -> list:
    budget, _, spec = validate_request(req)
    stream = stream_candidates(reader, spec, budget, req.filters, req.sort, by_shape=by_shape)
    try:
        return list(stream)
    finally:
        stream.close()


def test_shape_reads_equal_per_quant_reads_and_a_full_ranking(hub_url):
    with Reader.open(hub_url) as reader:
        shapes = reader.rows("SELECT COUNT(DISTINCT search_shape), COUNT(*) FROM quants")[0]
        assert 0 < shapes[0] < shapes[1] / 5  # copies share a shape: that is what is tested
        everything = stream_candidates(
            reader, RunSpec(), Budget.from_gib(1e6), Filters(), "quality", by_shape=False
        )
        full = materializer(reader)(list(everything))
        checked = 0
        for query in (None, "qwen3.6 27b"):
            for _tier, targs in TIERS:
                for sort in ("quality", *BOUNDED_SORTS):
                    argv = ([query] if query else []) + [*targs, "--sort", sort, "--limit", "7"]
                    req = request_from_argv(argv)
                    # The stream's contract: every candidate the per-quant read sends, in
                    # pre_key order (ranking's early stop relies on it).
                    shaped = _streamed(reader, req, by_shape=True)
                    keys = [pre_key(sort, c) for c in shaped]
                    assert keys == sorted(keys)
                    per_quant = _streamed(reader, req, by_shape=False)
                    assert sorted(c.quant_id for c in shaped) == sorted(
                        c.quant_id for c in per_quant
                    )
                    new = _ranked(reader, req, by_shape=True)
                    old = _ranked(reader, req, by_shape=False)
                    budget, _, spec = validate_request(req)
                    # Every quant estimated (not presorted: no stream order, no early stop for
                    # the bounded sorts), only the head finished.
                    oracle = rank_candidates(
                        full, budget, spec, req.filters, sort=sort, limit=req.limit
                    ).results
                    assert new == old == [(r.candidate.repo_id, r.candidate.path) for r in oracle]
                    checked += bool(new)
        assert checked >= 16  # most requests have results


def test_the_speed_bound_of_each_quants_weight_types_reads_fewer_quants(hub_url, tmp_path):
    # The same catalog with fit_type_eff unknown (NULL: every byte at the fastest type's rate)
    # gives the same results, after reading more quants. On an H200 the kernels set the pace,
    # so the weight types decide the rate.
    import shutil

    from sqlalchemy import text, update

    from crawler.catalog.search_index import search_shape_sql
    from crawler.catalog.tables import Quant
    from crawler.library.search import search

    loose = f"sqlite:///{tmp_path / 'loose.sqlite'}"
    shutil.copy(hub_url.removeprefix("sqlite:///"), loose.removeprefix("sqlite:///"))
    with Catalog.open(loose) as catalog, catalog.session() as s:
        s.execute(text("UPDATE quants SET fit_type_eff = NULL"))
        s.execute(update(Quant).values(search_shape=search_shape_sql(Quant)))
        s.commit()
    reads = {}
    for url in (hub_url, loose):
        with Reader.open(url) as reader:
            for gpu in ("h200 nvl", "rtx 4090"):
                req = request_from_argv(["--gpu", gpu, "--ctx", "8192", "--sort", "speed"])
                out = search(reader, req).outcome
                reads[url, gpu] = (
                    out.considered,
                    [(r.candidate.path, r.rank) for r in out.results],
                )
    h200_tight, h200_loose = reads[hub_url, "h200 nvl"], reads[loose, "h200 nvl"]
    assert h200_tight[1] == h200_loose[1] and h200_tight[1]
    assert h200_tight[0] < h200_loose[0]
    assert reads[hub_url, "rtx 4090"][1] == reads[loose, "rtx 4090"][1]
    assert reads[hub_url, "rtx 4090"][0] <= reads[loose, "rtx 4090"][0]
