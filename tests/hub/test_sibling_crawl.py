"""The crawl reads a repo's later quants as siblings: a fraction of their headers (issue 13)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import tests.synth as synth
from crawler.catalog import Catalog
from crawler.catalog.tensor_tables import decode_tensor_table
from crawler.config import Settings
from crawler.scan import run_once
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
