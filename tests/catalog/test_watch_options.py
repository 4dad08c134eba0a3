"""Watches stored before revision 0009 held the argv of `quants search`; the upgrade turns each into
the options by name that the library checks and runs (no CLI needed), and a downgrade turns them
back into an argv that converts to the same options."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from alembic import command
from sqlalchemy import text

from crawler.base.config import Settings
from crawler.catalog import Catalog
from crawler.catalog.watches import list_watches
from crawler.crawl.catalogs import open_catalog
from crawler.crawl.watch import watch_request

OLD = "0008_measured_quality"
# (name, argv as `quants watch add NAME -- ...` stored it, the options it becomes)
ROWS: list[tuple[str, list[str], dict[str, Any]]] = [
    ("plain", ["--vram", "24", "--ctx", "262144", "--mtp"],
     {"vram": 24.0, "ctx": 262144, "mtp": True}),
    (
        "spelled",
        ["qwen3.6 27b", "--vram=48", "-c", "256k", "-ctk", "q8_0", "-np", "2", "-ub=256",
         "--no-mtp", "--json"],
        {"query": "qwen3.6 27b", "vram": 48.0, "ctx": 262144, "cache_type_k": "q8_0", "parallel": 2,
         "ubatch": 256, "mtp": False},
    ),
    (
        "gpus",
        ["--gpu", "rtx 3090", "--gpu", "rtx 4090", "--headroom", "1GiB", "--db", "x.sqlite"],
        {"gpu": ["rtx 3090", "rtx 4090"], "headroom": 1.0},
    ),
    ("moe", ["--vram", "24576MiB", "--cpu-moe", "--ram", "64G", "--mmproj"],
     {"vram": 24.0, "cpu_moe": True, "ram": 64.0, "vision": True}),
    ("retired", ["--vram", "24", "--fast"], {"unconverted_argv": ["--vram", "24", "--fast"]}),
]  # fmt: skip


def _old_catalog(url: str) -> None:
    """A catalog at 0008 holding the argv rows."""
    with Catalog.open(url, upgrade=False, check=False) as catalog:
        command.upgrade(catalog._alembic_config(), OLD)
        with catalog.engine.begin() as conn:
            for name, argv, _ in ROWS:
                conn.execute(
                    text("INSERT INTO watches (name, args, created_at) VALUES (:n, :a, :t)"),
                    {"n": name, "a": json.dumps(argv), "t": datetime.now(UTC)},
                )


def test_old_argv_rows_become_options_the_library_runs(catalog_url):
    _old_catalog(catalog_url)
    with open_catalog(catalog_url) as catalog:
        assert catalog.current_revision() == catalog.head_revision() != OLD
        stored = {w.name: dict(w.options) for w in list_watches(catalog)}
    assert stored == {name: options for name, _, options in ROWS}
    settings = Settings(headroom_gib=0.5)
    req = watch_request(settings, stored["spelled"])
    spec = req.spec
    assert (spec.ctx, spec.type_k, spec.parallel, spec.ubatch, spec.mtp_auto) == (
        262144, "q8_0", 2, 256, False
    )  # fmt: skip
    assert req.filters.query == "qwen3.6 27b" and req.headroom_gib == 0.5
    assert watch_request(settings, stored["gpus"]).more_gpus == ("rtx 4090",)


def test_a_downgrade_gives_back_an_argv_of_the_same_options(catalog_url):
    _old_catalog(catalog_url)
    with open_catalog(catalog_url) as catalog:
        upgraded = {w.name: dict(w.options) for w in list_watches(catalog)}
        command.downgrade(catalog._alembic_config(), OLD)
        with catalog.engine.begin() as conn:
            rows = conn.execute(text("SELECT name, args FROM watches")).all()
        # SQLite hands back the JSON text, PostgreSQL's driver the decoded value.
        argv = {n: json.loads(a) if isinstance(a, str) else a for n, a in rows}
        assert all(isinstance(a, list) for a in argv.values())
        assert argv["retired"] == ["--vram", "24", "--fast"]
    with open_catalog(catalog_url) as catalog:
        assert {w.name: dict(w.options) for w in list_watches(catalog)} == upgraded
