"""Catalog: migrations match the models; views, read-only SQL, shipped queries (SQLite + PG)."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from crawler.base.errors import QueryError, ReadOnlyViolation, SchemaOutOfDate, UsageError
from crawler.catalog import Catalog, params_from_pairs, resource_dir
from crawler.catalog.orm import Base, in_metadata
from crawler.catalog.queries import bind_params, list_queries, resolve_query
from crawler.ranking.columns import stored_columns
from tests.catalog.populate import populate

V_QUANTS = [
    "repo_id",
    "revision",
    "path",
    "quant_label",
    "architecture",
    "size_bytes",
    "n_params",
    "bpw",
    "mtp_present",
    "mtp_min_bits",
    "mtp_preserved",
    "attn_min_bits",
    "attn_preserved",
    "dynamic",
    "loadable_by_mainline",
    "analysed_at",
]
V_TENSOR_GROUPS = [
    "repo_id",
    "path",
    "group_name",
    "n_tensors",
    "n_params",
    "n_bytes",
    "bpw",
    "min_bits",
    "max_bits",
]


def test_migrations_match_models(catalog_url):
    with Catalog.open(catalog_url) as catalog, catalog.engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_name": in_metadata}
        )
        assert compare_metadata(ctx, Base.metadata) == []
        assert catalog.current_revision() == catalog.head_revision()


def test_search_shape_index_ends_on_size_and_downgrades(catalog_url):
    """0011 adds size, quality and repo to ix_quants_search_shape (the size read by shape);
    its downgrade restores the 0010 index and a new upgrade redoes it."""

    def columns(catalog: Catalog) -> list[str]:
        found = inspect(catalog.engine).get_indexes("quants")
        shape = [ix for ix in found if ix["name"] == "ix_quants_search_shape"]
        return [str(c) for ix in shape for c in ix["column_names"]]

    shape = ["live", "search_shape"]
    populate(catalog_url)
    with Catalog.open(catalog_url) as catalog:
        assert columns(catalog) == [*shape, "size_bytes", "quality_score", "repo_pk"]
        command.downgrade(catalog._alembic_config(), "0010_search_shape")
        assert columns(catalog) == shape
        # (0013 refills the search columns: the crawl's column function)
        assert catalog.upgrade(stored_columns) == catalog.head_revision()
        assert columns(catalog) == [*shape, "size_bytes", "quality_score", "repo_pk"]


def test_open_migrates_once_and_check_mode(catalog_url):
    with Catalog.open(catalog_url, upgrade=False, check=False) as bare:
        assert bare.current_revision() is None
        with pytest.raises(SchemaOutOfDate):
            bare.check_schema()
    with Catalog.open(catalog_url) as catalog:
        head = catalog.current_revision()
        assert head is not None
        assert catalog.upgrade() == head  # idempotent
    with Catalog.open(catalog_url, upgrade=False) as again:
        assert again.current_revision() == head


def test_views_have_the_documented_columns(catalog_url):
    with Catalog.open(catalog_url) as catalog:
        cols, rows = catalog.query_readonly("select * from v_quants")
        assert (cols, rows) == (V_QUANTS, [])
        cols, _ = catalog.query_readonly("select * from v_tensor_groups")
        assert cols == V_TENSOR_GROUPS


def test_views_hide_vanished_quants(catalog_url):
    populate(catalog_url)
    with Catalog.open(catalog_url) as catalog:
        _, rows = catalog.query_readonly("select path from v_quants order by path")
        paths = [r[0] for r in rows]
        assert "Qwen3.6-27B-Q2_K.gguf" not in paths
        assert len(paths) == 4
        _, rows = catalog.query_readonly("select count(*) from v_tensor_groups")
        assert rows[0][0] == 8


@pytest.mark.parametrize(
    "statement",
    [
        "delete from repos",
        "insert into crawl_state(key, value) values ('k', 'v')",
        "update repos set downloads = 0",
        "drop table repos",
        "create table evil(x integer)",
    ],
)
def test_readonly_query_refuses_writes(catalog_url, statement):
    populate(catalog_url)
    with Catalog.open(catalog_url) as catalog:
        with pytest.raises(ReadOnlyViolation):
            catalog.query_readonly(statement)
        _, rows = catalog.query_readonly("select count(*), sum(downloads) from repos")
        assert tuple(rows[0]) == (2, 1010)


def test_readonly_sqlite_cannot_attach_a_writable_database(sqlite_url, tmp_path):
    with Catalog.open(sqlite_url) as catalog, pytest.raises(ReadOnlyViolation):
        catalog.query_readonly(f"attach database '{tmp_path / 'x.db'}' as x")
    assert not (tmp_path / "x.db").exists()


def test_readonly_query_errors_are_query_errors(catalog_url):
    with Catalog.open(catalog_url) as catalog, pytest.raises(QueryError, match="query failed"):
        catalog.query_readonly("select * from no_such_table")


def test_params_from_pairs():
    assert params_from_pairs(["a=1", "b=2.5", "c=x=y", "d="]) == {
        "a": 1,
        "b": 2.5,
        "c": "x=y",
        "d": "",
    }
    with pytest.raises(QueryError):
        params_from_pairs(["novalue"])
    with pytest.raises(QueryError):
        params_from_pairs(["bad name=1"])


def test_resolve_query_by_name_file_and_text(tmp_path):
    assert resolve_query("mtp_downgraded").params == {"min_bits": 6}
    assert resolve_query("mtp_downgraded.sql").name == "mtp_downgraded"
    f = tmp_path / "mine.sql"
    f.write_text("-- purpose: mine\n-- param: n (a number)\nselect :n as n\n")
    q = resolve_query(str(f))
    assert (q.name, q.purpose, q.params) == ("mine", "mine", {"n": None})
    with pytest.raises(QueryError, match="--param n="):
        bind_params(q, {})
    assert resolve_query("select 1").name == "<sql>"
    with pytest.raises(UsageError):
        resolve_query("missing_file.sql")


# What each shipped query must return over tests/catalog/populate.py (first column(s) checked).
EXPECTED: dict[str, tuple[dict[str, object], list[tuple[object, ...]]]] = {
    "mtp_downgraded": ({}, [("someone/Qwen3.6-27B-GGUF", "Qwen3.6-27B-Q4_K_M.gguf")]),
    "mtp_preserved": (
        {},
        [
            ("unsloth/Qwen3.6-27B-GGUF", "Qwen3.6-27B-UD-Q3_K_XL.gguf"),
            ("unsloth/Qwen3.6-27B-GGUF", "Qwen3.6-27B-UD-Q4_K_XL.gguf"),
        ],
    ),
    "dynamic_with_low_attention": (
        {},
        [
            ("unsloth/Qwen3.6-27B-GGUF", "Qwen3.6-27B-UD-Q4_K_XL.gguf"),
        ],
    ),
    "fits_vram": (
        {"vram_gib": 16, "ctx": 4096},
        [
            ("someone/Qwen3.6-27B-GGUF", "Qwen3.6-27B-IQ4_KS.gguf"),
            ("unsloth/Qwen3.6-27B-GGUF", "Qwen3.6-27B-UD-Q3_K_XL.gguf"),
        ],
    ),
    "uploaders_mtp": ({}, [("unsloth", 2, 2, 0), ("someone", 1, 0, 1)]),
    "claims_contradicted": ({}, [("unsloth/Qwen3.6-27B-GGUF", "Qwen3.6-27B-UD-Q4_K_XL.gguf")]),
    "reuploads": ({}, [("unsloth/Qwen3.6-27B-GGUF", "Qwen3.6-27B-UD-Q4_K_XL.gguf", 2)]),
    "group_bits": (
        {"repo": "unsloth/%"},
        [
            ("unsloth/Qwen3.6-27B-GGUF", "Qwen3.6-27B-UD-Q3_K_XL.gguf", "attn"),
            ("unsloth/Qwen3.6-27B-GGUF", "Qwen3.6-27B-UD-Q3_K_XL.gguf", "ffn"),
            ("unsloth/Qwen3.6-27B-GGUF", "Qwen3.6-27B-UD-Q4_K_XL.gguf", "attn"),
            ("unsloth/Qwen3.6-27B-GGUF", "Qwen3.6-27B-UD-Q4_K_XL.gguf", "ffn"),
        ],
    ),
    "not_loadable": ({}, [("someone/Qwen3.6-27B-GGUF", "Qwen3.6-27B-IQ4_KS.gguf")]),
    "scan_errors_by_kind": ({}, [("gated", 1), ("malformed_gguf", 1)]),
}


def test_every_shipped_query_has_an_expectation():
    names = {q.name for q in list_queries()}
    assert len(names) >= 6
    assert names == set(EXPECTED)
    for q in list_queries():
        assert q.purpose, f"{q.name} lacks a -- purpose: line"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_query_results(catalog_url, name):
    populate(catalog_url)
    params, expected = EXPECTED[name]
    query = resolve_query(name)
    with Catalog.open(catalog_url) as catalog:
        _, rows = catalog.query_readonly(query.sql, bind_params(query, params))
    width = len(expected[0]) if expected else 0
    assert [tuple(r[:width]) for r in rows] == expected


def test_queries_ship_with_the_package():
    assert (resource_dir("queries") / "mtp_downgraded.sql").is_file()
    assert (resource_dir("migrations") / "env.py").is_file()
