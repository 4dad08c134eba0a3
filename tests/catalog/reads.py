"""The search's read path as the catalog tests drive it: a request's candidate stream, whole,
and its ranking, with the stream's own switches (``by_shape``, ``by_name``) passed through."""

from __future__ import annotations

from typing import Any

from crawler.catalog.candidates import materializer, sibling_lookup
from crawler.catalog.ordered import stream_candidates
from crawler.cli.search_cmd import request_from_argv
from crawler.library.search_request import validate_request
from crawler.ranking.rank import pre_key, rank_candidates


def streamed(reader: Any, req: Any, **switches: bool) -> list[Any]:
    """Every candidate the stream of ``req`` sends, in its order."""
    budget, _, spec = validate_request(req)
    stream = stream_candidates(reader, spec, budget, req.filters, req.sort, **switches)
    try:
        return list(stream)
    finally:
        stream.close()


def ranked(reader: Any, req: Any, **switches: bool) -> list[tuple[str, str, int]]:
    """(repo, path, margin) of the rows the search of ``req`` returns."""
    budget, _, spec = validate_request(req)
    stream = stream_candidates(reader, spec, budget, req.filters, req.sort, **switches)
    try:
        out = rank_candidates(
            stream, budget, spec, req.filters, sort=req.sort, limit=req.limit,
            siblings=sibling_lookup(reader), materialize=materializer(reader), presorted=True,
        )  # fmt: skip
    finally:
        stream.close()
    return [(r.candidate.repo_id, r.candidate.path, r.margin_bytes) for r in out.results]


def by_name_agrees(reader: Any, argv: list[str]) -> bool:
    """Assert that ``argv``'s search reads the same with and without the name index's help:
    the stream in pre_key order, the same quants, the same rows; True when it has rows."""
    req = request_from_argv(argv)
    found = streamed(reader, req, by_name=True)
    keys = [pre_key(req.sort, c) for c in found]
    assert keys == sorted(keys), argv  # the stream's contract
    without = streamed(reader, req, by_name=False)
    assert sorted(c.quant_id for c in found) == sorted(c.quant_id for c in without), argv
    rows = ranked(reader, req, by_name=True)
    assert rows == ranked(reader, req, by_name=False), argv
    return bool(rows)
