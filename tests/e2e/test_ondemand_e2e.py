"""On-demand search end to end: the real CLI in a subprocess, an empty catalog, the Hub emulator.

The quant repo of the model is named so that no name search finds it ("someone/chat-7b-q-GGUF"):
only its card's base model (``meta-llama/Llama-2-7b-chat-hf``, found by the name search) leads
to it, through ``filter=base_model:quantized:<id>``.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.cli import clean_env, run_quants
from tests.fixtures.world import FileCache, Quant, RepoSpec, populate, text
from tests.hub_emulator.server import HubEmulator
from tests.schemas import checked

BASE = "meta-llama/Llama-2-7b-chat-hf"
QUANT_REPO = "someone/chat-7b-q-GGUF"
RECIPES = ("Q4_K_M", "Q8_0", "Q6_K", "Q4_0")


def _world() -> list[RepoSpec]:
    when = datetime(2026, 6, 1, tzinfo=UTC)
    return [
        RepoSpec(BASE, (text("config.json", '{"model_type": "llama"}'),), when),
        RepoSpec(
            QUANT_REPO,
            tuple(Quant(f"chat-7b-{r}.gguf", "llama", r) for r in RECIPES),
            when,
            card_data={"base_model": BASE, "base_model_relation": "quantized"},
        ),
    ]


@pytest.fixture
def emu(world_cache: FileCache) -> Iterator[HubEmulator]:
    emulator = HubEmulator()
    populate(emulator.state, world_cache, _world())
    with emulator:
        yield emulator


def _search(
    emu_endpoint: str, tmp: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    db = f"sqlite:///{tmp / 'catalog.sqlite'}"
    e = clean_env(tmp, QUANTS_HF_ENDPOINT=emu_endpoint, **env)
    return run_quants("search", *args, "--vram", "48", "--ctx", "4096", "--db", db, "--json", env=e)


def _ranged(emu: HubEmulator) -> int:
    return sum(1 for r in emu.requests() if r.range)


def _doc(out: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = checked("search", out.stdout)
    return doc


def test_empty_catalog_answers_a_model_found_only_through_its_base_model(emu, tmp_path):
    out = _search(emu.endpoint, tmp_path, "llama 2 7b chat")
    doc = _doc(out)
    repos = {r["repo"] for r in doc["results"]}
    assert repos == {QUANT_REPO}
    assert len(doc["results"]) == len(RECIPES)
    assert "looked up 'llama 2 7b chat' on the Hub" in out.stderr
    assert BASE in out.stderr
    assert re.search(r"repos \d+\s+files \d+\s+[\d.]+ [KMG]?i?B", out.stderr), out.stderr
    assert _ranged(emu) > 0

    # The same search again: answered from the catalog, not one request to the Hub.
    emu.clear_log()
    again = _doc(_search(emu.endpoint, tmp_path, "llama 2 7b chat"))
    assert {(r["repo"], r["path"]) for r in again["results"]} == {
        (r["repo"], r["path"]) for r in doc["results"]
    }
    assert _ranged(emu) == 0
    assert emu.requests() == []

    # Typed differently, the same model is fresh in the catalog: no request either.
    again = _doc(_search(emu.endpoint, tmp_path, "Llama-2-7B-Chat"))
    assert len(again["results"]) == len(RECIPES)
    assert emu.requests() == []


def test_offline_answers_from_the_catalog_alone(emu, tmp_path):
    out = _search(emu.endpoint, tmp_path, "llama 2 7b chat", "--offline")
    assert out.returncode == 3, out.stderr  # nothing stored yet: nothing fits, honestly
    out = _search(emu.endpoint, tmp_path, "llama 2 7b chat", QUANTS_OFFLINE="1")
    assert out.returncode == 3, out.stderr
    assert emu.requests() == []


def _dead_endpoint() -> str:
    with socket.socket() as s:  # a port nothing listens on (closed right away)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_an_unreachable_hub_is_one_error_with_the_network_exit_code(tmp_path):
    out = _search(_dead_endpoint(), tmp_path, "llama 2 7b chat")
    assert out.returncode == 4, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert "cannot reach the Hub" in errors[0] and "--offline" in errors[0]
    assert "Traceback" not in out.stderr
    assert out.stdout == ""


def test_a_crawl_that_reaches_nothing_fails(tmp_path):
    db = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    e = clean_env(tmp_path)
    out = run_quants("crawl", "--endpoint", _dead_endpoint(), "--db", db, "--all", env=e)
    assert out.returncode == 4, out.stderr
    assert "reached nothing" in out.stderr
    assert "Traceback" not in out.stderr
    scans = run_quants("scans", "--db", db, "--json", env=e)
    assert scans.returncode == 0, scans.stderr
    assert json.loads(scans.stdout)[0]["status"] == "failed"


def test_compare_looks_the_model_up_too(emu, tmp_path):
    db = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    e = clean_env(tmp_path, QUANTS_HF_ENDPOINT=emu.endpoint)
    out = run_quants("compare", "Llama-2-7b-chat", "--db", db, "--json", env=e)
    assert out.returncode == 0, out.stderr
    doc = checked("compare", out.stdout)
    assert doc["base_model"] == BASE
    assert {q["repo"] for q in doc["quants"]} == {QUANT_REPO}


def test_a_search_while_a_crawl_holds_the_catalog_answers_from_it_and_says_so(emu, tmp_path):
    from crawler.base.config import Settings
    from crawler.crawl.lock import crawl_lock

    db = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    settings = Settings(data_dir=tmp_path / "data", db_url=db)
    with crawl_lock(settings, command="quants schedule"):
        out = _search(emu.endpoint, tmp_path, "llama 2 7b chat")
    assert out.returncode == 3, out.stderr  # the empty catalog, answered as it stands
    assert "not looked up on the Hub: the catalog is being crawled by" in out.stderr
    assert "quants schedule" in out.stderr and "Traceback" not in out.stderr
    assert emu.requests() == []  # not even the name search: all of it waits for the lock
    # Not recorded as looked up: once the crawl is over, the same search looks the model up.
    doc = _doc(_search(emu.endpoint, tmp_path, "llama 2 7b chat"))
    assert {r["repo"] for r in doc["results"]} == {QUANT_REPO}


def test_an_on_demand_look_up_is_a_crawl_pass_the_watches_follow(emu, tmp_path):
    db = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    e = clean_env(tmp_path, QUANTS_HF_ENDPOINT=emu.endpoint)
    watch = ["llama 2 7b chat", "--vram", "48", "--ctx", "4096"]
    added = run_quants("watch", "add", "chat", "--db", db, "--", *watch, env=e)
    assert added.returncode == 0, added.stderr
    assert emu.requests() == []  # adding a watch looks nothing up
    _doc(_search(emu.endpoint, tmp_path, "llama 2 7b chat"))
    scans = json.loads(run_quants("scans", "--db", db, "--json", env=e).stdout)
    assert [s["trigger"] for s in scans] == ["search"]
    feed = tmp_path / "data" / "feeds" / "watches.jsonl"
    hits = [json.loads(line) for line in feed.read_text("utf-8").splitlines()]
    assert {(h["watch"], h["repo"]) for h in hits} == {("chat", QUANT_REPO)}
    assert len(hits) == len(RECIPES)
