"""--tier partial --sort margin|ctx on a Hub-shaped catalog (bench/bench_search_hub.py), on SQLite
and PostgreSQL: the results equal a ranking of every quant without early stop, read by shape or
quant by quant, and the bounds of crawler/ranking/partial_bound.py stop the stream early.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.bench_search_hub import TIERS, build
from crawler.catalog import Catalog
from crawler.catalog.candidates import materializer
from crawler.catalog.ordered import stream_candidates
from crawler.catalog.reader import Reader
from crawler.cli.search_cmd import request_from_argv
from crawler.library.search import search
from crawler.library.search_request import validate_request
from crawler.ranking.model import Budget, Filters, RunSpec
from crawler.ranking.rank import rank_candidates
from tests.catalog.reads import ranked
from tests.pg import BOTH_DATABASES, built_catalog

_QUANTS = 3000
#: The bench's partial request, others GPUs and contexts, without --ctx (each quant's largest
#: context), with --vram, --auto-cache, a fixed quantized cache and --cpu-moe.
_REQUESTS = (
    dict(TIERS)["partial"],
    ["--gpu", "rtx 4090", "--tier", "partial"],
    ["--vram", "6", "--ctx", "8192", "--tier", "partial", "--auto-cache"],
    ["--vram", "16", "--ctx", "131072", "--tier", "partial", "-ctk", "q8_0", "-ctv", "q8_0"],
    ["--vram", "8", "--ctx", "32768", "--tier", "partial", "--cpu-moe"],
)


@pytest.fixture(scope="module", params=BOTH_DATABASES)
def hub_url(request, tmp_path_factory) -> Iterator[str]:
    """The Hub-shaped catalog, built once per module and database (the tests only read it)."""
    with built_catalog(request.param, tmp_path_factory.mktemp("hub"), "quants_partial",
                       _build) as url:  # fmt: skip
        yield url


def _build(url: str) -> None:
    build(url, _QUANTS)
    with Catalog.open(url):  # the schema check a real search does
        pass


def test_partial_margin_and_ctx_equal_a_full_ranking(hub_url):
    with Reader.open(hub_url) as reader:
        everything = stream_candidates(
            reader, RunSpec(), Budget.from_gib(1e6), Filters(), "quality", by_shape=False
        )
        full = materializer(reader)(list(everything))
        assert len(full) == _QUANTS
        checked = offloaded = 0
        for args in _REQUESTS:
            for sort in ("margin", "ctx"):
                for limit in (1, 20):
                    req = request_from_argv([*args, "--sort", sort, "--limit", str(limit)])
                    budget, _, spec = validate_request(req)
                    # Every quant estimated (not presorted: no stream order, no early stop).
                    oracle = rank_candidates(
                        full, budget, spec, req.filters, sort=sort, limit=limit
                    ).results
                    got = search(reader, req).outcome.results
                    assert [_key(r) for r in got] == [_key(r) for r in oracle], (args, sort)
                    by_quant = ranked(reader, req, by_shape=False)
                    assert by_quant == [_key(r)[:3] for r in oracle]
                    checked += bool(oracle)
                    offloaded += sum(r.config.n_gpu_layers is not None for r in oracle)
        assert checked == 4 * len(_REQUESTS)
        assert offloaded > 0  # some results keep layers in host memory


def test_partial_margin_and_ctx_read_a_fraction_of_the_catalog(hub_url):
    # Before these bounds every quant passed with about the budget less the compute floor
    # (any layer may stay in host memory), and the stream read the whole catalog.
    with Reader.open(hub_url) as reader:
        for sort in ("margin", "ctx"):
            req = request_from_argv([*dict(TIERS)["partial"], "--sort", sort, "--limit", "20"])
            out = search(reader, req).outcome
            assert len(out.results) == 20
            assert out.considered < _QUANTS // 5, (sort, out.considered)


def _key(r) -> tuple[str, str, int, int | None]:
    return (r.candidate.repo_id, r.candidate.path, r.margin_bytes, r.max_ctx)
