"""Sibling header reads and on-demand search against the Hub emulator.

Run: ``python -m bench bench_ondemand`` (or ``python -m bench.bench_ondemand [--quick]``).

Part 1, bytes and requests per file: two real-size quants of one model (synthetic, tests/synth:
a Llama-2-7B-shaped file with a 32k SentencePiece vocabulary, a 32k BPE vocabulary with llama
dims, 152k Qwen3-8B, 248k Qwen3.6-27B), served by the emulator and read with the real client
(``HubClient.range_reader``): the first file cold (``read_header``, no hint), the second as a
sibling (``crawler.gguf.sibling.read_sibling_header`` with the first as template). "ranged GETs" are
the reader's reads; "HTTP req" adds the Hub's 302 hop of the first read (later reads go straight
to the CDN URL); "ratio" is fetched bytes / the file's header bytes.

Part 2, time to the first answer of an on-demand search: an empty catalog, a 12-quant family of
real-size Qwen3.6-27B files (248k vocabulary, ~9.6 MB headers) found through its base model,
``ensure_model`` then the search itself, at 20/50/100 ms injected round-trip latency (added by
the emulator to every request on both origins), concurrency 8. Then the same search again.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import tests.synth as synth
from crawler.catalog import Catalog
from crawler.cli.search_cmd import search_argv
from crawler.config import Settings
from crawler.crawl.ondemand import ensure_model
from crawler.gguf.parse import read_header
from crawler.gguf.sibling import read_sibling_header, template_from
from crawler.hub import HubClient
from tests.hub_emulator import HubEmulator
from tests.hub_emulator.state import Blob
from tests.synth.spm import llama2_like

RTTS_MS = (20, 50, 100)
FAMILY = (
    ("Q2_K", "Q2_K"),
    ("Q3_K_M", "Q3_K"),
    ("Q4_0", "Q4_0"),
    ("Q4_1", "Q4_1"),
    ("IQ4_XS", "IQ4_XS"),
    ("Q4_K_M", None),
    ("Q5_0", "Q5_0"),
    ("Q5_K_M", "Q5_K"),
    ("Q6_K", "Q6_K"),
    ("Q8_0", "Q8_0"),
    ("F16", "F16"),
    ("BF16", "BF16"),
)


def _recipe(label: str, t: str | None) -> synth.Recipe:
    return synth.q4_k_m_like() if t is None else synth.uniform(t, label=label)


def header_costs(tmp: Path) -> None:
    cases: tuple[tuple[str, synth.ModelSpec | None], ...] = (
        ("32k SPM (Llama-2-7B)", None),
        ("32k (llama dims)", replace(synth.preset("llama", "real"), n_vocab=32000)),
        ("152k (Qwen3-8B)", synth.preset("qwen3", "real")),
        ("248k (Qwen3.6-27B)", synth.preset("qwen35", "real")),
    )
    print("Part 1: header reads per file, real client against the emulator (no latency)")
    print(
        f"  {'vocabulary':<20} {'file':<8} {'header B':>10} {'ranged GETs':>11} "
        f"{'HTTP req':>8} {'fetched B':>10} {'ratio':>7}"
    )
    with HubEmulator() as emu:
        for i, (name, spec) in enumerate(cases):
            repo = f"bench/h{i}-GGUF"
            paths = {}
            for label, t in (("Q4_K_M", None), ("Q8_0", "Q8_0")):
                target = tmp / f"h{i}-{label}.gguf"
                if spec is None:  # the Llama-2 SentencePiece file (tests/synth/spm.py)
                    p = synth.write_layout(target, llama2_like(_recipe(label, t)))
                else:
                    p = synth.write_gguf(target, spec, _recipe(label, t))[0]
                paths[p.name] = Blob.from_file(p)
            commit = emu.state.create_repo(repo, paths).head.sha
            client = HubClient(Settings(hf_endpoint=emu.endpoint))
            first, second = sorted(paths)
            reader = client.range_reader(repo, first, commit)
            calls = [0]

            def counted(offset: int, length: int, r=reader, c=calls) -> bytes:  # type: ignore[no-untyped-def]
                c[0] += 1
                return r(offset, length)

            h1 = read_header(counted, file_size=paths[first].size)
            _row(name, "first", h1.data_offset, calls[0], reader.requests, reader.bytes_fetched)
            template = template_from(h1, first)
            assert template is not None
            reader = client.range_reader(repo, second, commit)
            calls = [0]
            h2 = read_sibling_header(
                lambda o, n, r=reader, c=calls: (c.__setitem__(0, c[0] + 1), r(o, n))[1],
                template,
                file_size=paths[second].size,
                max_header_bytes=64 << 20,
            )
            assert h2 is not None, "sibling read fell back"
            _row("", "sibling", h2.data_offset, calls[0], reader.requests, reader.bytes_fetched)


def _row(name: str, which: str, header: int, gets: int, reqs: int, fetched: int) -> None:
    print(
        f"  {name:<20} {which:<8} {header:>10} {gets:>11} {reqs:>8} {fetched:>10} "
        f"{fetched / header:>6.3f}x"
    )


def _family(emu: HubEmulator, tmp: Path, n: int) -> None:
    when = datetime(2026, 6, 1, tzinfo=UTC)
    emu.state.create_repo("Qwen/Qwen3.6-27B", {"config.json": Blob.from_bytes(b"{}")}, date=when)
    spec = synth.preset("qwen35", "real")
    files = {}
    for label, t in FAMILY[:n]:
        p = synth.write_gguf(tmp / f"Qwen3.6-27B-{label}.gguf", spec, _recipe(label, t))[0]
        files[p.name] = Blob.from_file(p)
    emu.state.create_repo(
        "newcomer/q36-27b-quants-GGUF",
        files,
        date=when,
        card_data={"base_model": "Qwen/Qwen3.6-27B", "base_model_relation": "quantized"},
    )


def time_to_answer(tmp: Path, n: int, rtts: tuple[int, ...]) -> None:
    print(f"Part 2: on-demand search, empty catalog, {n}-quant real-size 248k-vocabulary family")
    print(
        f"  {'RTT':>6} {'answer s':>9} {'of which Hub s':>14} {'requests':>8} {'MB fetched':>10} "
        f"{'headers MB':>10} {'results':>7} {'again s':>8} {'again req':>9}"
    )
    # The search itself through the command's own parser (stable across library moves).
    argv = ["qwen3.6 27b", "--vram", "48", "--ctx", "32768", "--limit", "20"]
    with HubEmulator() as emu:
        _family(emu, tmp, n)
        # The first pass pays one-time imports and start-up; it is run once unprinted (RTT 0).
        for rtt in (0, *rtts):
            emu.latency_s = rtt / 1000
            url = f"sqlite:///{tmp / f'od-{rtt}.sqlite'}"
            settings = Settings(hf_endpoint=emu.endpoint, db_url=url)
            emu.clear_log()
            t0 = time.perf_counter()
            with Catalog.open(url) as catalog:
                done = ensure_model(settings, "qwen3.6 27b", catalog=catalog)
            t1 = time.perf_counter()
            with Catalog.open(url) as catalog:
                results = search_argv(catalog, argv)
            t2 = time.perf_counter()
            s = done.summary
            assert s is not None and s.files_analysed == n, s
            total_requests = len(emu.requests())
            emu.clear_log()
            with Catalog.open(url) as catalog:
                again = ensure_model(
                    settings, "qwen3.6 27b", catalog=catalog, max_age=timedelta(hours=24)
                )
            t3 = time.perf_counter()
            with Catalog.open(url) as catalog:
                search_argv(catalog, argv)
            t4 = time.perf_counter()
            assert again.action == "fresh"
            if rtt == 0:
                continue
            print(
                f"  {rtt:>4}ms {t2 - t0:>9.2f} {t1 - t0:>14.2f} {total_requests:>8} "
                f"{s.bytes_fetched / 1e6:>10.1f} {s.header_bytes / 1e6:>10.1f} "
                f"{len(results):>7} {t4 - t2:>8.2f} "
                f"{len(emu.requests()):>9}"
            )
            del t3


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        header_costs(tmp)
        print()
        time_to_answer(tmp, 4 if quick else 12, (50,) if quick else RTTS_MS)


if __name__ == "__main__":
    main(sys.argv[1:])
