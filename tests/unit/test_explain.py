"""explain_quant's sentences (crawler.profile.explain): each verdict of a real profile, said in
words."""

from __future__ import annotations

from crawler.gguf.parse import parse_header_bytes
from crawler.profile.build import build_profile
from crawler.profile.explain import explain_profile
from tests import synth


def _profile(arch, recipe, file_name):
    header = parse_header_bytes(synth.header_bytes(synth.preset(arch), recipe))
    return build_profile(header, file_name=file_name)


def test_a_downgraded_mtp_head_and_preserved_attention():
    p = _profile("glm4moe", synth.mtp_downgraded(), "GLM-4.5-Air-MTP-Q4_K_M-Q8nextn.gguf")
    text = explain_profile(p, source="owner/repo/GLM.gguf")
    lines = text.splitlines()
    assert lines[0].startswith(f"owner/repo/GLM.gguf labelled {p.quant_label} is a glm4moe with ")
    assert f"{p.n_params:,} parameters in {p.n_tensors} tensors" in lines[0]
    layers = ", ".join(map(str, p.mtp.layers))
    assert f"MTP (multi-token prediction) head in layer(s) {layers}, lowest 4 bits: below 6" in text
    assert "quants search does not draft with it" in text
    assert "Attention is kept at 8 bits or more" in text
    assert "routed experts" in text and "norms" not in text
    # the name-vs-content contradiction, word for word
    assert "named Q8nextn but the MTP block's lowest type is 4-bit" in text


def test_a_preserved_head_a_dynamic_quant_and_low_attention():
    good = explain_profile(_profile("qwen35", synth.ud_q3_k_xl_like(), "Q-UD-Q3_K_XL.gguf"))
    assert ": preserved, usable for drafting (llama-server --spec-type draft-mtp)." in good
    assert "It is a dynamic quant" in good
    low = _profile("qwen35", synth.ud_bad_mxfp4_attn(), "Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf")
    assert low.attention_preserved is False
    assert (
        f"Some attention matrices are at {low.attention_min_bits} bits, below the 6 bits"
        in explain_profile(low)
    )


def test_files_mainline_cannot_load_say_why():
    fork = explain_profile(_profile("qwen35", synth.fork_type_252(), "Qwen3.8-27B-PXQ4.gguf"))
    assert "CANNOT load it: tensor type id(s) 252 are not ggml's" in fork
    ik = _profile("glm4moe", synth.ik_llama_mix(), "GLM-IQ4_K.gguf")
    text = explain_profile(ik)
    assert "CANNOT load it: " in text and "exist only in ik_llama.cpp" in text
    assert "IQ6_K" in text.split("CANNOT load it: ", 1)[1]
    plain = explain_profile(_profile("llama", synth.q8_0(), "Llama-Q8_0.gguf"))
    assert "Mainline llama.cpp can load every tensor type in it." in plain
    assert "It has no MTP head" in plain and "disagree" not in plain
