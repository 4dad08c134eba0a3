"""Byte sources: local files, a real Range server on 127.0.0.1 (honouring or ignoring Range), split
shards, ``.partNofM`` files. Hub targets: tests/hub/test_targets_hub.py; the command:
tests/e2e/test_inspect_cli.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from crawler.base.config import Settings
from crawler.base.errors import HubNotFound, UsageError
from crawler.library.targets import UrlReader, parse_target, read_target
from tests import synth

ROOT = Path(__file__).resolve().parents[2]


class RangeServer:
    """A threading HTTP server over one directory that logs every request and the body bytes it
    managed to send; ``ignore_range`` answers every GET with 200 and the whole file."""

    def __init__(self, root: Path, *, ignore_range: bool = False) -> None:
        self.root = root
        self.ignore_range = ignore_range
        self.log: list[dict[str, object]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                path = server.root / self.path.lstrip("/")
                entry: dict[str, object] = {"range": self.headers.get("Range"), "sent": 0}
                server.log.append(entry)
                if not path.is_file():
                    self.send_error(404)
                    return
                size = path.stat().st_size
                start, end = 0, size - 1
                rng = self.headers.get("Range")
                if rng and not server.ignore_range:
                    a, _, b = rng.removeprefix("bytes=").partition("-")
                    start, end = int(a), min(int(b) if b else size - 1, size - 1)
                    if start >= size:
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{size}")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(end - start + 1))
                self.end_headers()
                with path.open("rb") as f:
                    f.seek(start)
                    left = end - start + 1
                    try:
                        while left > 0:
                            chunk = f.read(min(left, 1 << 16))
                            self.wfile.write(chunk)
                            entry["sent"] = int(entry["sent"]) + len(chunk)  # type: ignore[call-overload]
                            left -= len(chunk)
                    except (BrokenPipeError, ConnectionResetError):
                        pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> RangeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def big_file(tmp_path_factory) -> Path:
    """A real-size Qwen3.6-27B-like UD-Q3_K_XL file (9.6 MB header, 14.6 GiB sparse data)."""
    folder = tmp_path_factory.mktemp("big")
    spec = synth.preset("qwen35", "real")
    return synth.write_gguf(
        folder / "Qwen3.6-27B-MTP-UD-Q3_K_XL.gguf", spec, synth.ud_q3_k_xl_like()
    )[0]


@pytest.fixture
def server(big_file) -> Iterator[RangeServer]:
    with RangeServer(big_file.parent) as s:
        yield s


def test_url_reader_fetches_about_the_header_in_two_requests(server, big_file):
    settings = Settings()
    read = read_target(f"{server.url}/{big_file.name}", settings)
    header = read.header
    assert read.requests == 2 == len(server.log)
    assert read.header_bytes == header.data_offset
    # The second read sizes the tensor infos by the largest record ggml allows and the rest of
    # the vocabulary with a margin (crawler/gguf/fetch.py), so a flat synthetic vocabulary
    # over-reads up to ~1.16x; never a third request.
    assert header.data_offset <= read.bytes_fetched <= 1.20 * header.data_offset
    assert read.size_bytes == big_file.stat().st_size
    assert read.file_name == big_file.name


def test_a_server_that_ignores_range_does_not_make_us_download_the_file(big_file):
    with RangeServer(big_file.parent, ignore_range=True) as s:
        with UrlReader(f"{s.url}/{big_file.name}") as reader:
            from crawler.gguf.parse import read_header

            header = read_header(reader)
        assert reader.range_ignored
        # The one range reader (crawler.hub.RangeReader): each read is one request that streams
        # the file from byte 0 and stops at the end of what the parser asked for (the header plus
        # its margin), so no request takes the whole file.
        assert reader.requests == 2 == len(s.log)
        assert reader.bytes_fetched <= 1.20 * header.data_offset + 64 * 1024
        sent = sum(int(e["sent"]) for e in s.log)  # type: ignore[call-overload]
    # The server wrote far less than the 14.6 GiB file (socket buffers at most).
    assert sent < header.data_offset + 64 * 1024 * 1024
    assert sent < big_file.stat().st_size / 100


def test_url_errors(server):
    with pytest.raises(HubNotFound):
        read_target(f"{server.url}/missing.gguf", Settings())


def test_local_split_and_parts(tmp_path):
    spec, recipe = synth.preset("glm4moe"), synth.q4_k_m_like()
    shards = synth.write_gguf(tmp_path / "GLM-Q4_K_M.gguf", spec, recipe, split=3)
    read = read_target(str(shards[1]), Settings())
    assert read.shards == tuple(str(p) for p in shards)
    assert len(read.header.tensors) == len(synth.layout(spec, recipe).tensors)
    assert read.size_bytes == sum(p.stat().st_size for p in shards)
    parts = synth.write_parts(tmp_path / "GLM.Q4_K_M.gguf", spec, recipe, parts=2)
    read = read_target(str(parts[0]), Settings())
    assert read.size_bytes == synth.layout(spec, recipe).size
    assert read.header.data_offset == synth.layout(spec, recipe).data_offset
    # A real first shard (split.count = 3 in its keys) without the others.
    (tmp_path / "lonely").mkdir()
    (tmp_path / "lonely" / shards[0].name).write_bytes(shards[0].read_bytes())
    with pytest.raises(UsageError, match="missing shard"):
        read_target(str(tmp_path / "lonely" / shards[0].name), Settings())


def test_parse_target():
    assert parse_target("unsloth/Qwen3.6-27B-GGUF:UD-Q4_K_XL").kind == "hub_quant"
    t = parse_target("unsloth/Qwen3.6-27B-GGUF/sub/Qwen3.6-27B-Q8_0.gguf")
    assert (t.kind, t.repo_id, t.path) == (
        "hub_file",
        "unsloth/Qwen3.6-27B-GGUF",
        "sub/Qwen3.6-27B-Q8_0.gguf",
    )
    t = parse_target("https://huggingface.co/a/b/resolve/main/x-Q4_K_M.gguf")
    assert (t.kind, t.repo_id, t.revision, t.path) == ("hub_file", "a/b", "main", "x-Q4_K_M.gguf")
    assert parse_target("https://example.com/a/b/resolve/main/x.gguf").kind == "url"
    with pytest.raises(UsageError):
        parse_target("no-such-thing")


# --------------------------------------------------------------------------- Hub targets


# --------------------------------------------------------------------------- the command
