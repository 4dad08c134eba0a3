"""The synthetic GGUF builder writes what it claims: readable by gguf's reader, exact offsets and
sizes, sparse, shards/parts/sidecars that hold the right tensors, recipes that place the types."""

from __future__ import annotations

import dataclasses
import re
import struct
import time
from pathlib import Path
from typing import ClassVar

import pytest
from gguf import GGUFReader

from tests.synth import (
    FORK_PXQ4,
    MAINLINE_TYPE_COUNT,
    PRESETS,
    bf16,
    deepseek2,
    drop_mtp_tensors,
    fork_type_252,
    gemma3,
    glm4moe,
    header_bytes,
    ik_llama_mix,
    layout,
    make_vocab,
    mtp_downgraded,
    mtp_graft,
    q4_k_m_like,
    q8_0,
    qwen35,
    qwen35moe,
    tensor_nbytes,
    type_id,
    ud_bad_mxfp4_attn,
    ud_q3_k_xl_like,
    uniform,
    unsloth,
    write_gguf,
    write_mmproj,
    write_mtp_sidecar,
    write_parts,
)
from tests.synth.recipe import fallback
from tests.synth.write import part_bounds, split_layouts

Q4_K, Q5_0, Q6_K, Q8_0, F16, F32 = (
    type_id(t) for t in ("Q4_K", "Q5_0", "Q6_K", "Q8_0", "F16", "F32")
)


def _pad(n: int, a: int = 32) -> int:
    return (n + a - 1) // a * a


def _field(r: GGUFReader, key: str):
    return r.fields[key].contents()


class _Walk:
    """An independent little-endian GGUF walker (no gguf package): version, KV (arrays as their
    length), tensor infos {name: (shape, type, offset)} and the end of the tensor-info section.
    Needed for type ids gguf's reader rejects (252, ik types) and fast on 10 MB vocabularies."""

    _SCALAR: ClassVar[dict[int, str]] = {
        0: "B",
        1: "b",
        2: "H",
        3: "h",
        4: "I",
        5: "i",
        6: "f",
        7: "?",
        10: "Q",
        11: "q",
    }

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 4
        assert data[:4] == b"GGUF"
        self.version, n_tensors, n_kv = self._take("I"), self._take("Q"), self._take("Q")
        self.kv = {self._string(): self._value(self._take("I")) for _ in range(n_kv)}
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._string()
            shape = tuple(self._take("Q") for _ in range(self._take("I")))
            self.tensors[name] = (shape, self._take("I"), self._take("Q"))
        self.end = self.pos

    def _take(self, fmt: str):
        (v,) = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v

    def _string(self) -> str:
        n = self._take("Q")
        self.pos += n
        return self.data[self.pos - n : self.pos].decode()

    def _value(self, t: int):
        if t == 8:
            return self._string()
        if t == 9:
            sub, n = self._take("I"), self._take("Q")
            for _ in range(n):
                self._value(sub)
            return n
        return self._take(self._SCALAR[t] if t != 12 else "d")


def _check_file(path: Path, lay) -> GGUFReader:
    r = GGUFReader(path)
    assert r.data_offset == lay.data_offset
    assert path.stat().st_size == lay.size
    assert path.stat().st_size == r.data_offset + sum(
        _pad(t.nbytes, lay.alignment) for t in lay.tensors
    )
    by_name = {t.name: t for t in r.tensors}
    assert [t.name for t in r.tensors] == [t.name for t in lay.tensors]
    for want in lay.tensors:
        got = by_name[want.name]
        assert tuple(int(x) for x in got.shape) == want.shape
        assert int(got.tensor_type) == want.type_id
        assert got.data_offset == lay.data_offset + want.offset
        assert want.offset % lay.alignment == 0
        assert int(got.n_bytes) == want.nbytes
    return r


@pytest.mark.parametrize("arch", sorted(PRESETS))
def test_tiny_presets_are_readable_exact_sparse_and_fast(arch: str, tmp_path: Path) -> None:
    spec = PRESETS[arch]("tiny")
    start = time.perf_counter()
    (path,) = write_gguf(tmp_path / f"{arch}.gguf", spec, q4_k_m_like())
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0
    lay = layout(spec, q4_k_m_like())
    r = _check_file(path, lay)
    assert _field(r, "general.architecture") == arch
    assert _field(r, f"{arch}.block_count") == spec.block_count
    assert len(_field(r, "tokenizer.ggml.tokens")) == spec.n_vocab
    assert path.read_bytes()[: lay.data_offset] == header_bytes(spec, q4_k_m_like())
    # Sparse: allocated blocks cover the header, not the data section.
    assert path.stat().st_blocks * 512 <= lay.data_offset + 64 * 1024


def test_qwen35_real_matches_qwen36_27b_layout(tmp_path: Path) -> None:
    spec = qwen35("real")
    start = time.perf_counter()
    (path,) = write_gguf(tmp_path / "Qwen3.6-27B-Q4_K_M.gguf", spec, q4_k_m_like())
    assert time.perf_counter() - start < 5.0
    lay = layout(spec, q4_k_m_like())
    size = path.stat().st_size
    assert size == lay.size and 15 * 2**30 < size < 17 * 2**30
    assert path.stat().st_blocks * 512 < 16 * 2**20  # sparse
    with path.open("rb") as f:
        w = _Walk(f.read(lay.data_offset))
    assert _pad(w.end) == lay.data_offset
    assert 8_000_000 < lay.data_offset < 12_000_000  # ~10 MB header, as on the Hub
    assert w.kv["qwen35.block_count"] == 65
    assert w.kv["qwen35.nextn_predict_layers"] == 1
    assert w.kv["qwen35.full_attention_interval"] == 4
    assert w.kv["tokenizer.ggml.tokens"] == 248320
    assert len(w.tensors) == 866
    for t in lay.tensors:
        assert w.tensors[t.name] == (t.shape, t.type_id, t.offset)
    names = list(w.tensors)
    blk64 = [n for n in names if n.startswith("blk.64.")]
    assert len(blk64) == 15
    assert sum(".nextn." in n for n in blk64) == 4
    attn_layers = sorted({int(n.split(".")[1]) for n in names if n.endswith("attn_q.weight")})
    assert attn_layers == [*range(3, 64, 4), 64]
    shapes = {n: v[0] for n, v in w.tensors.items()}
    assert shapes["blk.3.attn_q.weight"] == (5120, 24 * 256 * 2)
    assert shapes["blk.3.attn_k.weight"] == (5120, 4 * 256)
    assert shapes["blk.0.attn_qkv.weight"] == (5120, 2 * 16 * 128 + 48 * 128)
    assert shapes["blk.0.ssm_conv1d.weight"] == (4, 10240)
    assert shapes["blk.64.nextn.eh_proj.weight"] == (10240, 5120)


def test_qwen35moe_real_matches_the_real_q8_0_tensor_counts() -> None:
    # unsloth Qwen3.6-35B-A3B Q8_0 (MTP): 753 tensors = q8_0 443 + f32 308 + bf16 2, 35.19 GiB.
    lay = layout(qwen35moe("real"), q8_0())
    assert len(lay.tensors) == 753
    assert sum(t.type_id == Q8_0 for t in lay.tensors) == 443
    assert 35.1 < lay.size / 2**30 < 35.3
    names = {t.name for t in lay.tensors}
    assert {"blk.40.nextn.eh_proj.weight", "blk.40.ffn_gate_inp_shexp.weight"} <= names
    assert "blk.0.ffn_gate.weight" not in names  # MoE only, no dense FFN


def test_glm_mtp_block_omits_embed_and_head_and_gemma_ties_output() -> None:
    names = {t.name for t in layout(glm4moe(), q8_0()).tensors}
    assert "blk.3.nextn.eh_proj.weight" in names
    assert "blk.3.nextn.embed_tokens.weight" not in names
    assert "blk.3.nextn.shared_head_head.weight" not in names
    assert "blk.3.ffn_down_exps.weight" in names and "blk.0.ffn_down.weight" in names
    assert "blk.1.exp_probs_b.bias" in names and "blk.1.ffn_gate_inp.weight" in names
    full = dataclasses.replace(glm4moe(), mtp_full_head=True)
    assert "blk.3.nextn.shared_head_head.weight" in {t.name for t in layout(full, q8_0()).tensors}
    gemma = {t.name for t in layout(gemma3(), q8_0()).tensors}
    assert "output.weight" not in gemma and "blk.5.post_ffw_norm.weight" in gemma


def test_deepseek2_mla_tensors_and_block_fallback() -> None:
    lay = layout(deepseek2(), q4_k_m_like())
    t = {x.name: x for x in lay.tensors}
    assert t["blk.0.attn_kv_a_mqa.weight"].shape == (256, 128 + 32)
    assert t["blk.0.attn_k_b.weight"].shape == (64, 128, 4)
    assert t["blk.0.attn_v_b.weight"].shape == (128, 64, 4)
    assert t["blk.0.attn_k_b.weight"].type_id == Q5_0  # Q4_K on ne0=64 falls back (llama-quant)
    assert t["blk.0.attn_kv_a_norm.weight"].type_id == F32
    assert t["blk.1.ffn_gate_inp.weight"].type_id == F32
    assert "blk.0.attn_kv_b.weight" not in t
    real = {x.name: x for x in layout(deepseek2("real"), q4_k_m_like()).tensors}
    # ffn_down_exps rows are n_ff_exp = 1408 long: Q4_K -> Q5_0, and on "more bits" layers
    # Q6_K -> Q8_0; ffn_up_exps rows are n_embd = 2048 long and keep Q4_K.
    assert real["blk.4.ffn_down_exps.weight"].type_id == Q5_0
    assert real["blk.1.ffn_down_exps.weight"].type_id == Q8_0
    assert real["blk.4.ffn_up_exps.weight"].type_id == Q4_K
    assert fallback(Q6_K, 1408) == Q8_0 and fallback(Q4_K, 48) == F16


def test_recipes_place_types_by_role() -> None:
    spec = qwen35()
    mtp_blk = f"blk.{spec.n_layer}."

    def types(recipe):
        return {t.name: t.type_id for t in layout(spec, recipe).tensors}

    ud = types(ud_q3_k_xl_like())
    assert all(
        v == Q8_0
        for k, v in ud.items()
        if k.startswith(mtp_blk) and k.endswith("weight") and not k.endswith("norm.weight")
    )
    assert ud["blk.3.attn_k.weight"] == Q8_0 and ud["blk.3.attn_q.weight"] == Q6_K
    assert ud["blk.0.ffn_up.weight"] == type_id("IQ3_XXS")
    down = types(mtp_downgraded())
    assert down[f"{mtp_blk}nextn.eh_proj.weight"] == Q4_K
    assert down[f"{mtp_blk}attn_q.weight"] == Q4_K
    assert down["blk.3.attn_v.weight"] == Q8_0
    bad = types(ud_bad_mxfp4_attn())
    assert bad["blk.3.attn_q.weight"] == type_id("MXFP4")
    km = types(q4_k_m_like())
    assert km["output.weight"] == Q6_K and km["token_embd.weight"] == Q4_K
    assert {km[f"blk.{i}.ffn_down.weight"] for i in range(5)} == {Q4_K, Q6_K}
    assert all(v in (F32, type_id("BF16")) for v in types(bf16()).values())
    assert types(uniform("Q8_0"))["blk.0.ssm_conv1d.weight"] == F32


def test_mtp_graft_takes_head_types_from_the_other_recipe() -> None:
    spec = qwen35()
    types = {t.name: t.type_id for t in layout(spec, mtp_graft(q4_k_m_like(), q8_0())).tensors}
    assert types[f"blk.{spec.n_layer}.nextn.eh_proj.weight"] == Q8_0
    assert types[f"blk.{spec.n_layer}.attn_q.weight"] == Q8_0
    assert types["blk.3.attn_q.weight"] == Q4_K


def test_lineage_metadata_is_written(tmp_path: Path) -> None:
    meta = unsloth("Qwen/Qwen3.6-27B", size_label="27B")
    (path,) = write_gguf(tmp_path / "m.gguf", qwen35(), ud_q3_k_xl_like(), metadata=meta)
    r = GGUFReader(path)
    assert _field(r, "general.quantized_by") == "Unsloth"
    assert _field(r, "general.base_model.0.organization") == "Qwen"
    assert _field(r, "general.base_model.0.repo_url") == "https://huggingface.co/Qwen/Qwen3.6-27B"
    assert _field(r, "quantize.imatrix.file").endswith("imatrix_unsloth.gguf")
    assert _field(r, "general.file_type") == 12


def test_fork_and_ik_types_are_laid_out(tmp_path: Path) -> None:
    for recipe, wanted in ((fork_type_252(), {FORK_PXQ4}), (ik_llama_mix(), {139, 141, 145})):
        lay = layout(glm4moe(), recipe)
        used = {t.type_id for t in lay.tensors}
        assert wanted <= used
        assert max(used) >= MAINLINE_TYPE_COUNT
        (path,) = write_gguf(tmp_path / f"{recipe.label}.gguf", glm4moe(), recipe)
        data = path.read_bytes()
        w = _Walk(data)
        assert w.version == 3 and _pad(w.end) == lay.data_offset == len(lay.header)
        for t in lay.tensors:
            assert w.tensors[t.name] == (t.shape, t.type_id, t.offset)
        assert len(data) == lay.size


def test_drop_mtp_keeps_the_declaration_only() -> None:
    spec = qwen35()
    lay = layout(spec, drop_mtp_tensors(q8_0()))
    assert not any(t.name.startswith(f"blk.{spec.n_layer}.") for t in lay.tensors)
    assert b"qwen35.nextn_predict_layers" in lay.header


@pytest.mark.parametrize("first_empty", [False, True])
def test_split_shards_hold_every_tensor_once(tmp_path: Path, first_empty: bool) -> None:
    spec = qwen35()
    whole = layout(spec, q4_k_m_like())
    paths = write_gguf(
        tmp_path / "M-Q4_K_M.gguf", spec, q4_k_m_like(), split=3,
        metadata_only_first_shard=first_empty,
    )  # fmt: skip
    assert [p.name for p in paths] == [f"M-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    seen: list[str] = []
    for i, p in enumerate(paths):
        r = GGUFReader(p)
        assert _field(r, "split.no") == i and _field(r, "split.count") == 3
        assert _field(r, "split.tensors.count") == len(whole.tensors)
        if i == 0:
            assert _field(r, "general.architecture") == "qwen35"
        else:
            assert {k for k in r.fields if not k.startswith("GGUF.")} == {
                "split.no",
                "split.count",
                "split.tensors.count",
            }
        offset = 0
        for t in r.tensors:
            assert t.data_offset == r.data_offset + offset
            offset += _pad(int(t.n_bytes))
        assert p.stat().st_size == r.data_offset + offset
        seen += [t.name for t in r.tensors]
    assert seen == [t.name for t in whole.tensors]
    assert (len(GGUFReader(paths[0]).tensors) == 0) == first_empty
    # Cuts ignore block boundaries: some block has tensors in two shards.
    shard_of = {n: i for i, p in enumerate(paths) for n in (t.name for t in GGUFReader(p).tensors)}
    blocks: dict[str, set[int]] = {}
    for n, i in shard_of.items():
        if m := re.match(r"blk\.(\d+)\.", n):
            blocks.setdefault(m.group(1), set()).add(i)
    assert any(len(s) > 1 for s in blocks.values())


def test_parts_concatenate_to_the_single_file(tmp_path: Path) -> None:
    spec = glm4moe()
    (single,) = write_gguf(tmp_path / "M.Q8_0.gguf", spec, q8_0())
    parts = write_parts(tmp_path / "P.Q8_0.gguf", spec, q8_0(), parts=2)
    assert [p.name for p in parts] == ["P.Q8_0.gguf.part1of2", "P.Q8_0.gguf.part2of2"]
    assert b"".join(p.read_bytes() for p in parts) == single.read_bytes()
    assert parts[0].read_bytes()[:4] == b"GGUF" and parts[1].read_bytes()[:4] != b"GGUF"


def test_in_memory_layouts_match_the_files(tmp_path: Path) -> None:
    spec = glm4moe()
    lay = layout(spec, q8_0())
    (single,) = write_gguf(tmp_path / "M.gguf", spec, q8_0())
    data = single.read_bytes()
    for off, n in ((0, 10), (lay.data_offset - 5, 100), (lay.size - 7, 50), (lay.size, 4)):
        assert lay.read_at(off, n) == data[off : off + n]
    shards = split_layouts(spec, q8_0(), 2)
    paths = write_gguf(tmp_path / "S.gguf", spec, q8_0(), split=2)
    assert [s.size for s in shards] == [p.stat().st_size for p in paths]
    assert part_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]


def test_mtp_sidecar_holds_mtp_block_and_shared_embeddings(tmp_path: Path) -> None:
    spec = qwen35()
    path = write_mtp_sidecar(tmp_path / "mtp-M.gguf", spec, q8_0())
    r = GGUFReader(path)
    names = {t.name for t in r.tensors}
    assert {"token_embd.weight", "output_norm.weight", "output.weight"} <= names
    assert all(
        n.startswith(f"blk.{spec.n_layer}.")
        for n in names - {"token_embd.weight", "output_norm.weight", "output.weight"}
    )
    assert f"blk.{spec.n_layer}.nextn.eh_proj.weight" in names
    assert _field(r, "qwen35.nextn_predict_layers") == 1


def test_alignment_big_endian_and_v2_variants(tmp_path: Path) -> None:
    spec = qwen35()
    (p64,) = write_gguf(tmp_path / "a64.gguf", spec, q8_0(), alignment=64)
    r = _check_file(p64, layout(spec, q8_0(), alignment=64))
    assert _field(r, "general.alignment") == 64 and r.data_offset % 64 == 0
    (pbe,) = write_gguf(tmp_path / "be.gguf", spec, q8_0(), big_endian=True)
    rbe = GGUFReader(pbe)
    assert rbe.endianess.name == "BIG"
    assert [t.name for t in rbe.tensors] == [t.name for t in layout(spec, q8_0()).tensors]
    (pv2,) = write_gguf(tmp_path / "v2.gguf", spec, q8_0(), version=2)
    assert struct.unpack_from("<I", pv2.read_bytes(), 4)[0] == 2
    assert len(GGUFReader(pv2).tensors) == len(layout(spec, q8_0()).tensors)


def test_per_layer_kv_head_array(tmp_path: Path) -> None:
    spec = dataclasses.replace(gemma3(), kv_heads_as_array=True)
    (path,) = write_gguf(tmp_path / "g.gguf", spec, q8_0())
    assert list(_field(GGUFReader(path), "gemma3.attention.head_count_kv")) == [2] * 6


def test_mmproj_is_a_clip_file(tmp_path: Path) -> None:
    r = GGUFReader(write_mmproj(tmp_path / "mmproj-F16.gguf"))
    assert _field(r, "general.architecture") == "clip"
    assert any(t.name == "mm.input_projection.weight" for t in r.tensors)


def test_vocab_is_byte_level_bpe() -> None:
    v = make_vocab(2048)
    assert len(v.tokens) == len(set(v.tokens)) == 2048
    assert "Ċ" in v.tokens  # byte-level "\n": llama.cpp looks up the newline token
    known = set(v.tokens)
    for m in v.merges:
        left, right = m.split(" ")
        assert left in known and right in known and left + right in known
    assert v.token_types[v.eos_id] == 3 and v.tokens[v.eos_id] == "<|endoftext|>"
    assert make_vocab(2048) is v


def test_tensor_nbytes_uses_block_sizes() -> None:
    assert tensor_nbytes((256, 4), Q4_K) == 4 * 144
    assert tensor_nbytes((64, 2, 3), Q8_0) == 2 * 34 * 2 * 3
    with pytest.raises(ValueError):
        tensor_nbytes((100, 1), Q4_K)


def test_bulk_array_packing_is_gguf_pys_own_bytes() -> None:
    from gguf.constants import GGUFEndian, GGUFValueType
    from gguf.gguf_writer import GGUFWriter

    from tests.synth.write import _pack_array

    arrays = {
        "str": [f"tok{i}" if i % 7 else f"Ġé{i}✓" for i in range(5000)],
        "int": [(-1) ** i * i * 401 for i in range(5000)],
        "float": [i / 3.0 - 700.123456789 for i in range(5000)],
    }
    for endian in (GGUFEndian.LITTLE, GGUFEndian.BIG):
        writer = GGUFWriter(None, "llama", endianess=endian)
        for name, val in arrays.items():
            for add_vtype in (True, False):
                want = writer._pack_val(val, GGUFValueType.ARRAY, add_vtype)
                assert _pack_array(val, add_vtype, None, endian) == want, (name, endian)
    # What gguf-py refuses, infers otherwise or is told: left to it.
    for val in ([2**31] * 5000, ["a", 1] * 2500, [1e39] * 5000, [True] * 5000):
        assert _pack_array(val, True, None, GGUFEndian.LITTLE) is None
    assert _pack_array(["a"] * 5000, True, GGUFValueType.STRING, GGUFEndian.LITTLE) is None
