"""One answer everywhere, and no dead ends: the real CLI (and the web app's JSON API, in process)
against one Hub emulator world.

- the same budget (one headroom) gives the same verdict, margin and cache in search, estimate and
  the web app; every stated budget states the headroom;
- options are checked before the first request, also with the Hub unreachable;
- a Hub that accepts connections and never answers ends fast with exit 4, after a line saying
  what is being looked up;
- ``--offline`` on an empty catalog says so and names crawl, pull and import;
- typed amounts (256k, 24GB) mean the same in the CLI and the web app;
- a 3-digit split is one quant to the crawl and to inspect, EAGLE/DFlash sidecars to neither.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.cli import Cli, clean_env, run_quants, start_quants
from tests.fixtures.world import FileCache, Quant, RepoSpec, populate, text
from tests.hub_emulator import Fault, HubEmulator

BASE = "meta-llama/Llama-2-7b-chat-hf"
REPO = "someone/chat-7b-q-GGUF"
SPLIT_REPO = "someone/split-7b-GGUF"
RECIPES = ("Q4_K_M", "Q8_0", "Q6_K", "Q4_0")
CTX = "4k"  # the tiny synthetic llama's training context


def _world() -> list[RepoSpec]:
    when = datetime(2026, 6, 1, tzinfo=UTC)
    card = {"base_model": BASE, "base_model_relation": "quantized"}
    return [
        RepoSpec(BASE, (text("config.json", '{"model_type": "llama"}'),), when),
        RepoSpec(
            REPO,
            tuple(Quant(f"chat-7b-{r}.gguf", "llama", r) for r in RECIPES),
            when,
            card_data=card,
        ),
    ]


def _split_repo(emu: HubEmulator, cache: FileCache) -> None:
    """Shards written with 3 digits, and EAGLE-3 / DFlash sidecars beside them."""
    files = cache.files([Quant("M-Q4_K_M.gguf", "llama", "Q4_K_M", split=3)])
    renamed = {
        p.replace("-0000", "-00").replace("-of-00003", "-of-003"): b for p, b in files.items()
    }
    assert sorted(renamed) == [f"M-Q4_K_M-00{i}-of-003.gguf" for i in (1, 2, 3)]
    renamed |= cache.files(
        [Quant("eagle3-M-Q8_0.gguf", "llama", "Q8_0"), Quant("dflash-M-Q8_0.gguf", "llama", "Q8_0")]
    )
    emu.state.create_repo(
        SPLIT_REPO, renamed, date=datetime(2026, 6, 2, tzinfo=UTC), library_name="gguf",
        card_data={"base_model": BASE, "base_model_relation": "quantized"},
    )  # fmt: skip


@pytest.fixture(scope="module")
def emu(world_cache: FileCache) -> Iterator[HubEmulator]:
    emulator = HubEmulator()
    populate(emulator.state, world_cache, _world())
    _split_repo(emulator, world_cache)
    with emulator:
        yield emulator


@pytest.fixture(scope="module")
def cli(emu: HubEmulator, tmp_path_factory: pytest.TempPathFactory) -> Cli:
    """A catalog filled by one on-demand search."""
    c = Cli(tmp_path_factory.mktemp("one-answer"), endpoint=emu.endpoint)
    out = c.run("search", "llama 2 7b chat", "--vram", "48", "--ctx", "4096", "--json")
    assert json.loads(out.stdout)["results"]
    return c


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- 1. one budget rule ---------------------------------------------------------------------


def _web(cli: Cli) -> Any:
    from starlette.testclient import TestClient

    from crawler.web import create_app

    return TestClient(create_app(f"sqlite:///{cli.db}"), base_url="http://127.0.0.1")


def _split_budget(cli: Cli) -> str:
    """A --vram whose usable part lies between the smallest and the largest f16 total: the large
    quants need a lighter cache there, the small ones keep f16."""
    pinned = cli.json("search", "llama 2 7b chat", "--vram", "48", "--ctx", CTX, "--no-mtp",
                      "-ctk", "f16", "-ctv", "f16", "--offline")  # fmt: skip
    totals = [r["total_bytes"] for r in pinned["results"]]
    return f"{((min(totals) + max(totals)) // 2 + 2**29) / 2**30:.9f}"


def test_same_budget_same_verdict_margin_and_cache_everywhere(cli: Cli) -> None:
    vram = _split_budget(cli)
    args = ("--vram", vram, "--ctx", CTX, "--no-mtp")
    found = cli.json("search", "llama 2 7b chat", *args, "--offline")
    budget = found["budget"]
    assert budget["text"].endswith(" GiB - 0.50 headroom = 0.61 GiB"), budget
    assert budget["usable_bytes"] == budget["device_bytes"] == budget["vram_bytes"] - 2**29
    text = cli.run("search", "llama 2 7b chat", *args, "--offline")
    assert f"budget: {budget['text']}" in text.stderr
    # The web app's JSON API: the same document.
    with _web(cli) as web:
        api = web.get("/api/search", params={"q": "llama 2 7b chat", "vram": vram, "ctx": CTX,
                                              "mtp": "0"}).json()  # fmt: skip
        quant = web.get("/api/quant", params={"repo": REPO, "path": found["results"][0]["path"],
                                               "vram": vram, "ctx": CTX}).json()  # fmt: skip
    assert api["results"] == found["results"] and api["budget"] == budget
    assert quant["memory"]["budget"]["text"] == budget["text"]
    assert quant["memory"]["budget_bytes"] == budget["usable_bytes"]
    caches = {(r["cache"]["type_k"], r["cache"]["type_v"]) for r in found["results"]}
    assert len(caches) > 1, "the world should make search pick different caches"
    for r in found["results"]:
        k, v = r["cache"]["type_k"], r["cache"]["type_v"]
        target = f"{REPO}:{r['quant_label']}"
        # estimate at the cache search chose: the same verdict and margin ...
        est = cli.json("estimate", target, "-c", CTX, "-ctk", k, "-ctv", v, "-fa", "on",
                       "--vram", vram)  # fmt: skip
        assert est["fits"] is True and est["margin_bytes"] == r["margin_bytes"], (r, est)
        assert est["budget"]["text"] == budget["text"]
        # ... and at f16, the least lossy cache that fits is the one search chose.
        f16 = cli.run("estimate", target, "-c", CTX, "-fa", "on", "--vram", vram, "--json",
                      ok=False)  # fmt: skip
        doc = json.loads(f16.stdout)
        if (k, v) == ("f16", "f16"):
            assert doc["fits"] is True
        else:
            assert doc["fits"] is False and doc["alternatives"][0]["change"] == f"-ctk {k} -ctv {v}"
    # One setting: QUANTS_HEADROOM moves every entry point alike.
    env = {**cli.env, "QUANTS_HEADROOM": "256MiB"}
    out = run_quants("search", "llama 2 7b chat", *args, "--offline", "--json", env=env)
    moved = json.loads(out.stdout)["budget"]["text"]
    assert moved.endswith(" GiB - 0.25 headroom = 0.86 GiB"), moved
    first = found["results"][0]
    est = run_quants("estimate", f"{REPO}:{first['quant_label']}", "-c", CTX, "--vram", vram,
                     env=env)  # fmt: skip
    assert f"budget {moved}:" in est.stdout, est.stdout


# --- 2. validate, then go online ------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("search", "qwen 27b", "--gpu", "rtx 9999", "--ctx", "4096"), "rtx 9999"),
        (("search", "qwen 27b", "--ctx", "4096"), "give --vram GIB or --gpu NAME"),
        (("search", "qwen 27b", "--vram", "24", "--sort", "fastest"), "--sort 'fastest'"),
        (("search", "qwen 27b", "--vram", "24x"), "'24x': not a memory size"),
        (
            ("search", "qwen 27b", "--vram", "24", "--mtp-acceptance", "nan"),
            "--mtp-acceptance must be a finite number, not nan",
        ),
        (
            ("search", "qwen 27b", "--vram", "24", "--mtp-acceptance", "1.5"),
            "--mtp-acceptance must be between 0 and 1, not 1.5",
        ),
        (("estimate", "o/r:Q4_K_M", "-c", "256q"), "'256q': not a context length"),
        (("estimate", "o/r:Q4_K_M", "-c", "4096", "-ctk", "q9_0"), "-ctk 'q9_0'"),
        (("estimate", "o/r:Q4_K_M", "-c", "4096", "--gpu", "rtx 9999"), "rtx 9999"),
        (("estimate", "o/r:Q4_K_M", "-c", "4096", "--vram", "0.4"), "--headroom 0.5 GiB leaves"),
    ],
)
def test_options_are_checked_before_the_hub(tmp_path: Path, args: tuple[str, ...],
                                            message: str) -> None:  # fmt: skip
    # Nothing listens on this port: any request would fail with exit 4.
    c = Cli(tmp_path, endpoint=f"http://127.0.0.1:{_free_port()}")
    out = c.run(*args, ok=False)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Hub" not in out.stderr, out.stderr


# --- 3. fail fast -----------------------------------------------------------------------------


@pytest.fixture
def silent_hub(world_cache: FileCache) -> Iterator[HubEmulator]:
    emulator = HubEmulator()
    populate(emulator.state, world_cache, _world())
    emulator.faults.add(Fault.delay(6), origin="hub")  # accepts, answers after the client left
    with emulator:
        yield emulator


@pytest.mark.parametrize(
    "args",
    [("search", "llama 2 7b chat", "--vram", "24"), ("inspect", f"{REPO}:Q4_K_M")],
)
def test_a_silent_hub_ends_fast_with_exit_4(silent_hub: HubEmulator, tmp_path: Path,
                                            args: tuple[str, ...]) -> None:  # fmt: skip
    c = Cli(tmp_path, endpoint=silent_hub.endpoint, QUANTS_TIMEOUT="1")
    started = time.monotonic()
    proc = start_quants(*args, env=c.env)
    assert proc.stderr is not None
    first = proc.stderr.readline()
    said_at = time.monotonic() - started
    rest = proc.stderr.read()
    proc.wait(20)
    elapsed = time.monotonic() - started
    assert proc.returncode == 4, first + rest
    # The line says what is being looked up, before any wait; the error is one line.
    assert ("looking up" in first or "reading the GGUF header" in first) and "on the Hub" in first
    assert said_at < elapsed
    errors = [line for line in rest.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, rest
    assert errors[0].startswith(
        f"error: the Hub at {silent_hub.endpoint} did not answer within 1 s (QUANTS_TIMEOUT)"
    )
    assert elapsed < 12, elapsed  # one 1 s timeout, not retries; python start-up is the rest


# --- 4. an empty catalog ------------------------------------------------------------------------


def test_offline_on_an_empty_catalog_names_the_ways_to_fill_it(tmp_path: Path) -> None:
    c = Cli(tmp_path)
    for args, code in ((("search", "qwen 27b", "--vram", "24", "--offline"), 3),
                       (("compare", "qwen 27b", "--offline"), 2)):  # fmt: skip
        out = c.run(*args, ok=False)
        assert out.returncode == code, out.stderr
        assert "the catalog is empty" in out.stderr
        assert all(w in out.stderr for w in ("quants crawl", "quants pull", "quants import"))
        assert "spelling" not in out.stderr


# --- 5. units -----------------------------------------------------------------------------------


def test_typed_amounts_mean_the_same_in_the_cli_and_the_web_app(cli: Cli) -> None:
    plain = cli.json("search", "llama 2 7b chat", "--vram", "24", "--ctx", "4096", "--offline")
    for vram, ctx in (("24GB", "4k"), ("24GiB", "4K"), ("24G", "4Ki"), ("24576MiB", "4096")):
        typed = cli.json("search", "llama 2 7b chat", "--vram", vram, "--ctx", ctx, "--offline")
        assert typed["results"] == plain["results"] and typed["budget"] == plain["budget"]
    with _web(cli) as web:
        api = web.get("/api/search", params={"q": "llama 2 7b chat", "vram": "24GB", "ctx": "4k"})
        bad = web.get("/api/search", params={"vram": "24 bananas", "ctx": "4k"})
    assert api.json()["results"] == plain["results"]
    assert bad.status_code == 400 and "'24 bananas': not a memory size" in bad.json()["error"]
    out = cli.run("search", "x", "--vram", "24", "--ctx", "256 tokens", ok=False)
    assert out.returncode == 2
    assert "'256 tokens': not a context length; use 262144, 256k, 256K or 256Ki" in out.stderr


# --- 7. messages --------------------------------------------------------------------------------


def test_messages_version_no_such_file_and_what_fit(cli: Cli, tmp_path: Path) -> None:
    from crawler import __version__

    assert cli.run("--version").stdout.strip() == f"quants {__version__}"
    missing = cli.run("inspect", str(tmp_path / "gone.gguf"), ok=False)
    assert missing.returncode == 2 and "no such file" in missing.stderr
    assert "QUANTS_DEBUG" not in missing.stderr
    usage = cli.run("search", "x", "--vram", "24", "--tier", "moon", "--offline", ok=False)
    assert usage.returncode == 2 and "`quants search --help`" in usage.stderr
    assert "QUANTS_DEBUG" not in usage.stderr and "COMMAND" not in usage.stderr
    out = cli.run("search", "llama 2 7b chat", "--vram", "48", "--limit", "1", "--offline")
    n = len(cli.json("search", "llama 2 7b chat", "--vram", "48", "--offline")["results"])
    assert n > 1 and f"{n} fit; showing 1 by" in out.stderr, out.stderr


# --- 8. naming: the crawl and inspect agree ---------------------------------------------------


def test_a_3_digit_split_is_one_quant_and_sidecars_are_not_quants(cli: Cli) -> None:
    doc = cli.json("inspect", f"{SPLIT_REPO}:Q4_K_M")
    assert doc["source"] == f"{SPLIT_REPO}/M-Q4_K_M-001-of-003.gguf"
    quants = json.loads(
        cli.run("sql", "SELECT q.path FROM quants q JOIN repos r ON r.id = q.repo_pk"
                f" WHERE r.repo_id = '{SPLIT_REPO}'", "--json").stdout
    )  # fmt: skip
    paths = sorted(row["path"] for row in quants)
    assert paths == ["M-Q4_K_M-001-of-003.gguf"], paths
    for sidecar in ("eagle3", "dflash"):
        out = cli.run("inspect", f"{SPLIT_REPO}:Q8_0", ok=False)
        assert out.returncode == 2 and "no quant 'Q8_0'" in out.stderr, (sidecar, out.stderr)


# --- publish is atomic from the reader's side -------------------------------------------------

TOKEN = "hf_test_user"


def _hub_env(cli: Cli, emu: HubEmulator, tmp: Path) -> dict[str, str]:
    # The emulator speaks the LFS batch protocol: HF_HUB_DISABLE_XET=1 (huggingface_hub
    # constants.py) makes huggingface_hub upload that way.
    return {**clean_env(tmp, QUANTS_DB=f"sqlite:///{cli.db}", QUANTS_HF_ENDPOINT=emu.endpoint,
                        HF_HUB_DISABLE_XET="1", HF_TOKEN=TOKEN)}  # fmt: skip


def test_a_failed_publish_leaves_nothing_and_pull_names_what_is_missing(
    cli: Cli, emu: HubEmulator, tmp_path: Path
) -> None:
    env = _hub_env(cli, emu, tmp_path / "publisher")
    failed = "quants-bot/failed-catalog"
    emu.faults.add(Fault.http(400, "commit refused"), path=f"/api/datasets/{failed}/commit/")
    out = run_quants("publish", failed, env=env)
    assert out.returncode != 0 and "nothing was published" in out.stderr, out.stderr
    assert failed not in emu.state.datasets  # no empty dataset for a reader to find
    emu.faults.clear()
    # A dataset with no snapshot in it, and one whose manifest lists files it lacks.
    good = "quants-bot/good-catalog"
    assert run_quants("publish", good, env=env).returncode == 0
    files = emu.state.datasets[good].commits[-1].files
    emu.state.create_dataset("quants-bot/empty", {".gitattributes": files[".gitattributes"]})
    emu.state.create_dataset(
        "quants-bot/partial", {k: v for k, v in files.items() if k != "quants.parquet"}
    )
    puller = {**env, "QUANTS_DB": f"sqlite:///{tmp_path / 'pulled.sqlite'}"}
    empty = run_quants("pull", "quants-bot/empty", env=puller)
    assert empty.returncode == 1 and "not a quants snapshot" in empty.stderr, empty.stderr
    partial = run_quants("pull", "quants-bot/partial", env=puller)
    assert partial.returncode == 1, partial.stderr
    assert "quants.parquet: named by the manifest but not in the dataset" in partial.stderr
    assert TOKEN not in out.stderr + empty.stderr + partial.stderr
