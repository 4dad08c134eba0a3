"""The crawl reads a repo's later quants as siblings: a fraction of their headers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import tests.synth as synth
from crawler.base.config import Settings
from crawler.catalog import Catalog
from crawler.catalog.tensor_tables import decode_tensor_table
from crawler.crawl.scan import run_once
from tests.hub.snapshot import rows
from tests.hub_emulator import HubEmulator
from tests.hub_emulator.state import Blob

REPO = "someone/Model-32k-GGUF"


def test_later_quants_of_a_repo_cost_a_fraction_of_their_headers(tmp_path: Path) -> None:
    spec = replace(synth.preset("llama", "tiny"), n_vocab=32000)
    files = {}
    for label, recipe in (
        ("Q8_0", synth.q8_0()),
        ("Q4_K_M", synth.q4_k_m_like()),
        ("BF16", synth.bf16()),
    ):
        p = synth.write_gguf(tmp_path / f"Model-{label}.gguf", spec, recipe)[0]
        files[p.name] = Blob.from_file(p)
    url = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    with HubEmulator() as emu:
        emu.state.create_repo(REPO, files)
        settings = Settings(hf_endpoint=emu.endpoint, db_url=url)
        with Catalog.open(url) as catalog:
            summary = run_once(settings, catalog=catalog, authors=("someone",), searches=())
        ranged = [r for r in emu.requests(origin="cdn") if r.range]  # the 206s
    assert summary.files_analysed == 3 and summary.errors == 0
    # The first file in full (2 reads), each sibling in 2 reads of a few KB.
    assert len(ranged) == 6
    one_header = summary.header_bytes / 3
    assert summary.header_bytes_fetched < 1.05 * one_header + 2 * 0.10 * one_header
    data = rows(url, "SELECT data, encoding FROM tensor_tables")
    headers = [shard.header for blob, enc in data for shard in decode_tensor_table(blob, enc)]
    reused = [h.tokenizer_from for h in headers]
    # One file read in full; the two others reused its tokenizer, and the catalog says so: the
    # file it was read from, and the template (never that their own tokenizer was read).
    assert reused.count(None) == 1
    assert sum(1 for r in reused if r) == 2
    assert all(r is None or r.removeprefix(f"{REPO}/") in files for r in reused)
    assert all((h.tokenizer_from is None) == (h.tokenizer_template is None) for h in headers)
    stored = rows(url, "SELECT fingerprint, source FROM tokenizer_templates")
    assert len(stored) == 1 and {h.tokenizer_template for h in headers} == {None, stored[0][0]}


def test_a_second_uploader_of_a_base_model_reads_no_tokenizer(tmp_path: Path) -> None:
    # The same base model quantized by two uploaders (another name, an MTP variant): the
    # tokenizer is read once in the pass; every other file is templated, 2 reads each.
    spec = replace(synth.preset("qwen35", "tiny"), n_vocab=32000)
    card = {"base_model": "org/Model", "base_model_relation": "quantized"}
    with HubEmulator() as emu:
        for who, variants in (
            ("alice", (("Q8_0", synth.q8_0(), 0), ("Q4_K_M", synth.q4_k_m_like(), 0))),
            (
                "bob",
                (("Q6_K-mtp", synth.uniform("Q6_K", label="Q6_K"), 1), ("BF16", synth.bf16(), 0)),
            ),
        ):
            files = {}
            for label, recipe, nextn in variants:
                p = synth.write_gguf(
                    tmp_path / f"{who}-Model-{label}.gguf",
                    replace(spec, n_nextn=nextn),
                    recipe,
                    metadata={"general.name": f"Model by {who}"},
                )[0]
                files[f"Model-{label}.gguf"] = Blob.from_file(p)
            emu.state.create_repo(f"{who}/Model-GGUF", files, card_data=card)
        url = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
        settings = Settings(hf_endpoint=emu.endpoint, db_url=url)
        with Catalog.open(url) as catalog:
            summary = run_once(settings, catalog=catalog, authors=("alice", "bob"), searches=())
    assert summary.files_analysed == 4 and summary.errors == 0
    assert summary.header_templated == 3 and summary.header_fallbacks == 0
    assert summary.header_reads == 8
    one_header = summary.header_bytes / 4
    assert summary.header_bytes_fetched < 1.20 * one_header + 3 * 0.10 * one_header
    assert len(rows(url, "SELECT fingerprint FROM tokenizer_templates")) == 1
    scopes = {r[0] for r in rows(url, "SELECT scope FROM tokenizer_template_scopes")}
    assert scopes == {"repo:alice/Model-GGUF", "repo:bob/Model-GGUF", "base:org/model"}
