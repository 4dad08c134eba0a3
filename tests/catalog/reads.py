"""The search's read path as the catalog tests drive it: a request's candidate stream, whole,
and its ranking, with the stream's own switches (``by_shape``, ``by_name``) passed through."""

from __future__ import annotations

from typing import Any

from crawler.catalog.candidates import materializer, sibling_lookup
from crawler.catalog.ordered import stream_candidates
from crawler.library.search import validate_request
from crawler.ranking.rank import rank_candidates


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
