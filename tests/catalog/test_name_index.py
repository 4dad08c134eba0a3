"""The name index (migration 0011: SQLite FTS5 trigrams, PostgreSQL pg_trgm) against the reads
without it, on SQLite and PostgreSQL: same rows in the same order for every sort and tier, short
tokens left to the other reads, the index current after every write, migration down and up.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from sqlalchemy import delete, select, text, update

from bench.bench_search_hub import SORTS, TIERS, build
from crawler.base.errors import UsageError
from crawler.catalog import Catalog
from crawler.catalog.candidates import count_left_out
from crawler.catalog.comparison import load_comparison
from crawler.catalog.name_index import name_candidates
from crawler.catalog.reader import SCHEMA_HEAD, Reader
from crawler.catalog.search_index import refresh_live_rows
from crawler.catalog.store import mark_repos_vanished, refresh_live
from crawler.catalog.tables import Quant, Repo
from crawler.cli.search_cmd import request_from_argv
from crawler.crawl.catalogs import open_catalog
from crawler.library.search_request import validate_request
from crawler.ranking.query import QueryMatcher
from tests.catalog.populate import NEWCOMER, add_newcomer, populate
from tests.catalog.reads import by_name_agrees, ranked
from tests.pg import BOTH_DATABASES, built_catalog


@pytest.fixture(scope="module", params=BOTH_DATABASES)
def hub_url(request, tmp_path_factory) -> Iterator[str]:
    """A Hub-shaped catalog of 1,200 quants (bench/bench_search_hub.py), built once a database."""
    with built_catalog(request.param, tmp_path_factory.mktemp("names"), "quants_names",
                       lambda url: build(url, 1200)) as url:  # fmt: skip
        yield url


def _one_base(reader: Reader) -> str:
    """A query naming one Qwen3.6-27B base model of the catalog: "qwen3.6 27b b<number>"."""
    (name,) = reader.rows(
        "SELECT MIN(search_text) FROM quants WHERE search_text LIKE '%qwen3.6-27b%'"
    )[0]
    return "qwen3.6 27b " + re.findall(r"-(b\d+)-", name)[0]


def test_reads_through_the_index_equal_the_reads_without_it(hub_url):
    with Reader.open(hub_url) as reader:
        one_base = _one_base(reader)
        # Indexed: every query token with digits of 3+ characters is looked up ("8b" and "q4"
        # are shorter: left to the LIKE test and the matcher); pg_trgm needs 3 alphanumerics in
        # a row ("3.6" has none there).
        indexed = ["qwen3.6 27b", one_base, "27b q4", "3.6 8b", "a3b", "100%_x9", "1.1.1 a3b"]
        # Not indexed: only short tokens with digits, or none (words may match with a typo).
        plain = ["8b", "q4 7b", "qwen", "llama instruct"]
        if reader.dialect == "postgresql":
            indexed.remove("3.6 8b")
            plain.append("3.6 8b")
        for query in indexed + plain:
            ids = name_candidates(reader, QueryMatcher(query), 4000)
            assert (ids is not None) == (query in indexed), query
        # A query the index does not serve reads the same way either way: only the served ones
        # are compared.
        served = 0
        # the dialects differ in the index's SQL, not in the tiers: two on PostgreSQL
        tiers = TIERS if reader.dialect == "sqlite" else TIERS[::2]
        for query in indexed:
            for _tier, targs in tiers:
                for sort in SORTS:
                    served += by_name_agrees(
                        reader, [query, *targs, "--sort", sort, "--limit", "7"]
                    )
        # most indexed requests have results: that is what is compared
        assert served >= (60 if reader.dialect == "sqlite" else 35)


def test_what_nothing_fits_counts_is_the_same_through_the_index(hub_url):
    with Reader.open(hub_url) as reader:
        counted = 0
        for query in ("qwen3.6 27b", _one_base(reader), "27b q4", "a3b", "8b"):
            for vram in ("1", "12"):
                req = request_from_argv([query, "--vram", vram, "--ctx", "32768"])
                budget, _, spec = validate_request(req)
                with_index = count_left_out(reader, spec, budget, req.filters)
                assert with_index == count_left_out(
                    reader, spec, budget, req.filters, by_name=False
                ), (query, vram)
                counted += with_index[0] > 0
        assert counted >= 5  # quants too big were counted: that is what is compared


def _ids(url: str, query: str) -> set[int]:
    with Reader.open(url) as reader:
        found = name_candidates(reader, QueryMatcher(query), 10_000)
    assert found is not None
    return set(found)


def _holding(url: str, token: str) -> set[int]:
    with Catalog.open(url) as catalog, catalog.session() as s:
        return set(s.scalars(select(Quant.id).where(Quant.search_text.contains(token))))


def _check_fts(url: str) -> None:
    """SQLite: FTS5's own check that the index holds exactly what its content table holds
    (https://sqlite.org/fts5.html#the_integrity_check_command); raises otherwise."""
    if url.startswith("sqlite"):
        with Catalog.open(url) as catalog, catalog.engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO quants_search(quants_search, rank) VALUES ('integrity-check', 1)"
            )


def test_the_index_follows_every_write(catalog_url):
    populate(catalog_url)
    with Catalog.open(catalog_url) as catalog:
        refresh_live(catalog)  # the search text, as the crawl's write path sets it
    everything = _holding(catalog_url, "27b")
    assert len(everything) == 5 and _ids(catalog_url, "27b") == everything
    _check_fts(catalog_url)

    # A new repo and quant, written and refreshed as a crawl does.
    repo_pk, _ = add_newcomer(catalog_url)
    (zeta,) = _holding(catalog_url, "9.75b")
    assert _ids(catalog_url, "9.75b") >= {zeta}
    _check_fts(catalog_url)

    # An update of the names: the base model (the search text follows it).
    with Catalog.open(catalog_url) as catalog, catalog.session() as s:
        s.execute(update(Repo).where(Repo.id == repo_pk).values(base_model="org/Omega-7.25B"))
        s.execute(update(Quant).where(Quant.id == zeta).values(base_model=None))
        refresh_live_rows(s, [repo_pk])
    assert zeta in _ids(catalog_url, "7.25b")
    _check_fts(catalog_url)

    # Vanished: still indexed (the search's live filter drops it), text unchanged.
    with Catalog.open(catalog_url) as catalog:
        assert mark_repos_vanished(catalog, seen=[], authors=["newcomer"]) == [NEWCOMER]
    assert zeta in _ids(catalog_url, "7.25b")

    # Deleted: a quant alone, then a repo with its quants (the foreign key's cascade).
    with Catalog.open(catalog_url) as catalog, catalog.session() as s:
        s.execute(delete(Quant).where(Quant.id == zeta))
    assert zeta not in _ids(catalog_url, "7.25b")
    with Catalog.open(catalog_url) as catalog, catalog.session() as s:
        someone = s.scalars(select(Repo).where(Repo.author == "someone")).one()
        theirs = set(s.scalars(select(Quant.id).where(Quant.repo_pk == someone.id)))
        s.execute(delete(Repo).where(Repo.id == someone.id))
    assert theirs and not theirs & _ids(catalog_url, "27b")
    assert _ids(catalog_url, "27b") == everything - theirs
    _check_fts(catalog_url)

    # Too long to store: NULL search text, always among the index's rows (the matcher decides).
    with Catalog.open(catalog_url) as catalog, catalog.session() as s:
        s.execute(
            update(Quant).where(Quant.id == min(everything - theirs)).values(search_text=None)
        )
    assert min(everything - theirs) in _ids(catalog_url, "404z")
    _check_fts(catalog_url)


#: The SQLite objects migration 0011 makes: the FTS5 table and the triggers that keep it.
_SQLITE_OBJECTS = {"quants_search", "quants_search_insert", "quants_search_delete",
                   "quants_search_update"}  # fmt: skip


def _has_index(url: str) -> bool:
    with Catalog.open(url, upgrade=False, check=False) as catalog, catalog.engine.connect() as c:
        if c.dialect.name == "sqlite":
            names = set(c.execute(text("SELECT name FROM sqlite_master")).scalars())
            assert names >= _SQLITE_OBJECTS or not names & _SQLITE_OBJECTS  # all or none
            return names >= _SQLITE_OBJECTS
        sql = "SELECT COUNT(*) FROM pg_indexes WHERE indexname = 'ix_quants_search_trgm'"
        return c.execute(text(sql)).scalar() == 1


def test_migration_down_and_up(catalog_url):
    from alembic import command

    populate(catalog_url)
    with Catalog.open(catalog_url) as catalog:
        refresh_live(catalog)
        assert _has_index(catalog_url)
        command.downgrade(catalog._alembic_config(), "0010_search_shape")
    assert not _has_index(catalog_url)
    with Catalog.open(catalog_url, upgrade=False, check=False) as catalog, catalog.session() as s:
        # Written while the index is gone: the upgrade indexes it.
        s.execute(update(Quant).values(search_text=Quant.search_text + " zz9x"))
        n = s.scalar(select(Quant.id).order_by(Quant.id).limit(1))
    with open_catalog(catalog_url) as catalog:  # later revisions refill the search columns
        assert catalog.current_revision() == SCHEMA_HEAD
    assert _has_index(catalog_url)
    assert n in _ids(catalog_url, "zz9x")
    assert _ids(catalog_url, "zz9x") == _holding(catalog_url, "zz9x")
    _check_fts(catalog_url)


def _compared(reader: Reader, query: str) -> object:
    """compare's answer: (base, quants) or its error message."""
    try:
        c = load_comparison(reader, query)
    except UsageError as exc:
        return str(exc)
    return c.base_model, [(q.repo_id, q.path, q.quality) for q in c.quants]


def test_a_catalog_without_the_index_reads_as_before(catalog_url):
    """Where migration 0011 could make no index (no FTS5 trigrams, pg_trgm refused), name queries
    (search, compare) read without it, with the same answers as with it."""
    build(catalog_url, 1200)
    with Reader.open(catalog_url) as reader:
        queries = ["qwen3.6 27b", _one_base(reader), "a3b", "3.6 8b", "9z9"]
        compared = [_compared(reader, q) for q in queries]
    # One base's quants, and errors (several bases, none): both are compared below.
    assert [isinstance(c, str) for c in compared] == [True, False, True, True, True]
    assert "no quant" in str(compared[-1]) and "several" in str(compared[0])
    with Catalog.open(catalog_url) as catalog, catalog.engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            for name in sorted(_SQLITE_OBJECTS - {"quants_search"}):
                conn.exec_driver_sql(f"DROP TRIGGER {name}")
            conn.exec_driver_sql("DROP TABLE quants_search")
        else:
            conn.exec_driver_sql("DROP INDEX ix_quants_search_trgm")
    assert not _has_index(catalog_url)
    with Reader.open(catalog_url) as reader:
        assert name_candidates(reader, QueryMatcher("qwen3.6 27b"), 100) is None
        for sort in SORTS:
            req = request_from_argv(["qwen3.6 27b", "--gpu", "rtx 4090", "--sort", sort])
            found = ranked(reader, req, by_name=True)
            assert found and found == ranked(reader, req, by_name=False), sort
        # `quants compare` (crawler.catalog.comparison): the same answers as with the index.
        assert [_compared(reader, q) for q in queries] == compared
