"""``quants serve`` over HTTP: every page and API route, errors, read-only, escaping.

The API answers are compared with the CLI's own ``--json`` output for the same options (one
implementation: the web app calls the same library functions).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawler.schemas import SCHEMA_NAMES
from tests.cli import clean_env, run_quants
from tests.schemas import checked
from tests.web.conftest import HOSTILE_NAMES, NAME_HTML, Served, start_server

ROUTES = ["/", "/model", "/quant", "/scans", "/api/search", "/api/compare", "/api/quant",
          "/api/scans"]  # fmt: skip


def cli_json(served: Served, *args: str):
    out = run_quants(*args, "--db", served.db, "--json", env=clean_env(served.tmp), timeout=120)
    assert out.returncode == 0, out.stderr
    return checked(args[0], out.stdout) if args[0] in SCHEMA_NAMES else json.loads(out.stdout)


def test_api_search_is_the_cli_search(served: Served) -> None:
    status, doc = served.json(
        "/api/search", {"vram": 24, "ctx": 262144, "auto_cache": 1, "q": "qwen3.6 27b"}
    )
    assert status == 200
    cli = cli_json(served, "search", "qwen3.6 27b", "--vram", "24", "--ctx", "262144",
                   "--auto-cache")  # fmt: skip
    assert doc == cli
    assert doc["results"] and all(r["total_bytes"] <= doc["budget"]["device_bytes"]
                                  for r in doc["results"])  # fmt: skip


def test_api_search_gpu_mtp_sort_and_limit(served: Served) -> None:
    params = {"gpu": "RTX 4090", "ctx": 32768, "mtp": "true", "sort": "speed", "limit": 3}
    status, doc = served.json("/api/search", params)
    assert status == 200
    cli = cli_json(served, "search", "--gpu", "RTX 4090", "--ctx", "32768", "--mtp", "--sort",
                   "speed", "--limit", "3")  # fmt: skip
    assert doc == cli
    assert len(doc["results"]) <= 3 and doc["gpu"]["name"]
    assert all(r["mtp"]["enabled"] for r in doc["results"])
    # the page says what the estimate rests on, as the CLI's footnote does
    status, _, html = served.get("/", params)
    assert status == 200
    basis = doc["results"][0]["speed"]["basis"]
    assert basis.startswith("extrapolated from") and f"tok/s an estimate ({basis})" in html
    # and counts the rows the estimate puts faster without the draft head, as the CLI does (the
    # fastest rows here are the world's 3 MiB files, whose step is too short for drafting)
    slower = sum(1 for r in doc["results"] if r["speed"]["mtp_speedup"] < 1)
    assert slower > 0 and f"MTP slower: {slower} of these rows" in html
    status, _, html = served.get("/", {**params, "mtp": "false"})
    assert status == 200 and "MTP slower" not in html
    # the acceptance the estimate assumes, as --mtp-acceptance
    low = {**params, "mtp_acceptance": "0.05"}
    status, doc = served.json("/api/search", low)
    assert status == 200 and doc == cli_json(
        served, "search", "--gpu", "RTX 4090", "--ctx", "32768", "--mtp", "--sort", "speed",
        "--limit", "3", "--mtp-acceptance", "0.05",
    )  # fmt: skip
    assert {r["speed"]["mtp_acceptance"] for r in doc["results"]} == {0.05}
    status, _, html = served.get("/", low)
    assert status == 200 and 'name="mtp_acceptance" value="0.05"' in html


def test_the_page_says_which_heads_mtp_auto_left_off(served: Served) -> None:
    # MTP auto (the form's default) at a low acceptance: the API's rows that leave a head off,
    # as the CLI's, and the page's count and cells of them
    params = {"gpu": "RTX 4090", "ctx": 32768, "mtp_acceptance": "0.05", "limit": 50}
    status, doc = served.json("/api/search", params)
    assert status == 200
    assert doc == cli_json(served, "search", "--gpu", "RTX 4090", "--ctx", "32768",
                           "--mtp-acceptance", "0.05", "--limit", "50")  # fmt: skip
    declined = [r for r in doc["results"] if r["mtp"]["declined_speedup"] is not None]
    assert declined and not any(r["mtp"]["enabled"] for r in declined)
    status, _, html = served.get("/", params)
    assert status == 200
    assert f"MTP left off: {len(declined)} of these rows" in html
    assert html.count("b slower</td>") == len(declined)
    status, _, html = served.get("/", {**params, "mtp": "false"})
    assert status == 200 and "MTP left off" not in html and "b slower</td>" not in html


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"vram": "abc"}, "vram 'abc': not a memory size; use 24, 24G"),
        ({"vram": "-1"}, "vram '-1': not a memory size"),
        ({"vram": "nan"}, "vram 'nan': not a memory size"),
        ({"vram": 24, "ctx": "1e9"}, "ctx '1e9': not a context length; use 262144, 256k"),
        ({"vram": 24, "ctx": "20000000"}, "ctx '20000000': must be between 1 and"),
        ({"vram": 24, "limit": "100000"}, "limit: must be between"),
        ({"vram": 24, "sort": "random"}, "sort: one of"),
        ({"vram": 24, "cache_type_k": "q3_k"}, "cache_type_k: one of"),
        ({"vram": 24, "mtp": "maybe"}, "mtp: not a boolean"),
        ({"vram": 24, "mtp_acceptance": "1.5"}, "mtp_acceptance: must be between 0 and 1"),
        ({"vram": 24, "mtp_acceptance": "nan"}, "mtp_acceptance: not a number"),
        ({"vram": 24, "q": "x" * 201}, "q: at most 200"),
        ({"vram": 24, "bogus": "1"}, "unknown parameter 'bogus'"),
        ({"ctx": 4096}, "give --vram GIB or --gpu NAME"),
        ({"vram": 24, "gpu": "nonexistent-gpu-zz"}, "gpu"),
        ({"vram": 24, "ram": 8}, "--ram only applies when something runs in host memory"),
        ({"vram": 24, "tier": "cpu"}, "tier: one of"),
        ({"vram": 24, "n_gpu_layers": "many"}, "n_gpu_layers: not a whole number"),
        ({"vram": 24, "flash_attn": "maybe"}, "flash_attn: one of"),
        ({"vram": 24, "tensor_split": "1,x"}, "-ts takes proportions"),
        ({"gpu": "2x 3090", "tier": "partial"}, "every layer on the GPUs"),
        # refused as `quants search` and `quants estimate` refuse it
        ({"vram": 24, "flash_attn": "off", "cache_type_v": "q4_0"}, "needs flash attention"),
    ],
)
def test_api_search_bad_parameters_are_400_with_a_message(served: Served, params, message):
    status, doc = served.json("/api/search", params)
    assert status == 400, doc
    assert message in doc["error"]
    assert "Traceback" not in doc["error"]


def test_nothing_fits_is_404_with_the_reason(served: Served) -> None:
    status, doc = served.json("/api/search", {"vram": 1, "ctx": 262144})
    assert status == 404
    assert doc["code"] == "nothing_fits" and "no quant fits" in doc["error"]


def test_search_page_rows_commands_and_copy_buttons(served: Served) -> None:
    status, headers, html = served.get("/", {"vram": 24, "ctx": 262144, "auto_cache": "1"})
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in headers["content-security-policy"]
    rows = re.findall(r'<tr class="result">', html)
    _, doc = served.json("/api/search", {"vram": 24, "ctx": 262144, "auto_cache": "1"})
    assert len(rows) == len(doc["results"]) >= 2
    assert html.count('class="copy"') >= len(rows)
    assert "llama-server -hf " in html
    refused = [r for r in doc["results"] if r["loadable_by_mainline"] is False]
    assert refused, [r["repo"] for r in doc["results"]]
    assert html.count("no command: mainline llama.cpp cannot load this file") == len(refused)
    # A plain page load has the form and no results; a bad parameter is a 400 page.
    status, _, plain = served.get("/")
    assert status == 200 and 'form id="search"' in plain and '<tr class="result">' not in plain
    status, _, bad = served.get("/", {"vram": "lots"})
    assert status == 400 and "vram &#39;lots&#39;: not a memory size" in bad


def test_api_compare_is_the_cli_compare_and_the_page_has_charts(served: Served) -> None:
    status, doc = served.json("/api/compare", {"q": "Qwen/Qwen3.6-27B"})
    assert status == 200
    cli = cli_json(served, "compare", "Qwen/Qwen3.6-27B")
    # The same quants, each with the catalog's quality estimate, in the CLI's shape.
    assert doc["quants"] == cli["quants"]
    assert doc["base_model"] == cli["base_model"]
    assert any(q["quality"] is not None for q in doc["quants"])
    status, _, html = served.get("/model", {"q": "Qwen/Qwen3.6-27B"})
    assert status == 200
    assert html.count('class="cell"') > 10 and 'class="pareto"' in html
    assert "file size (GiB)" in html and "estimated quality (0-100)" in html
    assert served.json("/api/compare", {})[0] == 400
    assert served.json("/api/compare", {"q": "no-such-model-zz"})[0] == 400


def test_api_quant_profile_layers_memory_versions(served: Served) -> None:
    _, found = served.json("/api/search", {"vram": 24, "ctx": 32768, "q": "Qwen3.6-27B-MTP"})
    top = found["results"][0]
    status, doc = served.json(
        "/api/quant", {"repo": top["repo"], "path": top["path"], "vram": 24, "ctx": 32768}
    )
    assert status == 200
    assert (doc["repo"], doc["path"], doc["size_bytes"]) == (top["repo"], top["path"],
                                                            top["size_bytes"])  # fmt: skip
    assert doc["groups"]["attn"]["min_bits"] == top["attention"]["min_bits"]
    assert doc["layers"]["rows"][0] == "blk.0" and "attn" in doc["layers"]["columns"]
    curves = {(c["type_k"], c["type_v"]): c for c in doc["memory"]["curves"]}
    assert ("f16", "f16") in curves and ("q4_0", "q4_0") in curves
    # The memory model is the search's: the estimate at the search's context is its total.
    if top["cache"] == {"type_k": "f16", "type_v": "f16"} and not top["mtp"]["enabled"]:
        assert doc["memory"]["at_ctx"]["total"] == top["total_bytes"]
    # Lighter caches reach further within the same budget.
    assert curves[("q4_0", "q4_0")]["max_ctx"] >= curves[("f16", "f16")]["max_ctx"]
    assert doc["versions"] and doc["versions"][0]["scan_id"] == 1
    status, _, html = served.get("/quant", {"repo": top["repo"], "path": top["path"]})
    assert status == 200
    assert 'class="budget"' in html and html.count('class="curve"') >= 2
    assert "context (tokens, log scale)" in html and "device memory (GiB)" in html


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"repo": "nobody/none", "path": "x.gguf"}, 404),
        ({"repo": "nobody/none"}, 400),
        ({"repo": "a", "path": "b", "vram": "x"}, 400),
        ({"repo": "a", "path": "b", "extra": "1"}, 400),
    ],
)
def test_api_quant_errors(served: Served, params, status) -> None:
    got, doc = served.json("/api/quant", params)
    assert got == status and doc["error"]


def test_api_scans_is_the_history(served: Served) -> None:
    status, doc = served.json("/api/scans")
    assert status == 200
    assert doc["scans"] == cli_json(served, "scans")
    assert doc["scans"][0]["status"] in ("ok", "partial")
    # The broken hostile file is not an error (not a GGUF); the counts and the list agree.
    assert sum(doc["errors_by_kind"].values()) >= len(doc["errors"])
    assert set(doc["changes"]) >= {"new_quants", "reuploads"}
    assert doc["watches"] == []
    status, _, html = served.get("/scans")
    assert status == 200 and 'id="scans"' in html
    assert served.json("/api/scans", {"limit": "0"})[0] == 400


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_no_route_accepts_a_write_method(served: Served, path: str, method: str) -> None:
    status, _, _ = served.get(path, method=method)
    assert status == 405


def test_unknown_path_host_header_and_static_files(served: Served) -> None:
    assert served.get("/nope")[0] == 404
    assert served.get("/api/nope")[0] == 404
    # A page asked for under another host name (DNS rebinding) is refused.
    assert served.get("/", headers={"Host": "evil.example"})[0] == 400
    status, _, css = served.get("/static/style.css")
    assert status == 200 and "prefers-color-scheme: dark" in css
    status, _, js = served.get("/static/copy.js")
    assert status == 200 and "clipboard" in js
    assert served.get("/static/../app.py")[0] == 404
    assert served.get("/", {"q": "x" * 5000})[0] == 400


def test_hostile_names_are_escaped_in_html_and_svg(served: Served) -> None:
    status, _, html = served.get("/", {"vram": 24, "ctx": 4096, "limit": 50, "q": "Hostile-Text"})
    assert status == 200
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in html
    assert "\x1b" not in html and "\u202e" not in html and "\x07" not in html
    assert r"\x1b]0;owned\x07[bold]x[/bold]\u202eevil-Q4_K_M.gguf" in html
    _, doc = served.json("/api/search", {"vram": 24, "ctx": 4096, "limit": 50, "q": "Hostile"})
    paths = {r["path"] for r in doc["results"]}
    assert set(HOSTILE_NAMES) <= paths  # JSON carries the names as they are
    status, _, page = served.get("/quant", {"repo": "evil/Hostile-Text-GGUF", "path": NAME_HTML})
    assert status == 200
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)" in page  # the file name, shown as text
    status, _, model = served.get("/model", {"q": "meta-llama/Llama-3.1-8B"})
    assert status == 200 and "<script>alert" not in model and "&lt;script&gt;" in model


def test_serve_warns_off_loopback_and_refuses_a_taken_port(served: Served) -> None:
    # Off loopback the Host names must be given; the Host check stays on.
    bare = run_quants("serve", "--db", served.db, "--host", "0.0.0.0", "--port", "0",
                      env=clean_env(served.tmp), timeout=60)  # fmt: skip
    assert bare.returncode == 2 and "--allow-host NAME" in bare.stderr.splitlines()[0]
    proc, base, head = start_server(
        served.db, served.tmp, "--host", "0.0.0.0", "--allow-host", "quants.lan"
    )
    try:
        assert base.startswith("http://0.0.0.0:")
        assert "warning: listening on 0.0.0.0, not 127.0.0.1" in head
        local = base.replace("0.0.0.0", "127.0.0.1")
        assert _status(local, "quants.lan") == 200
        assert _status(local, "evil.example") == 400
        assert _status(local, "0.0.0.0") == 400
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    out = run_quants("serve", "--db", served.db, "--port", str(served.port),
                     env=clean_env(served.tmp), timeout=60)  # fmt: skip
    assert out.returncode == 2 and "cannot listen on 127.0.0.1" in out.stderr
    assert "Traceback" not in out.stderr
    missing = run_quants("serve", "--db", f"sqlite:///{served.tmp / 'none.sqlite'}",
                         env=clean_env(served.tmp), timeout=60)  # fmt: skip
    assert missing.returncode == 1 and "no catalog at" in missing.stderr
    assert not (served.tmp / "none.sqlite").exists()  # read-only: never created


def _status(base: str, host: str) -> int:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        conn.request("GET", "/scans", headers={"Host": host})
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.parametrize("host", ["127.1", "127.0.0.2", "0x7f000001", "::1", "localhost"])
def test_every_loopback_spelling_keeps_the_host_check(served: Served, host: str) -> None:
    proc, base, _ = start_server(served.db, served.tmp, "--host", host)
    try:
        assert _status(base, "evil.example") == 400
        assert _status(base, "localhost") == 200
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


#: Short timeouts for the tests that wait them out (the defaults, 10 s and 5 s, are checked
#: below): the idle timeout shorter than the header timeout, so each test tells them apart.
QUICK_HEADER_S = 3.0
QUICK_IDLE_S = 1


@pytest.fixture(scope="module")
def quick(tmp_path_factory, crawled_world) -> Iterator[Served]:
    """``quants serve`` with --header-timeout QUICK_HEADER_S --idle-timeout QUICK_IDLE_S."""
    from tests.web.conftest import serving

    args = ("--header-timeout", str(QUICK_HEADER_S), "--idle-timeout", str(QUICK_IDLE_S))
    with serving(crawled_world.db, tmp_path_factory.mktemp("serve-quick"), *args) as served:
        yield served


def test_the_timeouts_default_to_10_s_for_headers_and_5_s_idle() -> None:
    from crawler.web import limits

    assert limits.HEADER_TIMEOUT_S == 10.0 and limits.IDLE_TIMEOUT_S == 5
    assert limits.header_timeout_protocol() is limits.HeaderTimeoutH11
    assert limits.HeaderTimeoutH11.header_timeout == limits.HEADER_TIMEOUT_S
    quick = limits.header_timeout_protocol(QUICK_HEADER_S)
    assert issubclass(quick, limits.HeaderTimeoutH11) and quick.header_timeout == QUICK_HEADER_S
    out = run_quants("serve", "--help", env=clean_env(Path("/nonexistent")))
    help_text = re.sub(r"\s+", " ", out.stdout)
    assert "--header-timeout" in help_text and "(default: 10)" in help_text
    assert "--idle-timeout" in help_text and "(default: 5)" in help_text


def test_a_client_that_never_finishes_its_headers_is_cut_off(quick: Served) -> None:
    import socket
    import time

    with socket.create_connection((quick.host, quick.port), timeout=30) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        started = time.monotonic()
        sock.settimeout(QUICK_HEADER_S + 15)
        assert sock.recv(1) == b""  # the server closed the connection ...
        waited = time.monotonic() - started
    # ... by the header timeout (the idle timeout is shorter: it would have closed it sooner)
    assert QUICK_HEADER_S - 0.5 < waited < QUICK_HEADER_S + 10, waited


def _raw_get(sock: Any, path: str = "/api/scans") -> bytes:
    """One keep-alive GET on an open socket; the response's status line."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(4096)
        assert chunk, "closed before a status line"
        head += chunk
    return head.split(b"\r\n", 1)[0]


def test_an_idle_keep_alive_connection_is_closed(quick: Served) -> None:
    import http.client
    import time

    conn = http.client.HTTPConnection(quick.host, quick.port, timeout=30)
    try:
        conn.request("GET", "/api/scans")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("connection", "keep-alive") != "close"
        resp.read()
        sock = conn.sock
        assert sock is not None  # kept alive after the response
        started = time.monotonic()
        assert sock.recv(1) == b""  # the server closed it ...
        idle = time.monotonic() - started
    finally:
        conn.close()
    # ... after the idle timeout, not the (longer) header timeout that also runs from there
    assert QUICK_IDLE_S - 0.5 < idle < QUICK_HEADER_S - 0.5, idle


def test_connections_past_the_cap_get_503_then_the_server_recovers(served: Served) -> None:
    import socket

    from crawler.web import limits

    address = (served.host, served.port)
    held: list[socket.socket] = []
    try:
        # Idle connections (no request yet) count: with MAX_CONNECTIONS - 2 held, one more
        # connection is the 63rd of 64 and is answered ...
        held.extend(
            socket.create_connection(address, timeout=10) for _ in range(limits.MAX_CONNECTIONS - 2)
        )
        with socket.create_connection(address, timeout=10) as sock:
            assert _raw_get(sock) == b"HTTP/1.1 200 OK"
        # ... and with one more held, the next reaches the cap of 64: 503, not a hang.
        held.append(socket.create_connection(address, timeout=10))
        with socket.create_connection(address, timeout=10) as sock:
            assert _raw_get(sock) == b"HTTP/1.1 503 Service Unavailable"
    finally:
        for sock in held:
            sock.close()
    assert served.get("/api/scans")[0] == 200  # the held ones gone, it answers again


@pytest.mark.parametrize(
    ("path", "params", "word"),
    [
        ("/api/search", {"vram": "2²", "ctx": 4096}, "vram"),
        ("/api/search", {"vram": 24, "ctx": "٤٠٩٦"}, "ctx"),
        ("/api/search", {"vram": "\uff12\uff14", "ctx": 4096}, "vram"),
        ("/api/search", {"vram": "nan", "ctx": 4096}, "vram"),
        ("/api/search", {"vram": "inf", "ctx": 4096}, "vram"),
        ("/api/search", {"vram": "1e400", "ctx": 4096}, "vram"),
        ("/api/search", {"vram": 24, "ctx": 4096, "q": "a\x00b"}, "q"),
        ("/api/search", {"vram": 24, "ctx": 4096, "author": "\x1b[2J"}, "author"),
        ("/api/scans", {"limit": "¹⁰"}, "limit"),
        ("/api/quant", {"repo": "a\x00", "path": "x.gguf"}, "repo"),
        ("/api/quant", {"repo": "o/r", "path": "x.gguf", "ctx": "NaN"}, "ctx"),
    ],
)
def test_hostile_parameters_are_400s(
    served: Served, path: str, params: dict[str, Any], word: str
) -> None:
    status, doc = served.json(path, params)
    assert status == 400 and doc["error"].startswith(word), doc


def test_scans_page_shows_a_watchs_options_escaped(tmp_path, crawled_world) -> None:
    """A watch's options (by name) on /scans and /api/scans; its text is escaped like Hub text."""
    from crawler.catalog import Catalog
    from crawler.catalog.watches import add_watch
    from tests.web.conftest import serving

    db = crawled_world.copy(tmp_path / "db")
    with Catalog.open(db) as catalog:
        add_watch(catalog, "w24", {"query": "<b>qwen</b>", "vram": 24.0, "mtp": True})
    with serving(db, tmp_path) as served:
        status, doc = served.json("/api/scans")
        assert status == 200
        assert [(w["name"], w["options"]) for w in doc["watches"]] == [
            ("w24", {"query": "<b>qwen</b>", "vram": 24.0, "mtp": True})
        ]
        status, _, html = served.get("/scans")
    assert status == 200
    assert "mtp=True query=&lt;b&gt;qwen&lt;/b&gt; vram=24.0" in html and "<b>qwen" not in html
