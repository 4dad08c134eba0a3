"""The copies the speed, margin and ctx reads leave out (crawler.ranking.copies), on SQLite and
PostgreSQL: the search returns exactly the rows of a ranking of every quant, on a Hub-shaped
catalog (bench/bench_search_hub.py) whose shapes also hold quants that are not copies (another
coefficient text, head bytes, label) and whose copies tie on size and downloads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from bench.bench_search_hub import TIERS, build
from crawler.base.errors import EstimateError
from crawler.catalog import Catalog
from crawler.catalog.candidates import materializer, sibling_lookup
from crawler.catalog.ordered import stream_candidates
from crawler.catalog.reader import Reader
from crawler.catalog.search_index import refresh_search_columns, repo_downloads_sql
from crawler.catalog.tables import Quant, Repo
from crawler.cli.search_cmd import request_from_argv
from crawler.library.search import search
from crawler.library.search_request import validate_request
from crawler.ranking.columns import copy_key, quality_score_of
from crawler.ranking.copies import copy_class_sql
from crawler.ranking.evaluate import (
    evaluate,
    head_declined,
    margin_of,
    speed_of,
    with_max_ctx,
    without_head,
)
from crawler.ranking.model import Budget, Filters, Ranked, RunSpec
from crawler.ranking.rank import rank_candidates
from tests.catalog.reads import streamed
from tests.pg import BOTH_DATABASES, built_catalog


@pytest.fixture(scope="module", params=BOTH_DATABASES)
def hub_url(request, tmp_path_factory) -> Iterator[str]:
    """The Hub-shaped catalog with near copies, built once per module and database."""
    with built_catalog(request.param, tmp_path_factory.mktemp("copies"), "quants_copies",
                       _build) as url:  # fmt: skip
        yield url


def _build(url: str) -> None:
    build(url, 6000)
    with Catalog.open(url) as catalog, catalog.engine.begin() as conn:
        _near_copies(conn)


def _near_copies(conn: sa.Connection) -> None:
    """Quants that share a shape but not a copy class, and copies that tie.

    Every 3rd repo's downloads made equal (copies tie on size and downloads). Then in each
    shape, the quants that lead its order (a read that took them for copies of the others would
    leave the others out) changed where the stored search columns do not see it and their
    bounds stay true: the 1st and 3rd with a cache three times as wide (margins differ, and
    speeds where fewer layers fit the GPU), the 1st and 2nd MTP quants with an output head twice
    as heavy (their draft passes read it). Q8_0 quants relabelled with a name that gives no type
    mix (speed then reads the bits per weight: slower), the 1st and 2nd of each shape with
    their bulk a quarter the bytes (below 4 bits per weight: slower still). Every 6th other
    quant's coefficients stored as another text of the same JSON (another class with equal
    values: exact ties between classes)."""
    pg = conn.dialect.name == "postgresql"
    conn.execute(
        sa.text(f"UPDATE repos SET downloads = 7 WHERE {'MOD(id, 3)' if pg else 'id % 3'} = 0")
    )
    rows = conn.execute(
        sa.text(
            "SELECT q.id, q.search_shape, q.quant_label, q.mtp_present,"
            " CAST(m.coefficients AS TEXT) FROM quants q JOIN repos r ON r.id = q.repo_pk"
            " JOIN memory_models m ON m.quant_id = q.id"
            " ORDER BY q.search_shape, q.size_bytes DESC, r.downloads DESC, q.id"
        )
    ).all()
    coefficients: list[dict[str, Any]] = []
    heads: list[dict[str, Any]] = []
    labels: list[dict[str, Any]] = []
    position, shape = 0, None
    for qid, this, label, mtp, text in rows:
        position, shape = (position + 1 if this == shape else 0), this
        co = json.loads(text)
        if position in (0, 2):
            for group in co["kv_groups"]:
                group["k_width"] *= 3
                group["v_width"] *= 3
            coefficients.append({"id": qid, "co": json.dumps(co)})
        elif qid % 6 == 0:
            coefficients.append({"id": qid, "co": json.dumps(dict(reversed(co.items())))})
        if position in (0, 1) and mtp:
            heads.append({"id": qid})
        if label == "Q8_0":
            labels.append({"id": qid, "bits": position in (0, 1)})
    assert heads and labels
    cast = "CAST(:co AS JSON)" if pg else ":co"
    conn.execute(
        sa.text(f"UPDATE memory_models SET coefficients = {cast} WHERE quant_id = :id"),
        coefficients,
    )
    conn.execute(
        sa.text(
            "UPDATE tensor_groups SET n_bytes = n_bytes * 2"
            " WHERE group_name = 'output' AND quant_id = :id"
        ),
        heads,
    )
    conn.execute(sa.text("UPDATE quants SET quant_label = 'custom-mix' WHERE id = :id"), labels)
    conn.execute(
        sa.text(
            "UPDATE tensor_groups SET n_bytes = n_bytes / 4"
            " WHERE group_name IN ('ffn', 'ffn_exps') AND quant_id = :id"
        ),
        [row for row in labels if row["bits"]],
    )
    # Each quant's copy class from its rows as they now are and its repo's downloads, as the
    # crawl writes them with those (the other search columns stay as they were: the bounds stay
    # true).
    refresh_search_columns(conn, _class_only)
    conn.execute(sa.update(Quant).values(repo_downloads=repo_downloads_sql(Quant, Repo)))


def _class_only(groups: Any, status: str, co: Any, label: str | None) -> dict[str, Any]:
    return {"copy_key": copy_key(groups, status, co, label, quality_score_of(groups, co))}


#: A GPU fast enough that the weights' types set the pace (crawler.ranking.speed: on the
#: tiers' cards the bandwidth does, whatever the types), so the bits per weight count.
_FAST = ("h200", ["--gpu", "h200", "--ctx", "32768"])


def _row(r: Any) -> tuple[Any, ...]:
    return (
        r.rank,
        r.candidate.repo_id,
        r.candidate.path,
        r.margin_bytes,
        r.speed.tok_s if r.speed else None,
        r.config,
        r.max_ctx,
        r.command,
        r.mtp_declined,
    )


def test_copy_reads_return_what_a_full_ranking_returns(hub_url):
    with Reader.open(hub_url) as reader:
        # The catalog holds what is tested: shapes with several copy classes, many copies.
        classes = reader.rows(
            "SELECT q.search_shape, COUNT(DISTINCT CAST(m.coefficients AS TEXT)), COUNT(*)"
            " FROM quants q JOIN memory_models m ON m.quant_id = q.id GROUP BY q.search_shape"
        )
        assert sum(1 for _s, n, _c in classes if n > 1) >= 10
        assert max(c for _s, _n, c in classes) >= 20
        everything = stream_candidates(
            reader, RunSpec(), Budget.from_gib(1e6), Filters(), "quality", by_shape=False
        )
        full = materializer(reader)(list(everything))
        left_out = checked = named_left_out = declined = 0
        limits = (1, 5, 12) if reader.dialect == "sqlite" else (12,)
        cases = [(t, sort, []) for _tier, t in TIERS for sort in ("speed", "margin")]
        cases += [(t, "speed", ["--mtp"]) for _tier, t in (*TIERS, _FAST)]
        cases += [(_FAST[1], "speed", ["--min-attn-bits", "8"])]
        # No acceptance: MTP auto leaves the heads off where the estimate is slower with them
        # beyond the model's error (their classes then hold the speed inputs under every sort).
        low = ["--mtp-acceptance", "0"]
        cases += [(t, sort, low) for t in (TIERS[0][1], _FAST[1]) for sort in ("margin", "ctx")]
        # Name queries (tested in Python), read by shape (this catalog is small enough for the
        # name index to serve them): one the database's LIKE test nearly decides, and a word
        # (no LIKE test) that only some copies of each class hold in their names, so a read
        # that left out copies by class alone would lose the matching ones. ctx's bound is loose
        # for this query under --tier partial: its read turns to the copies mid-run.
        gpu, experts, partial = (t for _tier, t in TIERS)
        cases += [(gpu, "speed", ["qwen3.6 27b"]), (partial, "ctx", ["qwen3.6 27b"])]
        cases += [(experts, "margin", ["coder"])]
        for targs, sort, extra in cases:
            req = request_from_argv([*targs, *extra, "--sort", sort, "--limit", "12"])
            budget, _, spec = validate_request(req)
            # The read of every copy (the bounds stay true on this catalog) and, every quant
            # estimated with no stream order or early stop, the oracle; a shorter answer is
            # their first rows (ranks count from 1 in both).
            before = [_row(r) for r in ranked_all(reader, req)]
            declined += sum(row[-1] is not None for row in before)
            oracle = rank_candidates(
                full, budget, spec, req.filters, sort=sort, limit=12,
                siblings=sibling_lookup(reader),
            ).results  # fmt: skip
            assert before == [_row(r) for r in oracle], (targs, extra, sort)
            named = req.filters.query is not None
            every = _ids(reader, spec, budget, req, None, by_name=not named)
            # The dialects differ in the reads' SQL, not in the limits that drive them: one on
            # PostgreSQL (the class walk at 1, 5 and 12 copies on both: its own test below).
            for limit in limits:
                req = request_from_argv([*targs, *extra, "--sort", sort, "--limit", str(limit)])
                got = [_row(r) for r in search(reader, req).outcome.results]
                assert got == before[:limit], (targs, extra, sort, limit)
                if named:  # the search's read of a broad query, by shape
                    got = [_row(r) for r in ranked_all(reader, req, limit, by_name=False)]
                    assert got == before[:limit], (targs, extra, sort, limit)
                checked += bool(got)
                kept = _ids(reader, spec, budget, req, limit, by_name=not named)
                # Fewer rows, the same order, none twice (ctx's read changes course mid-run).
                assert len(set(kept)) == len(kept) and _subsequence(kept, every)
                left_out += len(every) - len(kept)
                named_left_out += len(every) - len(kept) if named else 0
        assert checked >= (len(cases) - 1) * len(limits)  # nearly every case has an answer
        assert left_out > 1000  # the copies were left out, not read
        assert named_left_out > 500  # also with a name query
        assert declined > 0  # and heads were left off for speed


def test_margin_copies_left_out_from_ids_equal_the_windows(hub_url, monkeypatch):
    """On SQLite a margin run's copies are left out from its ids and memory models
    (crawler.catalog.quality_runs.keyed_run with copies): the same candidates in the same
    order as the database's window over every copy (the read PostgreSQL keeps), on shapes
    with several copy classes, exact ties between classes and copies tied on downloads. The
    ids it reads, shared with the next stream of the search (its fit count), give that stream
    its own candidates."""
    from crawler.catalog import ordered, shape_runs
    from crawler.ranking.rank import pre_key

    # Runs not read from their ids are ranked by the SQL window (the class walk's classes are
    # finer: test_the_class_walk_keeps_what_a_window_over_the_stored_classes_keeps).
    monkeypatch.setattr(shape_runs, "best_copy_ids", lambda *_a: None)
    # MTP off: MTP auto with a GPU weighs heads by speed, which the class walk cannot see.
    with Reader.open(hub_url) as reader:
        by_ids = checked = 0
        # PostgreSQL reads the window either way: one limit shows it (and the memo unused)
        limits = (1, 5, 12) if reader.dialect == "sqlite" else (12,)
        for _tier, targs in TIERS:
            for limit in limits:
                argv = [*targs, "--no-mtp", "--sort", "margin", "--limit", str(limit)]
                req = request_from_argv(argv)
                budget, _, spec = validate_request(req)
                by_ids += ordered._classes_by_ids(
                    reader, ordered.bounded(req.filters, spec, budget), spec, budget, {}
                )
                shared: dict = {}  # as a search shares its reads with its fit count
                got = streamed(reader, req, by_shape=True, copies=limit, memo=shared)
                assert [c.quant_id for c in streamed(reader, req, memo=shared)] == [
                    c.quant_id for c in streamed(reader, req)
                ]
                assert shared or reader.dialect != "sqlite"
                with monkeypatch.context() as m:
                    m.setattr(ordered, "_classes_by_ids", lambda *_a: False)
                    window = streamed(reader, req, by_shape=True, copies=limit)
                keys = [pre_key("margin", c) for c in got]
                assert keys == [pre_key("margin", c) for c in window] == sorted(keys)
                assert sorted(zip(keys, (c.quant_id for c in got), strict=True)) == sorted(
                    (pre_key("margin", c), c.quant_id) for c in window
                )
                checked += len(got) < len(_ids(reader, spec, budget, req, None))
        assert checked == len(TIERS) * len(limits)  # copies were left out in every case
        assert by_ids == (checked if reader.dialect == "sqlite" else 0)


def test_a_copy_class_holds_equal_values(hub_url):
    """Quants the database puts in one copy class have equal sort values, tie-breaks before
    downloads, and fit alike, under every tier; the catalog has classes that share a shape.
    margin's and ctx's classes (no speed columns) hold equal values but speed."""
    with Reader.open(hub_url) as reader:
        everything = stream_candidates(
            reader, RunSpec(), Budget.from_gib(1e6), Filters(), "quality", by_shape=False
        )
        full = {c.quant_id: c for c in materializer(reader)(list(everything))}
        # The tiers change the values, the dialects the classes' SQL: PostgreSQL takes two
        tiers = (*TIERS, _FAST) if reader.dialect == "sqlite" else (TIERS[0], _FAST)
        extras = ([], ["--mtp"], ["--mtp-acceptance", "0"])  # the last leaves slow heads off
        for targs, extra in [(t, e) for _tier, t in tiers for e in extras]:
            req = request_from_argv([*targs, *extra, "--sort", "speed"])
            budget, _, spec = validate_request(req)
            memo: dict[Any, Any] = {}  # largest contexts, per coefficient object
            values = {qid: _values(c, spec, budget, memo) for qid, c in full.items()}
            for sort in ("speed", "ctx"):
                partition, params = copy_class_sql(sort, spec, budget)
                classes: dict[tuple[Any, ...], set[Any]] = {}
                shapes: dict[tuple[Any, ...], set[str]] = {}
                for row in reader.rows(
                    f"SELECT q.id, q.search_shape, {partition} FROM quants q"
                    " JOIN memory_models m ON m.quant_id = q.id WHERE q.live = TRUE",
                    params,
                ):
                    v = values[row[0]]
                    v = v if sort == "speed" or len(v) < 6 else v[:3] + v[4:]
                    classes.setdefault(tuple(row[2:]), set()).add(v)
                    shapes.setdefault(row[1], set()).add(tuple(row[2:]))
                assert all(len(v) == 1 for v in classes.values()), (targs, extra, sort)
                assert sum(len(s) > 1 for s in shapes.values()) >= 20
            # The stored classes within a shape (crawler.ranking.columns.copy_key): equal
            # values, speed included, under every sort.
            stored: dict[tuple[Any, ...], set[Any]] = {}
            for qid, shape, key in reader.rows(
                "SELECT id, search_shape, copy_key FROM quants WHERE live = TRUE"
            ):
                assert key is not None
                stored.setdefault((shape, key), set()).add(values[qid])
            assert all(len(v) == 1 for v in stored.values()), (targs, extra)
            assert len(stored) < len(full) / 10  # many copies a class


def _values(c: Any, spec: RunSpec, budget: Budget, memo: dict[Any, Any]) -> tuple[Any, ...]:
    """What ranking reads of a candidate before its downloads, repo and path (its largest
    context last)."""
    accepted = Filters(mtp=spec.mtp).accepts(c)
    try:
        cfg, est = evaluate(c, spec, budget)
    except EstimateError as exc:
        return (accepted, str(exc))
    if cfg is None or est is None:
        return (accepted, None)
    speed = speed_of(
        c, est, budget, acceptance=spec.mtp_acceptance, choose_draft=spec.spec_draft_auto
    )
    if head_declined(spec, budget, c, cfg, speed):  # MTP auto leaves a slower head off
        cfg, est = evaluate(c, without_head(spec), budget)
        assert cfg is not None and est is not None
        speed = speed_of(c, est, budget, acceptance=spec.mtp_acceptance)
    margin = margin_of(c, cfg, est, budget)[0]
    ranked = Ranked(0, c, cfg, est, margin, None, None, speed, None)
    return (
        accepted,
        cfg,
        margin,
        speed,
        c.quality_hint,
        with_max_ctx(ranked, spec, budget, memo).max_ctx,
    )


def test_the_class_walk_keeps_what_a_window_over_the_stored_classes_keeps(hub_url):
    """best_copy_ids (ix_quants_copy_class, class by class) keeps the quants the database's
    RANK() over (size, downloads) within each shape's stored classes keeps, with the memory
    bound and with a name's LIKE test, for 1, 5 and 12 copies (copies tie on downloads)."""
    from crawler.catalog.candidates import JOINED, bounded
    from crawler.catalog.copy_walk import best_copy_ids
    from crawler.catalog.shape_runs import run_source
    from crawler.ranking.copies import best_copies_sql

    with Reader.open(hub_url) as reader:
        shapes = [
            s for (s,) in reader.rows("SELECT DISTINCT search_shape FROM quants WHERE live = TRUE")
        ]
        pruned = 0
        for extra in ([], ["qwen"]):
            req = request_from_argv([*TIERS[2][1], *extra, "--sort", "speed"])
            budget, _, spec = validate_request(req)
            w = bounded(req.filters, spec, budget)
            for copies in (1, 5, 12):
                for shape in shapes:
                    source, names = run_source(w, [shape])
                    sql = best_copies_sql("SELECT q.id", source, JOINED, "y.copy_key", "c.id")
                    args = {**w.params, **names, "copies": copies}
                    window = sorted(int(row[0]) for row in reader.rows(sql, args))
                    walked = best_copy_ids(reader, w, [shape], copies)
                    assert walked is not None and sorted(walked) == window, (extra, copies, shape)
                    every = reader.rows(f"SELECT COUNT(*) FROM {source}", args)[0][0]
                    pruned += every - len(window)
        assert pruned > 1000


def test_the_class_walk_gives_way_to_the_window_where_a_shape_is_not_keyed(hub_url, monkeypatch):
    """A shape with a live quant without a class (a catalog not refilled since migration
    0018), with more classes than the walk takes, or more quants kept than it may read by id:
    best_copy_ids says so (None) and the search's read ranks that run in SQL, with the same
    answer."""
    from crawler.catalog import copy_walk
    from crawler.catalog.candidates import bounded

    req = request_from_argv([*TIERS[0][1], "--sort", "speed", "--limit", "5"])
    budget, _, spec = validate_request(req)
    with Reader.open(hub_url) as reader:
        before = [_row(r) for r in search(reader, req).outcome.results]
        w = bounded(req.filters, spec, budget)
        (shape, n), *_ = reader.rows(
            "SELECT search_shape, COUNT(DISTINCT copy_key) FROM quants WHERE live = TRUE"
            " GROUP BY search_shape ORDER BY 2 DESC, 1"
        )
        assert n > 1 and copy_walk.best_copy_ids(reader, w, [shape], 5) is not None
        with monkeypatch.context() as m:
            m.setattr(copy_walk, "_MAX_CLASSES", n - 1)
            assert copy_walk.best_copy_ids(reader, w, [shape], 5) is None
        with monkeypatch.context() as m:  # more kept (ties) than ids a read may bind
            m.setattr(copy_walk, "_MAX_KEPT", 4)
            assert copy_walk.best_copy_ids(reader, w, [shape], 5) is None
            assert [_row(r) for r in search(reader, req).outcome.results] == before
    with Catalog.open(hub_url) as catalog, catalog.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE quants SET copy_key = NULL WHERE live = TRUE AND copy_key IS NOT NULL")
        )
    try:
        with Reader.open(hub_url) as reader:
            assert copy_walk.best_copy_ids(reader, w, [shape], 5) is None
            assert [_row(r) for r in search(reader, req).outcome.results] == before != []
    finally:  # the module's catalog, as the other tests read it
        with Catalog.open(hub_url) as catalog, catalog.engine.begin() as conn:
            refresh_search_columns(conn, _class_only)


def test_copies_are_kept_where_the_database_cannot_tell(hub_url):
    """A text filter: the stream reads every candidate. A word no SQL tests (the name query's
    matcher rules out most of each class's best copies): the runs are read whole."""
    with Reader.open(hub_url) as reader:
        for extra in (["coder"], ["--arch", "llama"]):
            req = request_from_argv([*TIERS[0][1], *extra, "--sort", "speed", "--limit", "2"])
            budget, _, spec = validate_request(req)
            reads = [_ids(reader, spec, budget, req, c, by_name=False) for c in (2, None)]
            assert reads[0] == reads[1], extra


def ranked_all(reader: Any, req: Any, copies: int | None = None, *, by_name: bool = True) -> Any:
    """The results of the search's ranking on the read of every copy (of the best ``copies``
    of each class, if given)."""
    budget, _, spec = validate_request(req)
    stream = stream_candidates(
        reader, spec, budget, req.filters, req.sort, copies=copies, by_name=by_name
    )
    try:
        return rank_candidates(
            stream, budget, spec, req.filters, sort=req.sort, limit=req.limit,
            siblings=sibling_lookup(reader), materialize=materializer(reader), presorted=True,
        ).results  # fmt: skip
    finally:
        stream.close()


def _ids(
    reader: Any,
    spec: RunSpec,
    budget: Budget,
    req: Any,
    copies: int | None,
    *,
    by_name: bool = True,
) -> list[int]:
    """The quant ids of the search's stream, read to its end."""
    stream = stream_candidates(
        reader, spec, budget, req.filters, req.sort, copies=copies, by_name=by_name
    )
    try:
        return [c.quant_id for c in stream]
    finally:
        stream.close()


def _subsequence(part: list[int], whole: list[int]) -> bool:
    rest = iter(whole)
    return all(item in rest for item in part)
