"""crawler.api: each function's to_json() is its command's --json output, byte for byte.

The CLI runs in a subprocess (python -m crawler) and the API in this process, with the same
settings, against one catalog crawled from the Hub emulator (and the emulator itself for Hub
targets). Every document is also validated against its shipped schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crawler import api
from crawler.base.errors import NothingFits, UsageError
from tests.cli import clean_env, run_quants
from tests.fixtures.llamacpp.logs import render
from tests.fixtures.llamacpp.models import load_rows
from tests.hub_emulator.server import HubEmulator
from tests.schemas import checked


class World:
    """A crawled catalog, the emulator it came from and the environment both sides use."""

    def __init__(self, tmp: Path, hub: HubEmulator) -> None:
        self.tmp = tmp
        self.db = f"sqlite:///{tmp / 'catalog.sqlite'}"
        self.env = clean_env(
            tmp, QUANTS_DB=self.db, QUANTS_HF_ENDPOINT=hub.endpoint, QUANTS_TIMEOUT="10"
        )

    def cli(self, *args: str, code: int = 0) -> str:
        out = run_quants(*args, env=self.env)
        assert out.returncode == code, out.stderr
        return out.stdout

    def settings_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """This process's environment as the CLI's (Settings.from_env reads it)."""
        import os

        for key in list(os.environ):
            if key.startswith("QUANTS_"):
                monkeypatch.delenv(key)
        for key, value in self.env.items():
            if key.startswith("QUANTS_"):
                monkeypatch.setenv(key, value)


@pytest.fixture(scope="module")
def world(tmp_path_factory, _shared_hub: HubEmulator) -> World:
    w = World(tmp_path_factory.mktemp("api-e2e"), _shared_hub)
    w.cli("crawl", "--all", "--json")
    return w


SEARCHES: list[tuple[list[str], dict[str, Any]]] = [
    (["--vram", "24", "--ctx", "32768"], {"vram": 24.0, "ctx": 32768}),
    (
        ["qwen3.6 27b", "--vram", "8", "--ctx", "65536", "-ctk", "q8_0", "-ctv", "q8_0"],
        {
            "query": "qwen3.6 27b",
            "vram": 8.0,
            "ctx": 65536,
            "cache_type_k": "q8_0",
            "cache_type_v": "q8_0",
        },
    ),
    (
        ["--gpu", "RTX 3090", "--ctx", "131072", "--sort", "speed", "--limit", "3"],
        {"gpu": "RTX 3090", "ctx": 131072, "sort": "speed", "limit": 3},
    ),
    (
        ["--vram", "2", "--ctx", "8192", "--tier", "partial", "--ram", "64", "--no-mtp"],
        {"vram": 2.0, "ctx": 8192, "tier": "partial", "ram": 64.0, "mtp": False},
    ),
]


@pytest.mark.parametrize(("argv", "kwargs"), SEARCHES, ids=lambda v: str(v)[:40])
def test_search_api_equals_search_json(world: World, monkeypatch, argv, kwargs):
    text = world.cli("search", *argv, "--offline", "--json")
    world.settings_env(monkeypatch)
    answer = api.search(**kwargs, offline=True)
    assert answer.to_json() == text
    doc = checked("search", text)
    assert doc["results"], "each case must list something, or equality proves little"
    assert [r.rank for r in answer.results] == [r["rank"] for r in doc["results"]]


def test_search_api_raises_what_the_cli_reports(world: World, monkeypatch):
    argv = ("--vram", "0.2", "--headroom", "0", "--ctx", "1000000", "--offline")
    out = run_quants("search", *argv, env=world.env)
    assert out.returncode == 3 and out.stderr.startswith("error: no quant fits")
    world.settings_env(monkeypatch)
    with pytest.raises(NothingFits, match="no quant fits"):
        api.search(vram=0.2, headroom=0, ctx=1000000, offline=True)
    with pytest.raises(UsageError, match="give --vram"):
        api.search(ctx=4096, offline=True)


#: (target, argv, kwargs, exit code): 3 is "nothing fits" (the JSON is still printed).
ESTIMATES: list[tuple[str, list[str], dict[str, Any], int]] = [
    ("unsloth/Qwen3.6-27B-GGUF:UD-Q4_K_XL", ["--ctx", "65536"], {"ctx": 65536}, 0),
    (
        "unsloth/Qwen3.6-27B-GGUF:UD-Q4_K_XL",
        [
            "--ctx",
            "262144",
            "--vram",
            "0.5",
            "--headroom",
            "0",
            "--mtp",
            "-ctk",
            "q8_0",
            "-ctv",
            "q8_0",
        ],
        {
            "ctx": 262144,
            "vram": 0.5,
            "headroom": 0.0,
            "mtp": True,
            "cache_type_k": "q8_0",
            "cache_type_v": "q8_0",
        },
        3,
    ),
    (
        "unsloth/Qwen3.6-27B-GGUF:UD-Q4_K_XL",
        ["--ctx", "65536", "--vram", "0.69", "--headroom", "0", "--mtp"],
        {"ctx": 65536, "vram": 0.69, "headroom": 0.0, "mtp": True},
        0,
    ),
    (
        "unsloth/Qwen3.5-35B-A3B-GGUF:UD-Q4_K_XL",
        ["--ctx", "32768", "--gpu", "2x 3090"],
        {"ctx": 32768, "gpu": "2x 3090"},
        0,
    ),
    (
        "unsloth/Qwen3.6-27B-GGUF:UD-Q4_K_XL",
        ["--ctx", "65536", "-ngl", "2", "--vram", "2"],
        {"ctx": 65536, "n_gpu_layers": "2", "vram": 2.0},
        0,
    ),
]


@pytest.mark.parametrize(("target", "argv", "kwargs", "code"), ESTIMATES, ids=lambda v: str(v)[:40])
def test_estimate_api_equals_estimate_json(world: World, monkeypatch, target, argv, kwargs, code):
    text = world.cli("estimate", target, *argv, "--json", code=code)
    world.settings_env(monkeypatch)
    answer = api.estimate(target, **kwargs)
    assert answer.to_json() == text
    doc = checked("estimate", text)
    assert doc["bytes"]["total"] == answer.report.estimate.total > 0


@pytest.mark.parametrize("tensors", [False, True])
def test_inspect_api_equals_inspect_json(world: World, monkeypatch, tensors):
    target = "unsloth/Qwen3.6-27B-GGUF:UD-Q4_K_XL"
    text = world.cli("inspect", target, "--json", *(["--tensors"] if tensors else []))
    world.settings_env(monkeypatch)
    answer = api.inspect(target, tensors=tensors)
    assert answer.to_json() == text
    doc = checked("inspect", text)
    assert ("tensors" in doc) is tensors and doc["n_tensors"] == answer.profile.n_tensors


def test_compare_api_equals_compare_json(world: World, monkeypatch):
    text = world.cli("compare", "Qwen/Qwen3.6-27B", "--offline", "--json")
    world.settings_env(monkeypatch)
    answer = api.compare("Qwen/Qwen3.6-27B", offline=True)
    assert answer.to_json() == text
    doc = checked("compare", text)
    assert len(doc["quants"]) == len(answer.comparison.quants) > 1


def test_check_log_api_equals_check_log_json(world: World, monkeypatch):
    gemma = next(r for r in load_rows() if r["config"]["model"] == "gemma3")
    log = world.tmp / "server.log"
    log.write_text(render(gemma, "/srv/models/google_gemma-3-12b-it-Q4_K_M.gguf", 4))
    text = world.cli("check-log", str(log), "--json")
    world.settings_env(monkeypatch)
    assert api.check_log(log).to_json() == text
    assert api.check_log(text=log.read_text()).to_json() == text
    doc = checked("check-log", text)
    assert doc["estimated_from"].startswith("bartowski/google_gemma-3-12b-it-GGUF/")
    with pytest.raises(UsageError, match="one of them"):
        api.check_log(log, text="x")


def test_the_notebook_example_in_docs_runs(world: World, monkeypatch, capsys):
    """docs/api.md's example, as written, against the emulator (search looks the model up)."""
    import re

    from tests.cli import ROOT

    page = (ROOT / "docs" / "api.md").read_text("utf-8")
    section = page.split("### A notebook-sized example", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    world.settings_env(monkeypatch)
    exec(compile(code.group(1), "docs/api.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "1. " in printed and "llama-server -hf " in printed and "fits at 512K:" in printed


def test_api_checks_what_the_cli_parser_checks(tmp_path):
    """Callers skip typer's option parser: the API enforces the same bounds itself."""
    missing = str(tmp_path / "none.gguf")
    for kwargs, needle in [
        ({"ctx": 0}, "--ctx must be >= 1, not 0"),
        ({"ctx": 4096, "parallel": -2}, "--parallel must be >= -1"),
        ({"ctx": 4096, "ubatch": 0}, "--ubatch-size must be >= 1"),
        ({"ctx": 4096, "n_cpu_moe": -1}, "--n-cpu-moe must be >= 0"),
        ({"ctx": 4096, "mmproj": "p.gguf", "no_mmproj": True}, "exclude each other"),
    ]:
        with pytest.raises(UsageError, match=needle):
            api.estimate(missing, **kwargs)
    with pytest.raises(UsageError, match="one of them"):
        api.check_log()
    for kwargs, needle in [
        ({"vram": 0.05}, "--vram must be >= 0.1, not 0.05"),
        ({"vram": 24, "limit": 0}, "--limit must be >= 1"),
        ({"vram": 24, "headroom": -1}, "--headroom must be >= 0"),
        ({"vram": 24, "parallel": -2}, "--parallel must be >= -1"),
        ({"vram": 24, "gpu": 3090}, "search option gpu"),
    ]:
        with pytest.raises(UsageError, match=needle):
            api.search(ctx=4096, offline=True, **kwargs)
