"""Header reads with tokenizer templates, and on-demand search, against the Hub emulator.

Run: ``python -m bench bench_ondemand`` (or ``python -m bench.bench_ondemand [--quick]
[--part 1|2]``).

Part 1, bytes and requests per file, read with the real client (``HubClient.range_reader``)
through ``crawler.gguf.header_read.read_quant_header`` and one ``TemplateBook``: real-size synthetic
quants (tests/synth) of a Llama-2-7B-shaped model (32k SentencePiece vocabulary: tokens, scores
and token types), a 32k BPE vocabulary with llama dims, 152k Qwen3-8B and 248k Qwen3.6-27B, the
BPE ones with the token-length profile of the published Qwen2 vocabulary
(tests/synth/vocab.py). Per vocabulary: the first file cold, a sibling in the same repo, an MTP
variant (one more key before the tokenizer, and the MTP tensors), and a quant of the same base
model by another uploader (longer general.* metadata). "ranged GETs" are the reads; "HTTP req"
adds the Hub's 302 hop of the first read; "ratio" is fetched bytes / the file's header bytes.

Part 2, time to the first answer of an on-demand search: an empty catalog; one base model
(Qwen3.6-27B, 248k vocabulary, ~9.8 MB headers) quantized by 9 uploaders, 2 real-size quants
each (an MTP variant among them for every other uploader), found through the base model;
``ensure_model`` then the search itself, at 20/50/100 ms injected round-trip latency (added by
the emulator to every request on both origins), concurrency 8. Then the same search again.
"full headers" is header bytes fetched / one file's header: the target is at most 1.5 plus 0.10
per further file, answered within 5 s at 50 ms.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import tests.synth as synth
from crawler.base.config import Settings
from crawler.catalog import Catalog
from crawler.cli.search_cmd import request_from_argv
from crawler.crawl.ondemand import ensure_model
from crawler.crawl.watch import search_results
from crawler.gguf.header_read import TemplateBook, read_quant_header, scopes_for
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


def _row(name: str, which: str, header: int, gets: int, reqs: int, fetched: int, note: str) -> None:
    print(
        f"  {name:<20} {which:<14} {header:>10} {gets:>11} {reqs:>8} {fetched:>10} "
        f"{fetched / header:>6.3f}x  {note}"
    )


def header_costs(tmp: Path) -> None:
    bpe: tuple[tuple[str, synth.ModelSpec], ...] = (
        ("32k (llama dims)", replace(synth.preset("llama", "real"), n_vocab=32000)),
        ("152k (Qwen3-8B)", synth.preset("qwen3", "real")),
        ("248k (Qwen3.6-27B)", synth.preset("qwen35", "real")),
    )
    print("Part 1: header reads per file, real client against the emulator (no latency)")
    print(
        f"  {'vocabulary':<20} {'file':<14} {'header B':>10} {'ranged GETs':>11} "
        f"{'HTTP req':>8} {'fetched B':>10} {'ratio':>7}  read"
    )
    with HubEmulator() as emu:
        cases: list[tuple[str, dict[str, Any]]] = [("32k SPM (Llama-2-7B)", {})]
        cases += [(name, {"spec": spec}) for name, spec in bpe]
        for i, (name, case) in enumerate(cases):
            spec = case.get("spec")
            tok = synth.real_profile_tokenizer(spec.n_vocab) if spec is not None else {}
            variants = (
                ("first", "alice", "Q4_K_M", None, {}),
                ("sibling", "alice", "Q8_0", "Q8_0", {}),
                ("MTP variant", "alice", "Q6_K-mtp", "Q6_K", {"mtp": True}),
                ("other uploader", "bob", "Q5_K_M", "Q5_K", {"meta": {"general.url": "u" * 900}}),
            )
            book = TemplateBook()
            client = HubClient(Settings(hf_endpoint=emu.endpoint))
            for which, who, label, t, extra in variants:
                if spec is None and extra.get("mtp"):
                    continue  # the SentencePiece file has no MTP variant
                target = tmp / f"h{i}-{who}-{label}.gguf"
                recipe = _recipe(label, t)
                meta = {**tok, "general.name": f"{name} by {who}", **extra.get("meta", {})}
                if spec is None:  # the Llama-2 SentencePiece file (tests/synth/spm.py)
                    p = synth.write_layout(target, llama2_like(recipe))
                else:
                    s = replace(spec, n_nextn=1 if extra.get("mtp") else 0)
                    p = synth.write_gguf(target, s, recipe, metadata=meta)[0]
                repo = f"{who}/h{i}-GGUF"
                blob = Blob.from_file(p)
                if repo not in emu.state.repos:
                    emu.state.create_repo(repo, {p.name: blob})
                else:
                    emu.state.commit(repo, {p.name: blob})
                commit = emu.state.repos[repo].head.sha
                reader = client.range_reader(repo, p.name, commit)
                read = read_quant_header(
                    reader,
                    file_size=blob.size,
                    max_header_bytes=64 << 20,
                    book=book,
                    scopes=scopes_for(repo, f"org/model-{i}"),
                    source=f"{repo}/{p.name}",
                )
                how = "template" if read.templated else "in full"
                if read.fell_back:
                    how += " (fall-back)"
                _row(
                    name if which == "first" else "", which, read.header.data_offset,
                    read.requests, reader.requests, reader.bytes_fetched, how,
                )  # fmt: skip


def _family(emu: HubEmulator, tmp: Path, uploaders: int, per: int) -> int:
    """One base model quantized by ``uploaders`` repos of ``per`` quants; returns the files."""
    when = datetime(2026, 6, 1, tzinfo=UTC)
    emu.state.create_repo("Qwen/Qwen3.6-27B", {"config.json": Blob.from_bytes(b"{}")}, date=when)
    spec = synth.preset("qwen35", "real")
    tok = synth.real_profile_tokenizer(spec.n_vocab)
    n = 0
    for u in range(uploaders):
        files = {}
        for k, (label, t) in enumerate(FAMILY[u % 4 :: 4][:per]):
            mtp = u % 2 == 1 and k == 1
            s = spec if mtp else replace(spec, n_nextn=0)
            name = f"Qwen3.6-27B-{label}{'-mtp' if mtp else ''}.gguf"
            meta = {**tok, "general.name": f"Qwen3.6 27B ({'uploader'} {u})"}
            p = synth.write_gguf(tmp / f"u{u}-{name}", s, _recipe(label, t), metadata=meta)[0]
            files[name] = Blob.from_file(p)
            n += 1
        emu.state.create_repo(
            f"uploader{u}/Qwen3.6-27B-GGUF",
            files,
            date=when,
            card_data={"base_model": "Qwen/Qwen3.6-27B", "base_model_relation": "quantized"},
        )
    return n


def time_to_answer(tmp: Path, uploaders: int, per: int, rtts: tuple[int, ...]) -> None:
    print(
        f"Part 2: on-demand search, empty catalog, one base model across {uploaders} uploaders "
        f"({per} real-size 248k-vocabulary quants each)"
    )
    print(
        f"  {'RTT':>6} {'answer s':>9} {'of which Hub s':>14} {'requests':>8} {'files':>5} "
        f"{'header GETs':>11} {'MB fetched':>10} {'full headers':>12} {'target':>7} "
        f"{'templated':>9} {'fall-backs':>10} {'again s':>8} {'again req':>9}"
    )
    # The search itself through the command's own parser (stable across library moves).
    argv = ["qwen3.6 27b", "--vram", "48", "--ctx", "32768", "--limit", "20"]
    with HubEmulator() as emu:
        n = _family(emu, tmp, uploaders, per)
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
                results = search_results(catalog, request_from_argv(argv))
            assert results, "the search found nothing"
            t2 = time.perf_counter()
            s = done.summary
            assert s is not None and s.files_analysed == n, s
            total_requests = len(emu.requests())
            emu.clear_log()
            with Catalog.open(url) as catalog:
                again = ensure_model(
                    settings, "qwen3.6 27b", catalog=catalog, max_age=timedelta(hours=24)
                )
            with Catalog.open(url) as catalog:
                search_results(catalog, request_from_argv(argv))
            t4 = time.perf_counter()
            assert again.action == "fresh"
            if rtt == 0:
                continue
            one = s.header_bytes / n
            full = s.header_bytes_fetched / one
            target = 1.5 + 0.10 * (n - 1)
            print(
                f"  {rtt:>4}ms {t2 - t0:>9.2f} {t1 - t0:>14.2f} {total_requests:>8} {n:>5} "
                f"{s.header_reads:>11} {s.bytes_fetched / 1e6:>10.1f} {full:>12.2f} "
                f"{target:>7.2f} {getattr(s, 'header_templated', '-'):>9} "
                f"{getattr(s, 'header_fallbacks', '-'):>10} {t4 - t2:>8.2f} "
                f"{len(emu.requests()):>9}"
            )


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    part = argv[argv.index("--part") + 1] if "--part" in argv else "12"
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "1" in part:
            header_costs(tmp)
            print()
        if "2" in part:
            time_to_answer(tmp, 9, 1 if quick else 2, (50,) if quick else RTTS_MS)


if __name__ == "__main__":
    main(sys.argv[1:])
