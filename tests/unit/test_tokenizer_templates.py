"""Tokenizer templates: a templated read equals the full read's tensor table, or falls back."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.synth as synth
from crawler.gguf.header_read import HeaderRead, TemplateBook, read_quant_header, scopes_for
from crawler.gguf.parse import GGUFHeader, read_header
from crawler.gguf.tokenizer_template import template_of
from crawler.profile.analysis import AnalysedShard, analyse_quant

CAP = 64 * 1024 * 1024


class Counting:
    """A ReadAt over a synthetic layout that counts reads and bytes."""

    def __init__(self, lay: synth.Layout) -> None:
        self.lay, self.reads, self.bytes = lay, 0, 0

    def __call__(self, offset: int, length: int) -> bytes:
        data = self.lay.read_at(offset, length)
        self.reads += 1
        self.bytes += len(data)
        return data


def _full(lay: synth.Layout) -> GGUFHeader:
    return read_header(lay.read_at, file_size=lay.size, max_header_bytes=CAP)


def _read(
    lay: synth.Layout, book: TemplateBook, repo: str = "a/Model-GGUF", base: str | None = None,
    **kw: object,
) -> HeaderRead:  # fmt: skip
    return read_quant_header(
        lay.read_at,
        file_size=lay.size,
        max_header_bytes=CAP,
        book=book,
        scopes=scopes_for(repo, base),
        source=f"{repo}/{id(lay)}.gguf",
        **kw,  # type: ignore[arg-type]
    )


def _spec(arch: str, n_vocab: int = 32000) -> synth.ModelSpec:
    return replace(synth.preset(arch, "tiny"), n_vocab=n_vocab)


def _same_tables(got: GGUFHeader, full: GGUFHeader) -> None:
    assert got.tensors == full.tensors
    assert got.data_offset == full.data_offset
    assert list(got.metadata) == list(full.metadata)
    assert dict(got.metadata_types) == dict(full.metadata_types)


def test_a_sibling_is_read_in_two_requests_at_a_tenth_of_its_header():
    spec = _spec("qwen3")
    book = TemplateBook()
    first = _read(synth.layout(spec, synth.q4_k_m_like()), book)
    assert not first.templated and first.requests <= 2
    lay = synth.layout(spec, synth.q8_0())
    second = _read(lay, book)
    _same_tables(second.header, _full(lay))
    assert second.templated and second.requests == 2
    assert second.bytes_fetched <= 0.10 * second.header.data_offset
    assert second.header.tokenizer_template is not None
    assert (
        second.header.tokenizer_from == first.header.tokenizer_from or second.header.tokenizer_from
    )


def test_an_mtp_variant_with_an_extra_key_before_the_tokenizer_is_templated():
    spec = _spec("qwen35")
    trunk = replace(spec, n_nextn=0)
    book = TemplateBook()
    _read(synth.layout(trunk, synth.q4_k_m_like()), book)
    lay = synth.layout(spec, synth.q8_0())
    full = _full(lay)
    assert "qwen35.nextn_predict_layers" in full.metadata
    got = _read(lay, book)
    assert got.templated and got.requests == 2
    assert got.bytes_fetched <= 0.10 * full.data_offset
    _same_tables(got.header, full)
    assert got.header.metadata["qwen35.nextn_predict_layers"] == 1


def test_a_multi_array_tokenizer_is_skipped_whole():
    # tokens, scores and token types (SentencePiece, as Gemma and Llama 2 files carry them).
    from tests.synth.spm import llama2_like

    a, b = llama2_like(synth.q4_k_m_like()), llama2_like(synth.q8_0())
    book = TemplateBook()
    _read(a, book)
    got = _read(b, book)
    full = _full(b)
    _same_tables(got.header, full)
    assert got.templated and got.requests == 2
    assert got.bytes_fetched <= 0.10 * full.data_offset
    keys = [k for k, _, _ in book.find(_lookup(b)).keys]  # type: ignore[union-attr]
    assert keys == ["tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"]


def _lookup(lay: synth.Layout) -> str:
    t = template_of(_full(lay), lay.header, "x")
    assert t is not None
    return t.lookup


def test_a_template_from_another_uploader_is_reused():
    spec = _spec("llama")
    book = TemplateBook()
    _read(synth.layout(spec, synth.q4_k_m_like()), book, repo="alice/M-GGUF", base="org/M")
    other = synth.layout(
        spec, synth.q8_0(), metadata={"general.name": "Bob's quant of M" * 40, "general.url": "u"}
    )
    got = _read(other, book, repo="bob/M-GGUF", base="org/M")
    _same_tables(got.header, _full(other))
    assert got.templated and got.requests == 2
    assert got.header.tokenizer_from is not None and got.header.tokenizer_from.startswith("alice/")


def test_a_template_is_found_by_content_without_a_shared_base_model():
    spec = _spec("llama")
    book = TemplateBook()
    _read(synth.layout(spec, synth.q4_k_m_like()), book, repo="alice/M-GGUF")
    lay = synth.layout(spec, synth.q8_0())
    got = _read(lay, book, repo="carol/unrelated-GGUF")
    # A cold-sized first request, then the rest after the block: 2 requests, templated.
    assert got.templated and got.requests == 2
    _same_tables(got.header, _full(lay))


def test_a_lookalike_differing_only_in_its_middle_changes_no_figure_and_says_template():
    spec = _spec("llama")
    book = TemplateBook()
    _read(synth.layout(spec, synth.q4_k_m_like()), book)
    tokens = list(_full(synth.layout(spec, synth.q8_0())).metadata["tokenizer.ggml.tokens"])
    mid = len(tokens) // 2
    tokens[mid] = tokens[mid][::-1] if len(tokens[mid]) > 1 else "Z"
    assert len(tokens[mid].encode()) == len(tokens[len(tokens) // 2].encode())
    lay = synth.layout(spec, synth.q8_0(), metadata={"tokenizer.ggml.tokens": tokens})
    got = _read(lay, book)
    full = _full(lay)
    assert got.templated
    _same_tables(got.header, full)
    # No verdict, size or memory figure changes.
    mine, theirs = (
        analyse_quant(
            "a/M",
            "0" * 40,
            "M.gguf",
            lay.size,
            [AnalysedShard("M.gguf", "k", h.data_offset, h)],
            [],
        )
        for h in (got.header, full)
    )
    assert mine.profile == theirs.profile and mine.memory == theirs.memory
    assert got.header.tokenizer_template is not None  # the stored header says: a template


def test_a_lookalike_whose_length_differs_falls_back():
    spec = _spec("llama")
    book = TemplateBook()
    _read(synth.layout(spec, synth.q4_k_m_like()), book)
    tokens = list(_full(synth.layout(spec, synth.q8_0())).metadata["tokenizer.ggml.tokens"])
    tokens[len(tokens) // 2] += "xyz"
    lay = synth.layout(spec, synth.q8_0(), metadata={"tokenizer.ggml.tokens": tokens})
    got = _read(lay, book)
    assert not got.templated and got.fell_back
    assert got.header.tokenizer_template is None
    _same_tables(got.header, _full(lay))
    assert got.header.metadata["tokenizer.ggml.tokens"][len(tokens) // 2].endswith("xyz")


def test_shards_read_out_of_order():
    spec = _spec("qwen3")
    shards = synth.split_layouts(spec, synth.q8_0(), 3)
    book = TemplateBook()
    later = [
        _read(s, book, first_read=64 << 10) for s in (shards[2], shards[1])
    ]  # a crawl may see these first
    for r in later:
        assert r.requests == 1 and r.bytes_fetched <= 64 << 10
        assert "tokenizer.ggml.tokens" not in r.header.metadata
    first = _read(shards[0], book)
    full = _full(shards[0])
    _same_tables(first.header, full)
    assert first.requests <= 2
    assert first.bytes_fetched <= 1.20 * full.data_offset  # no overshoot from a shard's size


_ARCH = st.sampled_from(["llama", "qwen3", "qwen35", "gemma3"])
_RECIPE = st.sampled_from(["q8_0", "q4_k_m_like", "bf16", "ud_q3_k_xl_like"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    arch=_ARCH,
    recipe=_RECIPE,
    vocab_delta=st.sampled_from([0, 0, 0, 1, -1, 64]),
    name_len=st.integers(0, 6000),
    token_edit=st.sampled_from(["", "", "last", "first", "middle", "middle-len"]),
    size_delta=st.sampled_from([0, 0, 0, 32, -32]),
    mtp=st.booleans(),
)
def test_a_templated_read_equals_the_full_read_or_falls_back(
    arch, recipe, vocab_delta, name_len, token_edit, size_delta, mtp
):
    spec = _spec(arch, 8192)
    book = TemplateBook()
    _read(synth.layout(spec, synth.q4_k_m_like()), book)
    other_spec = replace(spec, n_vocab=spec.n_vocab + vocab_delta)
    if mtp:
        other_spec = replace(other_spec, n_nextn=1 - min(1, spec.n_nextn))
    meta: dict[str, object] = {"general.name": "m" * name_len}
    if token_edit:
        tokens = list(
            _full(synth.layout(other_spec, synth.q8_0())).metadata["tokenizer.ggml.tokens"]
        )
        i = {"last": -1, "first": 300, "middle": len(tokens) // 2, "middle-len": len(tokens) // 2}
        at = i[token_edit]
        tokens[at] = tokens[at] + "q" if token_edit != "middle" else tokens[at].upper()
        meta["tokenizer.ggml.tokens"] = tokens
    lay = synth.layout(other_spec, getattr(synth, recipe)(), metadata=meta)
    size = lay.size + size_delta
    try:
        got = read_quant_header(
            lay.read_at, file_size=size, max_header_bytes=CAP, book=book, scopes=("repo:a",)
        )
    except Exception:
        assert size_delta != 0  # only a wrong file size may make the file unreadable
        return
    full = read_header(lay.read_at, file_size=lay.size, max_header_bytes=CAP)
    if got.templated:
        assert size_delta == 0
    _same_tables(got.header, full)


def test_the_book_holds_templates_within_its_memory_budget():
    # A nightly crawl meets thousands of tokenizers: the book keeps the most recent within its
    # budget (older ones come back from the store), but remembers which scopes used which.
    book = TemplateBook(budget=1)
    a = synth.layout(_spec("llama", 32000), synth.q8_0())
    b = synth.layout(_spec("llama", 30000), synth.q8_0())
    _read(a, book, repo="a/A-GGUF")
    _read(b, book, repo="b/B-GGUF")
    assert book.find(_lookup(a)) is None  # evicted, and no store to load it from
    assert book.find(_lookup(b)) is not None
    assert book.first_read(scopes_for("a/A-GGUF", None)) is not None
    got = _read(b, book, repo="b/B-GGUF")
    assert got.templated and got.requests == 2
