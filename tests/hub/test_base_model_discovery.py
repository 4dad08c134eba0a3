"""The default crawl also lists the quantized children of known base models."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from crawler.base.config import Settings
from crawler.catalog import Catalog
from crawler.crawl.scan import run_once
from crawler.hub import HubClient
from tests.fixtures.world import FileCache, Quant, RepoSpec, populate
from tests.hub.snapshot import rows
from tests.hub_emulator import HubEmulator

BASE = "org/Model-7B"
KNOWN = "unsloth/Model-7B-GGUF"  # an uploader of the default list
NEWCOMER = "newcomer/m7-quants-GGUF"  # not in the list, no search term in its name
CONFIGURED = "other/Thing-3B"


def _world() -> list[RepoSpec]:
    when = datetime(2026, 6, 1, tzinfo=UTC)
    card = {"base_model": BASE, "base_model_relation": "quantized"}
    return [
        RepoSpec(KNOWN, (Quant("Model-7B-Q4_K_M.gguf", "llama", "Q4_K_M"),), when, card),
        RepoSpec(NEWCOMER, (Quant("m7-Q8_0.gguf", "llama", "Q8_0"),), when, card),
        RepoSpec(
            "someone/thing-q-GGUF",
            (Quant("thing-Q8_0.gguf", "llama", "Q8_0"),),
            when,
            {"base_model": CONFIGURED},
        ),
    ]


@pytest.fixture
def emu(world_cache: FileCache) -> Iterator[HubEmulator]:
    emulator = HubEmulator()
    populate(emulator.state, world_cache, _world())
    with emulator:
        yield emulator


def _repos(url: str) -> set[str]:
    return {r[0] for r in rows(url, "SELECT repo_id FROM repos")}


def test_a_new_uploader_of_a_known_base_model_is_found_without_an_author_entry(
    emu: HubEmulator, tmp_path, make_client: Callable[..., HubClient]
) -> None:
    url = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    settings = Settings(hf_endpoint=emu.endpoint, db_url=url, timeout_s=5.0)
    with Catalog.open(url) as catalog:
        run_once(settings, hub=make_client(emu), catalog=catalog)
        assert _repos(url) == {KNOWN}  # the catalog knew no base model yet
        emu.clear_log()
        run_once(settings, hub=make_client(emu), catalog=catalog)
    assert _repos(url) == {KNOWN, NEWCOMER}
    filters = [r.query for r in emu.requests(path="/api/models") if "base_model" in r.query]
    assert any("base_model%3Aquantized%3Aorg%2FModel-7B" in q for q in filters), filters


def test_configured_base_models_are_listed_too(
    emu: HubEmulator, tmp_path, make_client: Callable[..., HubClient]
) -> None:
    url = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    settings = Settings(hf_endpoint=emu.endpoint, db_url=url, base_models=(CONFIGURED,))
    with Catalog.open(url) as catalog:
        run_once(settings, hub=make_client(emu), catalog=catalog)
    assert _repos(url) == {KNOWN, "someone/thing-q-GGUF"}


def test_quants_base_models_is_read_from_the_environment() -> None:
    s = Settings.from_env({"QUANTS_BASE_MODELS": " a/b , c/d,"})
    assert s.base_models == ("a/b", "c/d")
