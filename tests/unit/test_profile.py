"""Precision profile: groups from metadata, verdicts, claims, split merging, JSON shape."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.base.errors import CorruptHeader
from crawler.gguf.parse import parse_header_bytes
from crawler.profile.build import build_profile, merge_headers
from crawler.profile.precision import tensor_group, tensor_role
from tests import synth
from tests.synth.spec import MTP

JSON_KEYS = [
    "source",
    "revision",
    "architecture",
    "quant_label",
    "file_type",
    "size_bytes",
    "header_bytes",
    "bytes_fetched",
    "requests",
    "n_tensors",
    "n_params",
    "bpw",
    "loadable_by_mainline",
    "groups",
    "mtp",
    "attention",
    "dynamic",
    "claims",
]
GROUP_KEYS = ["n_tensors", "n_params", "n_bytes", "bpw", "min_bits", "max_bits", "types"]


def _profile(arch, recipe, file_name, *, spec=None, repo_id=None, repo_files=()):
    spec = spec or synth.preset(arch)
    header = parse_header_bytes(synth.header_bytes(spec, recipe))
    return build_profile(header, file_name=file_name, repo_id=repo_id, repo_files=repo_files)


def test_roles_and_groups():
    assert tensor_role("blk.3.ffn_down_exps.weight") == "ffn_down_exps"
    assert tensor_role("blk.64.nextn.eh_proj.weight") == "nextn.eh_proj"
    assert tensor_role("blk.0.attn_q.bias") == "attn_q.bias"
    assert tensor_group("attn_qkv", 2, layer_kind="recurrent") == "linear_attn"
    assert tensor_group("attn_qkv", 2, layer_kind="attention") == "attn"
    assert tensor_group("attn_q", 2, layer_kind="mtp") == "mtp"
    assert tensor_group("ffn_gate_inp", 2, layer_kind="attention") == "router"
    assert tensor_group("ffn_up_shexp", 2, layer_kind="attention") == "ffn_shexp"
    assert tensor_group("attn_norm", 1, layer_kind="attention") == "norm"
    assert tensor_group("token_embd", 2, layer_kind="global") == "token_embd"


def test_hybrid_layers_come_from_metadata_not_names():
    p = _profile("qwen35", synth.q4_k_m_like(), "x-Q4_K_M.gguf")
    kinds = {layer.index: layer.kind for layer in p.layers}
    # tiny qwen35: 4 trunk layers, full attention every 4th, then the MTP block.
    assert kinds == {0: "recurrent", 1: "recurrent", 2: "recurrent", 3: "attention", 4: "mtp"}
    attn = {t.name for t in p.tensors if t.group == "attn"}
    assert attn and all(t.startswith("blk.3.") for t in attn)
    linear = {t.layer for t in p.tensors if t.group == "linear_attn"}
    assert linear == {0, 1, 2}
    # The architecture name is irrelevant: the same tensors under another name profile the same.
    renamed = parse_header_bytes(synth.header_bytes(synth.preset("qwen35"), synth.q4_k_m_like()))
    meta = {k.replace("qwen35.", "zz9."): v for k, v in renamed.metadata.items()}
    meta["general.architecture"] = "zz9"
    q = build_profile(replace(renamed, metadata=meta), file_name="x.gguf")
    assert {t.name: t.group for t in q.tensors} == {t.name: t.group for t in p.tensors}


def test_ud_like_file_preserves_attention_and_mtp():
    p = _profile(
        "qwen35",
        synth.ud_q3_k_xl_like(),
        "Qwen3.6-27B-MTP-UD-Q3_K_XL.gguf",
        spec=synth.preset("qwen35", "real"),
    )
    assert p.mtp.present and p.mtp.state == "present" and p.mtp.layers == (64,)
    assert p.mtp.min_bits == 8 and p.mtp.preserved
    assert p.attention_min_bits == 6 and p.attention_preserved
    assert p.dynamic and p.loadable_by_mainline
    assert p.claims == ()
    assert p.groups["ffn"].types == {"IQ3_XXS": 128, "Q3_K": 64}
    assert p.groups["mtp"].n_tensors == 15  # Qwen3.6-27B's blk.64 has 15 tensors
    assert sum(g.n_params for g in p.groups.values()) == p.n_params


def test_bad_mxfp4_attention_is_called_out():
    p = _profile("qwen35", synth.ud_bad_mxfp4_attn(), "Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf")
    assert p.attention_min_bits == 4 and p.attention_preserved is False
    assert not p.dynamic
    assert (
        "named UD/Dynamic but attention is 4-bit (below 6-bit, the precision a dynamic mix keeps"
        " attention at)"
    ) in p.claims
    assert p.file_type == "Q4_K_M"  # general.file_type says nothing about the mix


def test_declared_but_missing_mtp():
    recipe = synth.drop_mtp_tensors(synth.q4_k_m_like())
    p = _profile("qwen35", recipe, "Qwen3.6-27B-MTP-Q4_K_M.gguf")
    assert p.mtp.state == "declared_missing" and not p.mtp.present and p.mtp.layers == (4,)
    assert any("carries no nextn tensors" in c for c in p.claims)
    # llama-server 0c1e57098 refuses such a file: "tensor 'blk.64.attn_norm.weight' not found"
    # (tests/fixtures/llamacpp/launch.jsonl, the launch proof's first pass).
    assert p.loadable_by_mainline is False


def test_mtp_absent_and_sidecar():
    spec = replace(synth.preset("qwen35"), n_nextn=0)
    p = _profile("qwen35", synth.q4_k_m_like(), "Qwen3.6-MTP-Q4_K_M.gguf", spec=spec)
    assert p.mtp.state == "absent" and p.claims == ("named MTP but carries no nextn tensors",)
    files = ["Qwen3.6-MTP-Q4_K_M.gguf", "mtp-Qwen3.6-Q8_0.gguf"]
    p = _profile("qwen35", synth.q4_k_m_like(), files[0], spec=spec, repo_files=files)
    assert p.mtp.state == "sidecar" and not p.mtp.present
    assert "sidecar" in p.claims[0]


def test_mtp_downgraded_with_q8nextn_claim():
    p = _profile("glm4moe", synth.mtp_downgraded(), "GLM-4.5-Air-MTP-Q4_K_M-Q8nextn.gguf")
    assert p.mtp.present and p.mtp.min_bits == 4 and not p.mtp.preserved
    assert p.attention_preserved and p.attention_min_bits == 8
    assert "named Q8nextn but the MTP block's lowest type is 4-bit" in p.claims
    assert {"ffn_exps", "ffn_shexp", "router"} <= set(p.groups)


def test_mla_and_swa_attention_groups():
    p = _profile("deepseek2", synth.q8_0(), "ds-Q8_0.gguf")
    roles = {t.role for t in p.tensors if t.group == "attn"}
    assert {"attn_kv_a_mqa", "attn_k_b", "attn_v_b", "attn_output"} <= roles
    assert p.attention_preserved and p.attention_min_bits == 8
    g = _profile("gemma3", synth.q8_0(), "gemma-Q8_0.gguf")
    assert all(layer.kind == "attention" for layer in g.layers)  # SWA layers are attention
    assert g.claims == ()


def test_fork_and_ik_types():
    p = _profile("qwen35", synth.fork_type_252(), "Qwen3.8-27B-PXQ4.gguf")
    assert not p.loadable_by_mainline and p.unknown_types == (252,)
    # Bytes of the fork type come from the offsets (exact: the synth type is 144 B / 256 weights);
    # bits stay unknown.
    lay = synth.layout(synth.preset("qwen35"), synth.fork_type_252())
    want = sum(t.nbytes for t in lay.tensors if t.type_id == 252 and t.kind != MTP)
    ffn = p.groups["ffn"]
    assert ffn.types == {"TYPE_252": ffn.n_tensors} and ffn.n_bytes == want
    assert (
        ffn.bpw == 4.5
        and ffn.min_bits is None
        and p.sized_from_offsets == sum(t.type_id == 252 for t in lay.tensors)
    )
    assert any("252" in c for c in p.claims)
    ik = _profile("glm4moe", synth.ik_llama_mix(), "GLM-IQ4_K.gguf")
    assert not ik.loadable_by_mainline and ik.unknown_types == ()
    assert ik.attention_min_bits == 6 and ik.attention_preserved  # IQ6_K is known to be 6-bit


def test_label_contradicting_the_tensors():
    p = _profile("llama", synth.uniform("Q4_K"), "Llama-3-8B-Q8_0.gguf")
    assert any(
        c.startswith("named Q8_0 but")
        and "(100% of the weight bytes outside token_embd/output) are not what llama-quantize's"
        " Q8_0 recipe gives them"
        in c
        and "hold fewer bits" in c
        for c in p.claims
    )
    q = _profile("llama", synth.q8_0(), "Llama-3-8B-Q8_0.gguf")
    assert q.claims == ()


def test_imatrix_claim_checks_the_keys():
    p = _profile("llama", synth.q4_k_m_like(), "Llama.i1-Q4_K_M.gguf")
    assert "named i1/imatrix but the file records no quantize.imatrix.* keys" in p.claims
    spec = synth.preset("llama")
    meta = {"quantize.imatrix.file": "imatrix.dat", "quantize.imatrix.entries_count": 10}
    header = parse_header_bytes(synth.header_bytes(spec, synth.q4_k_m_like(), metadata=meta))
    assert build_profile(header, file_name="Llama.i1-Q4_K_M.gguf").claims == ()


def test_json_has_exactly_the_design_keys():
    p = _profile("glm4moe", synth.q4_k_m_like(), "GLM-Q4_K_M.gguf")
    j = p.to_json(source="s", header_bytes=5, bytes_fetched=6, requests=1)
    assert list(j) == JSON_KEYS
    assert all(list(g) == GROUP_KEYS for g in j["groups"].values())
    assert list(j["mtp"]) == ["present", "state", "layers", "min_bits", "preserved"]
    assert list(j["attention"]) == ["min_bits", "preserved"]
    full = p.to_json(include_tensors=True)
    assert list(full) == [*JSON_KEYS, "tensors"] and len(full["tensors"]) == p.n_tensors
    assert full["tensors"][0]["type"] and "group" in full["tensors"][0]


def test_merge_split_shards(tmp_path):
    spec, recipe = synth.preset("glm4moe"), synth.q4_k_m_like()
    paths = synth.write_gguf(tmp_path / "GLM-Q4_K_M.gguf", spec, recipe, split=3)
    headers = [parse_header_bytes(p.read_bytes()) for p in paths]
    merged = merge_headers(headers)
    whole = parse_header_bytes(synth.header_bytes(spec, recipe))
    assert sorted(t.name for t in merged.tensors) == sorted(t.name for t in whole.tensors)
    assert merged.data_offset == sum(h.data_offset for h in headers)
    a = build_profile(merged, file_name=paths[0].name).to_json()
    b = build_profile(whole, file_name="GLM-Q4_K_M.gguf").to_json()
    assert a["groups"] == b["groups"] and a["mtp"] == b["mtp"]
    with pytest.raises(CorruptHeader, match=r"split\.count"):
        merge_headers(headers[:2])
    with pytest.raises(CorruptHeader, match=r"split\.no"):
        merge_headers([headers[0], headers[2], headers[1]])


_HOSTILE_VALUES = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.booleans(),
    st.text(max_size=5),
    st.lists(st.integers(-3, 3), max_size=6),
    st.none(),
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "qwen35.block_count",
                "qwen35.nextn_predict_layers",
                "qwen35.full_attention_interval",
                "qwen35.attention.head_count_kv",
                "general.file_type",
                "general.architecture",
            ]
        ),
        _HOSTILE_VALUES,
    ),
    st.text(max_size=40),
)
def test_profile_never_crashes_on_odd_metadata(overrides, file_name):
    base = parse_header_bytes(synth.header_bytes(synth.preset("qwen35"), synth.q4_k_m_like()))
    meta = {**base.metadata, **{k: v for k, v in overrides.items() if v is not None}}
    p = build_profile(replace(base, metadata=meta), file_name=file_name, repo_files=[file_name])
    j = json.loads(json.dumps(p.to_json(include_tensors=True)))
    assert list(j)[: len(JSON_KEYS)] == JSON_KEYS
    assert len(p.mtp.layers) <= 4096
