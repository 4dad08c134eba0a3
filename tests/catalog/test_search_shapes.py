"""Search by shape (quants.search_shape, migrations 0010 and 0011) against the per-quant reads
and a full ranking, on a Hub-shaped catalog (bench/bench_search_hub.py: many base models,
thousands of copies of one memory shape across uploaders, long-tailed downloads), on SQLite and
PostgreSQL.

For every sort read by shape, every tier, with and without a name query, the shape read, the
per-quant read and a ranking of every quant without early stop must return the same rows in the
same order (the other sorts read per quant either way: tests/catalog/test_search_streams.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import pytest

from bench.bench_search_hub import TIERS, build
from crawler.catalog import Catalog
from crawler.catalog.candidates import bounded, materializer
from crawler.catalog.ordered import _walk, stream_candidates
from crawler.catalog.reader import Reader
from crawler.catalog.size_order import _SIZE_SHAPES, size_by_shape
from crawler.cli.search_cmd import request_from_argv
from crawler.library.search_request import validate_request
from crawler.ranking.bounds import bound_sql, ram_may_fit
from crawler.ranking.evaluate import evaluate
from crawler.ranking.model import BOUNDED_SORTS, Budget, Filters, RunSpec
from crawler.ranking.rank import pre_key, rank_candidates
from tests.catalog.reads import ranked, streamed
from tests.pg import BOTH_DATABASES, built_catalog, databases


@pytest.fixture(scope="module", params=BOTH_DATABASES)
def hub_url(request, tmp_path_factory) -> Iterator[str]:
    """The Hub-shaped catalog, built once per module and database (the tests only read it)."""
    with built_catalog(request.param, tmp_path_factory.mktemp("hub"), "quants_shapes",
                       _build) as url:  # fmt: skip
        yield url


def _build(url: str) -> None:
    build(url, 1200)
    with Catalog.open(url):  # the schema check a real search does
        pass


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
                for sort in ("quality", "size", *BOUNDED_SORTS):
                    argv = ([query] if query else []) + [*targs, "--sort", sort, "--limit", "7"]
                    req = request_from_argv(argv)
                    # The stream's contract: every candidate the per-quant read sends, in
                    # pre_key order (ranking's early stop relies on it), less those --ram
                    # rules out per shape (the per-quant reads leave them to the estimate).
                    shaped = streamed(reader, req, by_shape=True)
                    keys = [pre_key(sort, c) for c in shaped]
                    assert keys == sorted(keys)
                    per_quant = streamed(reader, req, by_shape=False)
                    budget, _, spec = validate_request(req)
                    ids = {c.quant_id for c in shaped}
                    assert len(ids) == len(shaped) and ids <= {c.quant_id for c in per_quant}
                    left = [c for c in per_quant if c.quant_id not in ids]
                    assert not left or budget.ram_bytes is not None
                    for c in materializer(reader)(left):
                        assert not ram_may_fit(c.coefficients, spec, budget)
                    new = ranked(reader, req, by_shape=True)
                    old = ranked(reader, req, by_shape=False)
                    # Every quant estimated (not presorted: no stream order, no early stop for
                    # the bounded sorts), only the head finished.
                    oracle = rank_candidates(
                        full, budget, spec, req.filters, sort=sort, limit=req.limit
                    ).results
                    expected = [(r.candidate.repo_id, r.candidate.path, r.margin_bytes)
                                for r in oracle]  # fmt: skip
                    assert new == old == expected
                    checked += bool(new)
        assert checked >= 20  # most requests have results


def test_size_reads_only_the_shapes_that_pass_the_bound(hub_url):
    """``--sort size`` without a name query is read by shape (not the size walk), and that read
    sends the walk's rows in the walk's order of (size, quality, downloads) under every tier
    (without --ram, which the shape read alone applies: see the next test). Ties on all three
    may come in another order (the database's collation orders the walk's)."""
    with Reader.open(hub_url) as reader:
        for _tier, targs in TIERS:
            argv = [a for a in targs if a not in ("--ram", "64")]
            req = request_from_argv([*argv, "--sort", "size"])
            budget, _, spec = validate_request(req)
            w = bounded(req.filters, spec, budget)
            shaped = size_by_shape(reader, w, spec, budget)
            assert shaped is not None  # every live quant has a shape: the shape read serves it
            by_shape = [row for row, _hint in shaped]
            walked = list(_walk(reader, w, "size"))
            assert [_order(r) for r in by_shape] == [_order(r) for r in walked]
            assert sorted(r[0] for r in by_shape) == sorted(r[0] for r in walked)
            assert len(walked) > 20
        # Under the gpu tier most shapes are too big: the shape read skips them unread.
        req = request_from_argv([*TIERS[0][1], "--sort", "size"])
        budget, _, spec = validate_request(req)
        shapes = reader.rows("SELECT COUNT(DISTINCT search_shape) FROM quants WHERE live = TRUE")
        expr, params = bound_sql(spec, budget)
        passing = reader.rows(
            _SIZE_SHAPES.format(bound=expr, ram=""),
            {**params, "shape_limit": params["bound_limit"]},
        )
        assert 0 < len(passing) < shapes[0][0]


def _order(row) -> tuple:
    """The size order's keys of a read row (CANDIDATE_COLUMNS: 3 size, 17 downloads; 25 the
    quality score)."""
    return (row[3], row[25], row[17])


def test_ram_bound_prunes_only_quants_that_do_not_fit(hub_url):
    """--tier experts_cpu with --ram: the quants the host-memory bound leaves out of the shape
    read (those the memory bound alone lets through) each fail the full estimate, and there are
    some (MoE quants whose experts exceed --ram). Both size and quality read by shape."""
    with Reader.open(hub_url) as reader:
        for ram, sort in (("64", "size"), ("24", "quality")):
            req = request_from_argv(
                ["--gpu", "rtx 3060 12 gb", "--ram", ram, "--ctx", "32768", "--tier", "experts_cpu"]
            )
            budget, _, spec = validate_request(req)
            no_ram = dataclasses.replace(budget, ram_bytes=None)
            kept = {c.quant_id for c in _streamed_with(reader, spec, budget, req.filters, sort)}
            loose = _streamed_with(reader, spec, no_ram, req.filters, sort)
            pruned = [c for c in loose if c.quant_id not in kept]
            assert len(pruned) > 0 and kept < {c.quant_id for c in loose}
            for c in materializer(reader)(pruned):
                cfg, _est = evaluate(c, spec, budget)
                assert cfg is None, c.path


def _streamed_with(reader, spec, budget, filters, sort) -> list:
    stream = stream_candidates(reader, spec, budget, filters, sort)
    try:
        return list(stream)
    finally:
        stream.close()


def test_the_speed_bound_of_each_quants_weight_types_reads_fewer_quants(hub_url, tmp_path):
    # The same catalog with fit_type_eff unknown (NULL: every byte at the fastest type's rate)
    # gives the same results, after reading more quants. On an H200 the kernels set the pace,
    # so the weight types decide the rate.
    with contextlib.ExitStack() as stack:
        if hub_url.startswith("sqlite"):
            loose = f"sqlite:///{tmp_path / 'loose.sqlite'}"
        else:
            loose = stack.enter_context(databases("quants_loose"))()
        _build(loose)  # the same catalog (the build is seeded)
        _fewer_reads(hub_url, loose)


def _fewer_reads(hub_url: str, loose: str) -> None:
    from sqlalchemy import text, update

    from crawler.catalog.search_index import search_shape_sql
    from crawler.catalog.tables import Quant
    from crawler.library.search import search

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
