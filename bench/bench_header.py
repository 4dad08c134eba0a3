"""Header fetch benchmark: bytes fetched, requests and parse time, ours vs @huggingface/gguf.

``python -m bench.bench_header`` (or ``python -m bench bench_header``) builds real-shaped synthetic
GGUFs (tests/synth: small 32k, 152k and 248k vocabularies; 291 to ~2000 tensors; sparse data),
serves them from a Range-logging HTTP server on 127.0.0.1 and reads each header three ways:
quants cold (no hint), quants with a size hint from a sibling quant of the same model, and the
npm package ``@huggingface/gguf`` (``gguf(url)``), installed with npm into ``--node-dir``
(default: a folder in the temp dir; never inside the repo). "bytes" are the body bytes the
server wrote; "wall ms" is the whole read over loopback (quants: ``read_header`` over
``UrlReader``; the peer: its ``gguf()`` call, node start-up excluded); "parse ms" is quants'
pure parse of the header from memory (median of 5).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from crawler.cli._output import format_table
from crawler.gguf.parse import parse_header_bytes, read_header
from crawler.library.targets import UrlReader

PEER = "@huggingface/gguf@0.4.6"
_NODE_SCRIPT = """
import { gguf } from "@huggingface/gguf";
const t0 = performance.now();
const r = await gguf(process.argv[2]);
const ms = performance.now() - t0;
const offset = Number(r.tensorDataOffset);
console.log(JSON.stringify({ms, tensors: r.tensorInfos.length, offset}));
"""


class _LoggingServer:
    """Serves one folder with Range (206); logs each request and the body bytes it wrote."""

    def __init__(self, root: Path) -> None:
        self.log: list[int] = []
        log, base = self.log, root

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                path = base / self.path.lstrip("/")
                size = path.stat().st_size
                a, _, b = (
                    (self.headers.get("Range") or "bytes=0-").removeprefix("bytes=").partition("-")
                )
                start, end = int(a), min(int(b) if b else size - 1, size - 1)
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
                self.send_header("Content-Length", str(end - start + 1))
                self.end_headers()
                log.append(0)
                with path.open("rb") as f:
                    f.seek(start)
                    left = end - start + 1
                    try:
                        while left > 0:
                            chunk = f.read(min(left, 1 << 16))
                            self.wfile.write(chunk)
                            log[-1] += len(chunk)
                            left -= len(chunk)
                    except (BrokenPipeError, ConnectionResetError):
                        pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _cases() -> list[tuple[str, Any, Any, Any, dict[str, Any]]]:
    """(name, spec, recipe, sibling recipe, metadata) of each benchmark file. The "real profile"
    rows give the BPE vocabulary the token lengths of the published Qwen2 vocabulary
    (tests/synth/vocab.py): short tokens first, CJK ones late, as a cold read meets them."""
    from tests import synth

    small = replace(synth.preset("llama", "real"), n_vocab=32000, name="Llama-32k")
    moe = replace(synth.preset("glm4moe", "real"), n_layer=117, name="GLM-like-117L")
    q3, q35 = synth.preset("qwen3", "real"), synth.preset("qwen35", "real")
    return [
        ("small vocab", small, synth.q4_k_m_like(), synth.q8_0(), {}),
        ("152k vocab", q3, synth.q4_k_m_like(), synth.q8_0(), {}),
        ("152k, MoE", moe, synth.q4_k_m_like(), synth.q8_0(), {}),
        ("248k vocab", q35, synth.ud_q3_k_xl_like(), synth.q4_k_m_like(), {}),
        (
            "152k real profile",
            replace(q3, name="Qwen3-8B-real-profile"),
            synth.q4_k_m_like(),
            synth.q8_0(),
            synth.real_profile_tokenizer(q3.n_vocab),
        ),
        (
            "248k real profile",
            replace(q35, name="Qwen3.6-27B-real-profile"),
            synth.ud_q3_k_xl_like(),
            synth.q4_k_m_like(),
            synth.real_profile_tokenizer(q35.n_vocab),
        ),
    ]


def _node_ready(node_dir: Path) -> bool:
    if shutil.which("node") is None or shutil.which("npm") is None:
        return False
    if not (node_dir / "node_modules" / "@huggingface" / "gguf").is_dir():
        node_dir.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(node_dir), PEER],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            return False
    (node_dir / "bench.mjs").write_text(_NODE_SCRIPT)
    return True


def _fetch(log: list[int], header_bytes: int) -> tuple[int, int, str]:
    sent = sum(log)
    return len(log), sent, f"{sent / header_bytes:.3f}x"


def _timed(fn: Callable[[], Any], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main(argv: list[str]) -> None:
    """Build the files, run every reader, print one table."""
    from tests import synth

    parser = argparse.ArgumentParser(prog="bench_header", description=__doc__)
    parser.add_argument(
        "--node-dir", type=Path, default=Path(tempfile.gettempdir()) / "quants-bench-node"
    )
    args = parser.parse_args(argv)
    have_node = _node_ready(args.node_dir)
    rows: list[tuple[Any, ...]] = []
    with tempfile.TemporaryDirectory(prefix="quants-bench-") as tmp:
        root = Path(tmp)
        server = _LoggingServer(root)
        try:
            for name, spec, recipe, sibling, meta in _cases():
                target = root / f"{spec.name}-{recipe.label}.gguf"
                path = synth.write_gguf(target, spec, recipe, metadata=meta)[0]
                head = synth.layout(spec, recipe, metadata=meta).header
                hint = synth.layout(spec, sibling, metadata=meta).data_offset
                url = f"{server.url}/{path.name}"
                header_bytes = parse_header_bytes(head).data_offset
                parse_ms = _timed(lambda h=head: parse_header_bytes(h))
                common = (name, spec.n_vocab, len(parse_header_bytes(head).tensors), header_bytes)
                for tool, size_hint in (("quants (cold)", None), ("quants (hint)", hint)):
                    server.log.clear()
                    t0 = time.perf_counter()
                    with UrlReader(url) as reader:
                        read_header(reader, size_hint=size_hint)
                    wall_ms = (time.perf_counter() - t0) * 1000
                    rows.append(
                        (*common, tool, *_fetch(server.log, header_bytes), wall_ms, parse_ms)
                    )
                if have_node:
                    server.log.clear()
                    out = subprocess.run(
                        ["node", str(args.node_dir / "bench.mjs"), url],
                        capture_output=True,
                        text=True,
                        check=True,
                        cwd=args.node_dir,
                    )
                    peer = json.loads(out.stdout)
                    fetch = _fetch(server.log, header_bytes)
                    rows.append((*common, "@huggingface/gguf", *fetch, peer["ms"], None))
        finally:
            server.close()
    cols = (
        "case", "vocab", "tensors", "header bytes", "reader", "requests", "bytes fetched", "ratio",
        "wall ms", "parse ms",
    )  # fmt: skip
    shown = [(*r[:-2], f"{r[-2]:.0f}", "-" if r[-1] is None else f"{r[-1]:.0f}") for r in rows]
    print(format_table(cols, shown, align_right=cols[1:4] + cols[5:]))
    if not have_node:
        print(f"(node/npm or {PEER} unavailable: peer rows skipped)")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
