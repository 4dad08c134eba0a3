"""GGUF header parser: parity with gguf.GGUFReader, fetch policy, bounds, fuzzing."""

from __future__ import annotations

import struct
import time
from dataclasses import replace

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGUFReader, GGUFValueType, GGUFWriter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.base.errors import CorruptHeader, GGUFError, HeaderTooLarge, NotGGUF
from crawler.base.errors import UnsupportedGGUFVersion as BadVersion
from crawler.gguf.ggml import GGML_TYPES, GGMLType, is_mainline, tensor_nbytes, type_info, type_name
from crawler.gguf.parse import GGUFArray, parse_header_bytes, read_header
from tests import synth

ARCHS = ["llama", "qwen3", "qwen3moe", "qwen35", "glm4moe", "deepseek2", "gemma3"]


class Counting:
    """A ``read_at`` over bytes that records every call (offset, length)."""

    def __init__(self, data: bytes, size: int | None = None) -> None:
        self.data = data
        self.size = size if size is not None else len(data)
        self.calls: list[tuple[int, int]] = []

    def __call__(self, offset: int, length: int) -> bytes:
        self.calls.append((offset, length))
        end = min(offset + length, self.size)
        chunk = self.data[offset:end]
        return chunk + b"\0" * (end - offset - len(chunk))  # sparse data section

    @property
    def fetched(self) -> int:
        return sum(max(0, min(o + n, self.size) - o) for o, n in self.calls)


def _plain(value):
    if isinstance(value, GGUFArray):
        return value.to_list()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _reader_value(field):
    """A GGUFReader field as a Python value (strings decoded, arrays as lists)."""
    types = field.types
    if types[0] == GGUFValueType.ARRAY:
        if len(types) > 2:  # nested: the reader exposes no easy decode; skip
            return None
        if types[1] == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    if types[0] == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    return field.parts[field.data[0]].tolist()[0]


# --------------------------------------------------------------------------- parity


@pytest.mark.parametrize("arch", ARCHS)
def test_parity_with_gguf_reader(tmp_path, arch):
    path = synth.write_gguf(tmp_path / f"{arch}.gguf", synth.preset(arch), synth.q4_k_m_like())[0]
    data = path.read_bytes()
    ours = read_header(Counting(data), file_size=len(data))
    ref = GGUFReader(path)
    assert len(ours.tensors) == len(ref.tensors)
    for mine, theirs in zip(ours.tensors, ref.tensors, strict=True):
        assert mine.name == theirs.name
        assert mine.shape == tuple(int(d) for d in theirs.shape)
        assert mine.type_id == int(theirs.tensor_type)
        assert ours.data_offset + mine.offset == theirs.data_offset
        assert mine.n_bytes == int(theirs.n_bytes)
    for key, field in ref.fields.items():
        if key.startswith("GGUF."):
            continue
        expected = _reader_value(field)
        if expected is None:
            continue
        got = _plain(ours.metadata[key])
        floats = isinstance(expected, list) and expected and isinstance(expected[0], float)
        if isinstance(expected, float) or floats:
            assert got == pytest.approx(expected)
        else:
            assert got == expected, key
    assert set(ours.metadata) == {k for k in ref.fields if not k.startswith("GGUF.")}


def test_every_value_type_and_nested_arrays(tmp_path):
    path = tmp_path / "kv.gguf"
    w = GGUFWriter(path, "llama")
    w.add_uint8("u8", 200)
    w.add_int8("i8", -5)
    w.add_uint16("u16", 60000)
    w.add_int16("i16", -30000)
    w.add_uint32("u32", 4_000_000_000)
    w.add_int32("i32", -2_000_000_000)
    w.add_float32("f32", 1.5)
    w.add_uint64("u64", 2**63 + 5)
    w.add_int64("i64", -(2**62))
    w.add_float64("f64", 2.25)
    w.add_bool("b", True)
    w.add_string("s", "héllo \u202e")
    w.add_array("nested", [[1, 2], [3, 4, 5]])
    w.add_array("strs", ["a", "bc", ""])
    w.add_array("big", list(range(5000)))
    w.add_custom_alignment(64)
    w.add_tensor("t", np.zeros((3, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    h = parse_header_bytes(path.read_bytes())
    m = h.metadata
    assert (m["u8"], m["i8"], m["u16"], m["i16"]) == (200, -5, 60000, -30000)
    assert (m["u32"], m["i32"], m["u64"], m["i64"]) == (
        4_000_000_000,
        -2_000_000_000,
        2**63 + 5,
        -(2**62),
    )
    assert (m["f32"], m["f64"], m["b"], m["s"]) == (1.5, 2.25, True, "héllo \u202e")
    assert m["nested"] == [[1, 2], [3, 4, 5]]
    assert m["strs"] == ["a", "bc", ""]
    assert isinstance(m["big"], GGUFArray) and len(m["big"]) == 5000 and m["big"][4999] == 4999
    assert m["big"] == list(range(5000))
    assert h.alignment == 64 and h.data_offset % 64 == 0
    assert h.tensors[0].shape == (64, 3) and h.tensors[0].type_id == 1
    assert h.data_offset == GGUFReader(path).tensors[0].data_offset


def test_version_2_parses_and_version_1_does_not():
    spec = synth.preset("llama")
    h = parse_header_bytes(synth.header_bytes(spec, synth.q8_0(), version=2))
    assert h.version == 2
    data = bytearray(synth.header_bytes(spec, synth.q8_0()))
    data[4:8] = struct.pack("<I", 1)
    with pytest.raises(BadVersion):
        parse_header_bytes(bytes(data))
    data[4:8] = struct.pack("<I", 7)
    with pytest.raises(BadVersion, match="version 7"):
        parse_header_bytes(bytes(data))


def test_big_endian_is_a_clear_error():
    data = synth.header_bytes(synth.preset("llama"), synth.q8_0(), big_endian=True)
    with pytest.raises(NotGGUF, match="big-endian"):
        parse_header_bytes(data)


def test_not_gguf():
    with pytest.raises(NotGGUF, match="magic"):
        parse_header_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(CorruptHeader):
        parse_header_bytes(b"GG")


# --------------------------------------------------------------------------- fetch policy


@pytest.fixture(scope="module")
def qwen35_real():
    lay = synth.layout(synth.preset("qwen35", "real"), synth.ud_q3_k_xl_like())
    return lay


def test_cold_read_of_a_248k_vocab_header_takes_two_requests(qwen35_real):
    lay = qwen35_real
    reader = Counting(lay.header, lay.size)
    h = read_header(reader, file_size=lay.size)
    assert h.data_offset == lay.data_offset
    assert len(h.metadata["tokenizer.ggml.tokens"]) == 248320
    assert len(reader.calls) <= 2
    # A vocabulary as flat as the synthetic one pays the extrapolation margin (real ones do not:
    # test_a_real_profile_vocabulary_is_read_in_two_requests).
    assert reader.fetched <= 1.20 * lay.data_offset
    # Sequential reads, each continuing where the last ended.
    assert [o for o, _ in reader.calls] == [0, *(o + n for o, n in reader.calls[:-1])]


@pytest.mark.parametrize("arch", ["llama", "qwen3", "qwen35", "gemma3"])
def test_a_real_profile_vocabulary_is_read_in_two_requests(arch):
    # Token lengths as in the published Qwen2 vocabulary (short first, CJK late): the first
    # 512 KiB see only the short tokens, and the second request must still reach the end.
    spec = synth.preset(arch, "real")
    lay = synth.layout(spec, synth.q8_0(), metadata=synth.real_profile_tokenizer(spec.n_vocab))
    reader = Counting(lay.header, lay.size)
    h = read_header(reader, file_size=lay.size)
    assert h.data_offset == lay.data_offset
    assert len(reader.calls) == 2
    assert reader.fetched <= 1.05 * lay.data_offset


def test_size_hint_from_a_sibling_gives_one_request(qwen35_real):
    lay = qwen35_real
    sibling = synth.layout(synth.preset("qwen35", "real"), synth.q4_k_m_like())
    reader = Counting(lay.header, lay.size)
    read_header(reader, file_size=lay.size, size_hint=sibling.data_offset)
    assert len(reader.calls) == 1
    assert reader.fetched <= 1.05 * lay.data_offset


def test_a_short_hint_costs_requests_not_errors():
    lay = synth.layout(synth.preset("llama"), synth.q8_0())
    reader = Counting(lay.header, lay.size)
    h = read_header(reader, file_size=lay.size, size_hint=100)
    assert h.data_offset == lay.data_offset and len(reader.calls) >= 2


def test_header_too_large_for_the_cap(qwen35_real):
    reader = Counting(qwen35_real.header, qwen35_real.size)
    with pytest.raises(HeaderTooLarge):
        read_header(reader, max_header_bytes=1 << 20)
    # Memory stays bounded by the cap: nothing past it was asked for.
    assert max(o + n for o, n in reader.calls) <= 1 << 20


# --------------------------------------------------------------------------- bounds


def _tiny_header(**kw) -> bytes:
    return synth.header_bytes(synth.preset("llama"), synth.q8_0(), **kw)


def _raw(n_tensors: int, n_kv: int, body: bytes = b"") -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + body


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def _tensor(name: str, dims: list[int], type_id: int, offset: int) -> bytes:
    return _s(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, type_id, offset)


def test_truncated_header_is_corrupt():
    data = _tiny_header()
    for cut in (10, 30, len(data) // 2, len(data) - 40):
        with pytest.raises(CorruptHeader, match=r"past the end|more than the file"):
            read_header(Counting(data[:cut]), file_size=cut)
        with pytest.raises(CorruptHeader, match="past the end"):
            read_header(Counting(data[:cut]))  # size unknown: found at the short read


def test_absurd_counts_fail_fast():
    t0 = time.perf_counter()
    with pytest.raises(CorruptHeader):
        read_header(Counting(_raw(2**40, 0)), file_size=1000)
    with pytest.raises(HeaderTooLarge):
        read_header(Counting(_raw(0, 2**60)))
    array = _s("k") + struct.pack("<IIQ", GGUFValueType.ARRAY, GGUFValueType.UINT64, 2**61)
    with pytest.raises(HeaderTooLarge):
        read_header(Counting(_raw(0, 1, array)))
    with pytest.raises(CorruptHeader):
        read_header(Counting(_raw(0, 1, array)), file_size=10_000)
    long_string = _s("k") + struct.pack("<IQ", GGUFValueType.STRING, 2**62)
    with pytest.raises(HeaderTooLarge):
        read_header(Counting(_raw(0, 1, long_string)))
    assert time.perf_counter() - t0 < 1


@pytest.mark.parametrize(
    ("body", "n_tensors", "n_kv", "match"),
    [
        (_tensor("t", [1, 2, 3, 4, 5], 0, 0), 1, 0, "dimensions"),
        (_tensor("t", [2**40, 2**40], 0, 0), 1, 0, "overflows"),
        (_tensor("t", [32], 0, 0) + _tensor("t", [32], 0, 128), 2, 0, "duplicate tensor"),
        (_tensor("t", [32], 0, 7), 1, 0, "not aligned"),
        (_s("a") + struct.pack("<IB", 0, 1) + _s("a") + struct.pack("<IB", 0, 1), 0, 2, "dup"),
        (_s("general.alignment") + struct.pack("<II", 4, 48), 0, 1, "power of two"),
        (_s("k") + struct.pack("<I", 99), 0, 1, "unknown value type"),
        (_s("k") + struct.pack("<IIQ", 9, 99, 1), 0, 1, "unknown item type"),
    ],
)
def test_impossible_values_are_corrupt(body, n_tensors, n_kv, match):
    data = _raw(n_tensors, n_kv, body) + b"\0" * 64
    with pytest.raises(CorruptHeader, match=match):
        parse_header_bytes(data)


def test_tensor_past_end_of_file_is_corrupt():
    data = _raw(1, 0, _tensor("t", [1024], 0, 0))
    with pytest.raises(CorruptHeader, match="past the end of the file"):
        read_header(Counting(data + b"\0" * 100), file_size=len(data) + 100)


def test_deep_nesting_is_refused():
    value = struct.pack("<IQ", GGUFValueType.ARRAY, 1) * 20 + struct.pack("<IQ", 4, 0)
    data = _raw(0, 1, _s("k") + struct.pack("<I", GGUFValueType.ARRAY) + value)
    with pytest.raises(CorruptHeader, match="nests"):
        parse_header_bytes(data)


def test_unknown_type_ids_are_recorded_raw(tmp_path):
    spec = synth.preset("qwen35")
    h = parse_header_bytes(synth.header_bytes(spec, synth.fork_type_252()))
    fork = [t for t in h.tensors if t.type_id == 252]
    # Without the file size the last fork tensor has no end; the others end at the next offset.
    last = max(h.tensors, key=lambda t: t.offset)
    assert fork and all(t.n_bytes == 144 * t.n_elements // 256 for t in fork if t is not last)
    assert all(not t.size_from_type for t in fork)
    ik = parse_header_bytes(synth.header_bytes(spec, synth.ik_llama_mix()))
    assert {141, 145} & {t.type_id for t in ik.tensors}


# --------------------------------------------------------------------------- fuzzing

_SEED = _tiny_header(metadata={"general.name": "fuzz"})


def _bounded_parse(data: bytes) -> None:
    reader = Counting(data)
    t0 = time.perf_counter()
    try:
        h = read_header(reader, max_header_bytes=1 << 20, file_size=len(data))
        assert h.data_offset <= len(data) + h.alignment
    except GGUFError:
        pass
    assert time.perf_counter() - t0 < 2
    assert max(o + n for o, n in reader.calls) <= 1 << 20


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_mutated_headers_fail_cleanly(data):
    buf = bytearray(_SEED)
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(buf) - 1))
        width = data.draw(st.sampled_from([1, 4, 8]))
        value = data.draw(st.integers(0, 2 ** (8 * width) - 1))
        buf[i : i + width] = value.to_bytes(width, "little")[: len(buf) - i]
    _bounded_parse(bytes(buf))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(_SEED) - 1))
def test_fuzz_truncated_headers_fail_cleanly(cut):
    with pytest.raises(GGUFError):
        read_header(Counting(_SEED[:cut]), file_size=cut)


# --------------------------------------------------------------------------- ggml table


def test_ggml_table_matches_gguf_quant_sizes():
    for t, (block, size) in GGML_QUANT_SIZES.items():
        info = GGML_TYPES[int(t)]
        assert (info.name, info.block_size, info.type_size) == (t.name, block, size)
        assert info.mainline
    assert type_info(GGMLType.Q6_K).bpw == 6.5625
    assert type_info(GGMLType.MXFP4).bits == 4 and type_info(GGMLType.Q8_0).bits == 8


def test_ik_and_unknown_types():
    assert type_name(141) == "IQ6_K" and not is_mainline(141) and type_info(141).bits == 6
    assert type_name(252) == "TYPE_252" and type_info(252) is None and not is_mainline(252)
    assert tensor_nbytes((256, 4), 252) is None
    assert tensor_nbytes((256, 4), GGMLType.Q4_K) == 4 * 144
    assert not type_info(GGMLType.I32).is_weight


def test_header_helpers():
    h = parse_header_bytes(
        synth.header_bytes(replace(synth.preset("qwen35"), n_nextn=1), synth.q8_0())
    )
    assert h.architecture == "qwen35"
    assert h.arch_value("nextn_predict_layers") == 1
    assert h.header_bytes == h.data_offset
    assert h.n_params == sum(t.n_elements for t in h.tensors)


def _growing_vocab_header(n_vocab: int) -> bytes:
    """A BPE header whose tokens get longer with rank, as real vocabularies do (the prefix the
    first read sees is shorter than the average)."""
    tokens = [chr(0x21 + i % 90) for i in range(256)]
    letters = "abcdefghijklmnopqrstuvwxyz\u0120"
    for i in range(n_vocab - 256):
        length = 2 + 18 * i // n_vocab
        tokens.append("".join(letters[(i * 7 + k * 3) % 27] for k in range(length)))
    merges = [t[: len(t) // 2] + " " + t[len(t) // 2 :] for t in tokens[256:]]
    meta = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [1] * n_vocab,
        "tokenizer.ggml.merges": merges,
        "tokenizer.chat_template": "{{ messages }}" * 500,
    }
    return synth.header_bytes(synth.preset("llama"), synth.q8_0(), metadata=meta)


@pytest.mark.parametrize("n_vocab", [32000, 150000])
def test_vocab_growing_with_rank_stays_within_budget(n_vocab):
    data = _growing_vocab_header(n_vocab)
    reader = Counting(data, len(data) + (1 << 30))
    h = read_header(reader)
    assert h.data_offset == len(data)
    # Tokens ten times longer at the end than at the start (steeper than any real vocabulary):
    # past the extrapolation margin, so a third request may follow, never a fourth.
    assert len(reader.calls) <= 3
    assert reader.fetched <= 1.20 * len(data)
