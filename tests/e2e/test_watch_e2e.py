"""Watches end to end: the real CLI in a subprocess, crawls against the Hub emulator.

A watch fires once for a new fitting quant, not again for the same one, again when that quant
is re-uploaded with other content, and never for a new quant outside its search.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from tests.cli import Cli
from tests.fixtures.world import FileCache, Quant, RepoSpec, populate, reupload
from tests.hub_emulator import HubEmulator

ATOM = "{http://www.w3.org/2005/Atom}"
SEARCH = ["qwen3 8b", "--vram", "24", "--ctx", "4096"]


class WatchCli(Cli):
    """The CLI against one emulator and catalog, plus the watch feed files."""

    def crawl_and_evaluate(self) -> None:
        # --full: every repo is listed, whatever the emulator's commit dates.
        self.run("crawl", "--full")
        # The repos this test adds must have been read without error, or the test means nothing.
        conn = sqlite3.connect(self.db)
        try:
            errors = conn.execute(
                "select repo_id, kind, message from scan_errors "
                "where scan_id = (select max(id) from scans) and repo_id like 'bartowski/%'"
            ).fetchall()
        finally:
            conn.close()
        assert errors == []
        # No `watch run` here: `quants crawl` itself evaluates the watches after its scan.

    def feed(self) -> tuple[list[dict[str, Any]], list[ET.Element]]:
        jsonl = self.data / "feeds" / "watches.jsonl"
        lines = jsonl.read_text("utf-8").splitlines() if jsonl.exists() else []
        atom = ET.parse(self.data / "feeds" / "watches.atom").getroot()
        return [json.loads(line) for line in lines], atom.findall(f"{ATOM}entry")


def _repo(repo_id: str, quant: Quant, base: str) -> RepoSpec:
    return RepoSpec(
        repo_id,
        (quant,),
        datetime(2026, 11, 20, 12, tzinfo=UTC),
        card_data={"base_model": base, "base_model_relation": "quantized"},
        gguf_model=quant.model,
    )


def test_watch_fires_once_per_new_fitting_quant(
    hub: HubEmulator,
    world_cache: FileCache,
    tmp_path: Path,
) -> None:
    cli = WatchCli(tmp_path, endpoint=hub.endpoint)
    cli.run("crawl")
    current = cli.json("search", *SEARCH)["results"]
    assert current, "the fixture world has Qwen3-8B quants that fit"

    added = cli.run("watch", "add", "q8b", "--", *SEARCH)
    assert f"{len(current)} current results taken as its baseline" in added.stdout
    listed = cli.json("watch", "list")
    # Stored by name, as api.search takes them; shown as the flags they were typed as.
    options = {"query": "qwen3 8b", "vram": 24.0, "ctx": 4096}
    assert [(w["name"], w["options"], w["hits"]) for w in listed] == [
        ("q8b", options, len(current))
    ]
    assert "'qwen3 8b' --vram 24 --ctx 4096" in cli.run("watch", "list").stdout

    # Nothing new: nothing fires.
    assert cli.json("watch", "run") == []
    shown = cli.json("watch", "show", "q8b")
    assert {h["reason"] for h in shown} == {"baseline"}
    lines, entries = cli.feed()
    assert lines == [] and entries == []

    # A new fitting quant appears, and one outside the search (another model).
    populate(
        hub.state,
        world_cache,
        [
            _repo(
                "bartowski/Qwen_Qwen3-8B-GGUF",
                Quant("Qwen3-8B-Q5_K_M.gguf", "qwen3", "Q4_K_M"),
                "Qwen/Qwen3-8B",
            ),
            _repo(
                "bartowski/gemma-new-GGUF",
                Quant("gemma-Q4_K_M.gguf", "gemma3", "Q4_K_M"),
                "google/gemma-3-4b-it",
            ),
        ],
    )
    cli.crawl_and_evaluate()
    lines, entries = cli.feed()
    assert [(x["watch"], x["repo"], x["path"], x["reason"]) for x in lines] == [
        ("q8b", "bartowski/Qwen_Qwen3-8B-GGUF", "Qwen3-8B-Q5_K_M.gguf", "new")
    ]
    assert lines[0]["command"]  # the search result rides along: how to run it
    assert [e.findtext(f"{ATOM}title") for e in entries] == [
        "q8b: new bartowski/Qwen_Qwen3-8B-GGUF/Qwen3-8B-Q5_K_M.gguf (Q5_K_M)"
    ]

    # The same quant, crawled again: not again.
    cli.crawl_and_evaluate()
    assert len(cli.feed()[0]) == 1

    # Re-uploaded under the same name with other content: an improved result, once.
    reupload(
        hub.state,
        world_cache,
        "bartowski/Qwen_Qwen3-8B-GGUF",
        Quant("Qwen3-8B-Q5_K_M.gguf", "qwen3", "Q8_0"),
        date=datetime(2026, 11, 21, 12, tzinfo=UTC),
    )
    cli.crawl_and_evaluate()
    assert cli.json("watch", "run") == []
    lines, entries = cli.feed()
    assert [(x["repo"], x["reason"]) for x in lines] == [
        ("bartowski/Qwen_Qwen3-8B-GGUF", "new"),
        ("bartowski/Qwen_Qwen3-8B-GGUF", "reupload"),
    ]
    assert lines[0]["key"] != lines[1]["key"]
    # A re-upload says what it changed (Q4_K_M-like -> Q8_0 weights: attention too).
    assert lines[1]["changes"][0].startswith("attention ")
    assert any(c.startswith("size ") for c in lines[1]["changes"])
    assert len(entries) == 2
    assert "changed: attention " in (entries[0].findtext(f"{ATOM}content") or "")
    shown = cli.json("watch", "show", "q8b")
    assert [h["reason"] for h in shown[:2]] == ["reupload", "new"]
    table = cli.run("watch", "show", "q8b").stdout
    assert "bartowski/Qwen_Qwen3-8B-GGUF" in table and "reupload" in table

    cli.run("watch", "remove", "q8b")
    assert cli.json("watch", "list") == []


def test_watch_add_refuses_bad_search_options(
    hub: HubEmulator,
    tmp_path: Path,
) -> None:
    cli = WatchCli(tmp_path, endpoint=hub.endpoint)
    out = cli.run("watch", "add", "w", "--", "--no-such-option", ok=False)
    assert out.returncode == 2
    assert out.stderr.startswith("error: ")
    assert "Traceback" not in out.stderr
    assert cli.json("watch", "list") == []
    out = cli.run("watch", "add", "bad/name", "--", *SEARCH, ok=False)
    assert out.returncode == 2 and "watch name" in out.stderr
