"""A catalog crawled from the Hub emulator (the fixture world, the real-size Qwen3.6-27B repo and
the reliability suite's hostile repo, plus a file name made of HTML) and ``quants serve`` on it.

The server is the real CLI in a subprocess on a free port of 127.0.0.1; tests talk to it over
HTTP with the standard library (and, in test_serve_browser.py, with headless Chromium).
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.cli import clean_env, run_quants
from tests.fixtures.world import REAL_WORLD, WORLD, FileCache, populate
from tests.hub_emulator import HubEmulator
from tests.hub_emulator.fixtures import world_cache  # noqa: F401
from tests.hub_emulator.state import Blob
from tests.reliability.test_hostile_text import (
    NAME_ESC,
    NAME_SHELL,
    REPO,
    TAG,
    write_hostile_gguf,
)
from tests.schemas import checked

#: A file name that is markup: it must show as text, never become an element.
NAME_HTML = "<script>alert(1)</script><img src=x onerror=alert(2)>\"'&amp;-Q4_K_M.gguf"
HOSTILE_NAMES = (NAME_ESC, NAME_SHELL, NAME_HTML)


@dataclass
class Served:
    """The running server: its base URL, catalog URL and working dir."""

    base: str
    host: str
    port: int
    db: str
    tmp: Path
    proc: subprocess.Popen[str]

    def get(
        self, path: str, params: dict[str, Any] | None = None, *, method: str = "GET",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], str]:  # fmt: skip
        """One request; (status, headers lower-cased, body)."""
        url = path + ("?" + urlencode(params) if params else "")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request(method, url, headers=headers or {})
            resp = conn.getresponse()
            body = resp.read().decode("utf-8")
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body
        finally:
            conn.close()

    def json(self, path: str, params: dict[str, Any] | None = None) -> tuple[int, Any]:
        status, headers, body = self.get(path, params)
        assert headers["content-type"].startswith("application/json"), (path, headers)
        doc = json.loads(body)
        if status == 200 and path in API_SCHEMAS:  # the same documents as the CLI's --json
            doc = checked(API_SCHEMAS[path], doc)
        return status, doc


#: API routes whose answer is a command's --json document (crawler/schemas).
API_SCHEMAS = {"/api/search": "search", "/api/compare": "compare"}


def _hostile_repo(emulator: HubEmulator, files: Path) -> None:
    # The reliability suite's hostile repo (tests/reliability/test_hostile_text.py), smaller.
    files.mkdir(parents=True, exist_ok=True)
    write_hostile_gguf(files / "esc.gguf", arch=None, tensor=True, huge=False)
    write_hostile_gguf(files / "plain.gguf", arch=None, tensor=False, huge=False)
    emulator.state.create_repo(
        REPO,
        {
            NAME_ESC: Blob.from_file(files / "esc.gguf"),
            NAME_SHELL: Blob.from_file(files / "plain.gguf"),
            NAME_HTML: Blob.from_file(files / "plain.gguf"),
        },
        tags=["gguf", TAG],
        card_data={"base_model": "meta-llama/Llama-3.1-8B"},
        library_name="gguf",
    )


def start_server(db: str, tmp: Path, *args: str) -> tuple[subprocess.Popen[str], str, str]:
    """``quants serve --db DB --port 0 ARGS``; (process, base URL, its stderr so far) once it
    listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawler", "serve", "--db", db, "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(tmp),
    )
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        m = re.search(r"quants serve: (http://\S+/)", line)
        if m:
            return proc, m.group(1), "".join(lines)
    proc.wait(10)
    raise AssertionError("server did not start: " + "".join(lines))


@pytest.fixture(scope="session")
def served(tmp_path_factory, world_cache: FileCache) -> Iterator[Served]:  # noqa: F811
    tmp = tmp_path_factory.mktemp("serve")
    db = f"sqlite:///{tmp / 'catalog.sqlite'}"
    emulator = HubEmulator()
    populate(emulator.state, world_cache, (*WORLD, *REAL_WORLD))
    _hostile_repo(emulator, tmp / "hostile")
    with emulator:
        out = run_quants(
            "crawl", "--endpoint", emulator.endpoint, "--db", db, "--all", "--json",
            env=clean_env(tmp), timeout=300,
        )  # fmt: skip
    assert out.returncode == 0, out.stderr
    with serving(db, tmp) as served:
        yield served


@contextmanager
def serving(db: str, tmp: Path) -> Iterator[Served]:
    """``quants serve`` on ``db`` for the duration of the block."""
    proc, base, _ = start_server(db, tmp)
    m = re.match(r"http://([\d.]+):(\d+)/", base)
    assert m
    try:
        yield Served(base, m.group(1), int(m.group(2)), db, tmp, proc)
    finally:
        proc.terminate()
        proc.wait(10)
