"""``quants mcp`` end to end with the SDK's own client: over stdio (the server started as a
desktop agent starts it) and over streamable HTTP on loopback; list the tools, call each one,
check bad arguments and the read-only rule."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from crawler.mcp.server import TOOL_NAMES
from tests.cli import ROOT, clean_env, run_quants
from tests.fixtures.llamacpp.logs import render
from tests.fixtures.llamacpp.models import load_rows
from tests.fixtures.world import FileCache, Quant, spec
from tests.hub_emulator.server import HubEmulator
from tests.schemas import checked


class World:
    def __init__(self, tmp: Path, hub: HubEmulator, cache: FileCache) -> None:
        self.tmp = tmp
        self.db = f"sqlite:///{tmp / 'catalog.sqlite'}"
        self.env = clean_env(tmp, QUANTS_DB=self.db, QUANTS_HF_ENDPOINT=hub.endpoint)
        repo = spec("unsloth/Qwen3.6-27B-GGUF")
        quant = next(f for f in repo.files if isinstance(f, Quant) and "UD-Q4_K_XL" in f.path)
        path = cache.blobs(quant)[0][1].path
        assert path is not None
        self.gguf = str(path)

    def cli(self, *args: str) -> str:
        out = run_quants(*args, env=self.env)
        assert out.returncode == 0, out.stderr
        return out.stdout


@pytest.fixture(scope="module")
def world(tmp_path_factory, _shared_hub, world_cache) -> World:
    w = World(tmp_path_factory.mktemp("mcp-e2e"), _shared_hub, world_cache)
    w.cli("crawl", "--all", "--json")
    return w


def _stdio(world: World, *flags: str) -> Client:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "crawler", "mcp", *flags], env=world.env, cwd=ROOT
    )
    return Client(params, read_timeout_seconds=60)


async def _call(client: Client, tool: str, args: dict[str, Any]) -> tuple[bool, str, Any]:
    result = await client.call_tool(tool, args)
    text = "".join(c.text for c in result.content if c.type == "text")
    return result.is_error, text, result.structured_content


def test_stdio_lists_and_calls_every_tool(world: World):
    log = render(
        next(r for r in load_rows() if r["config"]["model"] == "gemma3"),
        "/srv/models/google_gemma-3-12b-it-Q4_K_M.gguf",
        4,
    )
    (world.tmp / "server.log").write_text(log)
    cli = {
        "search": world.cli("search", "--vram", "24", "--ctx", "32768", "--limit", "5",
                            "--offline", "--json"),
        "estimate": world.cli("estimate", world.gguf, "--ctx", "8192", "--vram", "8", "--json"),
        "inspect": world.cli("inspect", world.gguf, "--json"),
        "compare": world.cli("compare", "Qwen/Qwen3.6-27B", "--offline", "--json"),
        "check_log": world.cli("check-log", str(world.tmp / "server.log"), "--json"),
    }  # fmt: skip
    calls = {
        "search": {"vram": 24, "ctx": 32768, "limit": 5},
        "estimate": {"target": world.gguf, "ctx": 8192, "vram": 8},
        "inspect": {"target": world.gguf},
        "compare": {"query": "Qwen/Qwen3.6-27B"},
        "check_log": {"log_text": log},
    }

    async def main() -> None:
        async with _stdio(world) as client:
            listed = await client.list_tools()
            tools = {t.name: t for t in listed.tools}
            assert set(tools) == set(TOOL_NAMES)
            assert all(t.annotations and t.annotations.read_only_hint for t in tools.values())
            assert tools["search"].input_schema["properties"]["vram"]["anyOf"][0]["minimum"] == 0.1
            for tool, args in calls.items():
                error, text, structured = await _call(client, tool, args)
                assert not error, text
                # the tool's text is the command's --json output, byte for byte
                assert text == cli[tool], tool
                name = tool.replace("_", "-")
                assert structured == checked(name, text)
            error, text, _ = await _call(client, "explain_quant", {"target": world.gguf})
            assert not error, text
            assert "UD-Q4_K_XL" in text and "MTP (multi-token prediction) head in layer" in text
            assert "Mainline llama.cpp can load" in text

    anyio.run(main)


def test_bad_arguments_and_the_read_only_rule(world: World):
    async def main() -> None:
        async with _stdio(world) as client:
            # the input schema, as the CLI's option parser
            error, text, _ = await _call(client, "search", {"vram": -1, "ctx": 4096})
            assert error and "vram" in text and "greater than or equal to 0.1" in text
            error, text, _ = await _call(client, "estimate", {"target": world.gguf})
            assert error and "ctx" in text
            error, text, _ = await _call(client, "search", {"vram": 8, "sort": "best"})
            assert error and "sort" in text
            # the library's own checks, one line as the CLI prints them
            error, text, _ = await _call(client, "search", {"ctx": 4096})
            assert error and "error: give --vram GIB or --gpu NAME" in text
            error, text, _ = await _call(client, "search", {"vram": 0.2, "headroom": 0})
            assert error and "no quant fits" in text
            error, text, _ = await _call(client, "check_log", {})
            assert error and "one of them" in text
            # read-only: no Hub or URL target, no lookup of a model the catalog lacks
            for target in ("unsloth/Qwen3.6-27B-GGUF:UD-Q4_K_XL", "http://127.0.0.1:9/x.gguf"):
                error, text, _ = await _call(client, "inspect", {"target": target})
                assert error and "is not a local file" in text and "--allow-lookup" in text
            error, text, _ = await _call(client, "compare", {"query": "Never-Heard-Of-Model"})
            assert error and "no quant in the catalog matches 'Never-Heard-Of-Model'" in text
            error, text, _ = await _call(client, "no_such_tool", {})
            assert error

    anyio.run(main)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_streamable_http_on_loopback_with_lookup(world: World):
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawler", "mcp", "--http", "--port", str(port), "--allow-lookup"],
        env=world.env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the server did not listen"
                time.sleep(0.1)
        target = "unsloth/Qwen3.6-27B-GGUF:UD-Q4_K_XL"
        want = world.cli("inspect", target, "--json")

        async def main() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=60) as client:
                listed = await client.list_tools()
                assert {t.name for t in listed.tools} == set(TOOL_NAMES)
                # --allow-lookup: a Hub target is read (from the emulator)
                error, text, _ = await _call(client, "inspect", {"target": target})
                assert not error, text
                assert text == want

        anyio.run(main)
        # DNS rebinding: a page on another host cannot talk to the loopback server
        # (the SDK's transport security, on for a loopback host: mcp/server/lowlevel/server.py).
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        body = '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'
        headers = {"Host": "evil.example", "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}  # fmt: skip
        conn.request("POST", "/mcp", body=body, headers=headers)
        assert conn.getresponse().status == 421
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
