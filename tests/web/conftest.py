"""``quants serve`` on the session's crawled world (tests/fixtures/shared.py: the fixture world,
the real-size Qwen3.6-27B repo and the reliability suite's hostile repo, plus a file name made of
HTML).

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

from tests.cli import clean_env
from tests.fixtures.shared import NAME_HTML, CrawledWorld
from tests.reliability.test_hostile_text import NAME_ESC, NAME_SHELL
from tests.schemas import checked

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
def served(tmp_path_factory, crawled_world: CrawledWorld) -> Iterator[Served]:
    """``quants serve`` on the session's crawled world (tests/fixtures/shared.py); read-only."""
    tmp = tmp_path_factory.mktemp("serve")
    with serving(crawled_world.db, tmp) as served:
        yield served


@contextmanager
def serving(db: str, tmp: Path, *args: str) -> Iterator[Served]:
    """``quants serve --db DB ARGS`` for the duration of the block."""
    proc, base, _ = start_server(db, tmp, *args)
    m = re.match(r"http://([\d.]+):(\d+)/", base)
    assert m
    try:
        yield Served(base, m.group(1), int(m.group(2)), db, tmp, proc)
    finally:
        proc.terminate()
        proc.wait(10)
