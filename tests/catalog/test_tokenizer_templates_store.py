"""Tokenizer templates persist in the catalog: a later process finds them by content and scope."""

from __future__ import annotations

from dataclasses import replace

import tests.synth as synth
from crawler.catalog import Catalog
from crawler.catalog.tokenizer_templates import CatalogTemplates
from crawler.gguf.header_read import TemplateBook, read_quant_header, scopes_for
from crawler.gguf.parse import read_header
from crawler.gguf.tokenizer_template import template_of

CAP = 64 << 20


def _lookup(lay: synth.Layout) -> str:
    header = read_header(lay.read_at, file_size=lay.size)
    t = template_of(header, lay.header, "x")
    assert t is not None
    return t.lookup


def test_a_template_stored_by_one_pass_serves_the_next(catalog_url):
    spec = replace(synth.preset("llama", "tiny"), n_vocab=32000)
    first, second = synth.layout(spec, synth.q4_k_m_like()), synth.layout(spec, synth.q8_0())
    scopes = scopes_for("alice/M-GGUF", "org/M")
    with Catalog.open(catalog_url) as catalog:
        book = TemplateBook(CatalogTemplates(catalog))
        read = read_quant_header(
            first.read_at, file_size=first.size, max_header_bytes=CAP, book=book, scopes=scopes,
            source="alice/M-GGUF/M-Q4_K_M.gguf",
        )  # fmt: skip
        assert not read.templated
        # Saving twice (two crawlers) keeps one row.
        store = CatalogTemplates(catalog)
        fingerprints = {f for _, f, _, _ in store.scoped(scopes)}
        assert len(fingerprints) == 1
        t = book.find(_lookup(first))
        assert t is not None and t.fingerprint in fingerprints
        store.save(t, scopes, with_block=True)
    with Catalog.open(catalog_url) as catalog:  # a new process: an empty book
        store = CatalogTemplates(catalog)
        assert {s for s, _, _, _ in store.scoped(scopes)} == set(scopes)
        loaded = store.load(t.lookup)
        assert loaded is not None and loaded.block == t.block and loaded.keys == t.keys
        book = TemplateBook(store)
        other = scopes_for("bob/M-GGUF", "org/M")
        assert book.first_read(other) is not None  # the base model's template sizes request 1
        got = read_quant_header(
            second.read_at, file_size=second.size, max_header_bytes=CAP, book=book, scopes=other,
            source="bob/M-GGUF/M-Q8_0.gguf",
        )  # fmt: skip
        assert got.templated and got.requests == 2
        assert got.bytes_fetched <= 0.10 * got.header.data_offset
        assert got.header.tokenizer_from == "alice/M-GGUF/M-Q4_K_M.gguf"
        with catalog.engine.connect() as conn:
            n = conn.exec_driver_sql("SELECT count(*) FROM tokenizer_templates").scalar()
            scoped = conn.exec_driver_sql("SELECT count(*) FROM tokenizer_template_scopes").scalar()
        assert n == 1 and scoped == 3  # both repos and their one base model
