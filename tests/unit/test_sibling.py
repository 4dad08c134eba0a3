"""Sibling header reads: two requests, a fraction of the bytes, or an honest fall back."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.synth as synth
from crawler.gguf.parse import GGUFHeader, read_header
from crawler.gguf.sibling import SiblingTemplate, read_sibling_header, template_from

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


def _spec(arch: str, n_vocab: int = 4096) -> synth.ModelSpec:
    return replace(synth.preset(arch, "tiny"), n_vocab=n_vocab)


def _full(lay: synth.Layout) -> GGUFHeader:
    return read_header(lay.read_at, file_size=lay.size, max_header_bytes=CAP)


def _template(lay: synth.Layout) -> SiblingTemplate:
    t = template_from(_full(lay), "first.gguf", min_span=0)
    assert t is not None
    return t


def _sibling(template: SiblingTemplate, lay: synth.Layout) -> tuple[GGUFHeader | None, Counting]:
    reader = Counting(lay)
    h = read_sibling_header(reader, template, file_size=lay.size, max_header_bytes=CAP)
    return h, reader


@pytest.mark.parametrize("arch", sorted(synth.PRESETS))
def test_sibling_read_equals_full_read_on_every_architecture(arch):
    spec = _spec(arch)
    first = synth.layout(spec, synth.q4_k_m_like())
    second = synth.layout(spec, synth.q8_0())
    header, reader = _sibling(_template(first), second)
    full = _full(second)
    assert header is not None
    assert header.tensors == full.tensors
    assert header.data_offset == full.data_offset
    assert dict(header.metadata_types) == dict(full.metadata_types)
    assert header.metadata["general.file_type"] == full.metadata["general.file_type"]
    assert header.tokenizer_from == "first.gguf"
    assert reader.reads == 2
    assert reader.bytes < full.data_offset


def test_real_size_sibling_costs_under_a_tenth_of_its_header():
    spec = replace(synth.preset("llama", "real"), n_vocab=32000)
    first = synth.layout(spec, synth.q4_k_m_like())
    second = synth.layout(spec, synth.q8_0())
    header, reader = _sibling(_template(first), second)
    assert header is not None and header.tensors == _full(second).tensors
    assert reader.reads == 2
    assert reader.bytes <= 0.10 * header.data_offset


def test_a_sibling_with_another_tokenizer_falls_back():
    first = synth.layout(_spec("qwen3"), synth.q4_k_m_like())
    other = synth.layout(_spec("qwen3", n_vocab=4000), synth.q8_0())
    header, reader = _sibling(_template(first), other)
    assert header is None
    assert reader.reads <= 2


def test_a_sibling_whose_last_tokens_differ_falls_back():
    spec = _spec("llama")
    first = synth.layout(spec, synth.q4_k_m_like())
    tokens = list(_full(first).metadata["tokenizer.ggml.tokens"])
    tokens[-1] = tokens[-1] + "-longer"
    other = synth.layout(spec, synth.q8_0(), metadata={"tokenizer.ggml.tokens": tokens})
    header, _ = _sibling(_template(first), other)
    assert header is None


def test_a_metadata_prefix_of_another_length_is_still_read_as_a_sibling():
    spec = _spec("qwen35")
    first = synth.layout(spec, synth.q4_k_m_like())
    longer = synth.layout(spec, synth.q8_0(), metadata={"general.name": "N" * 300})
    header, reader = _sibling(_template(first), longer)
    full = _full(longer)
    assert header is not None and header.tensors == full.tensors
    assert header.metadata["general.name"] == "N" * 300
    assert reader.reads == 2


def test_keys_after_the_tokenizer_may_differ():
    # quantize.imatrix.* keys follow the tokenizer in real files; only some quants carry them.
    spec = _spec("llama")
    first = synth.layout(spec, synth.q4_k_m_like())
    other = synth.layout(spec, synth.q8_0(), metadata={"quantize.imatrix.file": "imatrix.dat"})
    template = _template(first)
    assert _full(other).kv_spans["quantize.imatrix.file"][0] > template.span_start
    header, reader = _sibling(template, other)
    assert header is not None and header.tensors == _full(other).tensors
    assert header.metadata["quantize.imatrix.file"] == "imatrix.dat"
    assert reader.reads == 2


def test_a_prefix_with_other_keys_falls_back():
    spec = _spec("llama")
    first = synth.layout(spec, synth.q4_k_m_like())
    template = _template(first)
    fewer = replace(template, prefix_keys=template.prefix_keys[:-1])
    header, reader = _sibling(fewer, synth.layout(spec, synth.q8_0()))
    assert header is None
    assert reader.reads == 1


def test_unknown_file_size_falls_back_without_a_request():
    first = synth.layout(_spec("llama"), synth.q4_k_m_like())
    reader = Counting(first)
    assert (
        read_sibling_header(reader, _template(first), file_size=None, max_header_bytes=CAP) is None
    )
    assert reader.reads == 0


_ARCH = st.sampled_from(["llama", "qwen3", "qwen35", "gemma3", "deepseek2"])
_RECIPE = st.sampled_from(["q8_0", "q4_k_m_like", "bf16", "ud_q3_k_xl_like"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    arch=_ARCH,
    recipe=_RECIPE,
    vocab_delta=st.sampled_from([0, 0, 0, 1, -1, 64]),
    name_len=st.integers(0, 6000),
    last_token=st.sampled_from(["", "", "x", "yy"]),
    size_delta=st.sampled_from([0, 0, 0, 32, -32]),
)
def test_a_sibling_read_equals_the_full_read_or_falls_back(
    arch, recipe, vocab_delta, name_len, last_token, size_delta
):
    spec = _spec(arch)
    first = synth.layout(spec, synth.q4_k_m_like())
    template = _template(first)
    meta: dict[str, object] = {"general.name": "m" * name_len}
    if last_token:
        tokens = list(_full(first).metadata["tokenizer.ggml.tokens"])
        tokens[-1] += last_token
        meta["tokenizer.ggml.tokens"] = tokens
    other_spec = replace(spec, n_vocab=spec.n_vocab + vocab_delta)
    lay = synth.layout(other_spec, getattr(synth, recipe)(), metadata=meta)
    size = lay.size + size_delta
    reader = Counting(lay)
    header = read_sibling_header(reader, template, file_size=size, max_header_bytes=CAP)
    if header is None:
        return
    full = read_header(lay.read_at, file_size=lay.size, max_header_bytes=CAP)
    assert size_delta == 0
    assert header.tensors == full.tensors
    assert header.data_offset == full.data_offset
    assert list(header.metadata) == list(full.metadata)
