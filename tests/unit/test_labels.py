"""Quant labels and name claims from real-world file and repo names."""

from __future__ import annotations

import pytest

from crawler.profile.labels import is_mtp_sidecar_name, name_claims, parse_quant_label, split_info


@pytest.mark.parametrize(
    ("path", "text", "base", "ud", "i1"),
    [
        ("Qwen3.6-27B-MTP-UD-Q4_K_XL.gguf", "UD-Q4_K_XL", "Q4_K", True, False),
        ("Meta-Llama-3-8B-Instruct.i1-Q4_K_M.gguf", "i1-Q4_K_M", "Q4_K", False, True),
        ("Model.i1-IQ3_XXS.gguf", "i1-IQ3_XXS", "IQ3_XXS", False, True),
        ("Qwen3-Coder-Next-Q4_K_M.gguf", "Q4_K_M", "Q4_K", False, False),
        ("gemma-3-27b-it-qat-q4_0.gguf", "Q4_0", "Q4_0", False, False),
        ("gpt-oss-20b-MXFP4.gguf", "MXFP4", "MXFP4", False, False),
        ("Qwen3-30B-A3B-MXFP4_MOE.gguf", "MXFP4_MOE", "MXFP4", False, False),
        ("Qwen3.6-27B-MTP-IMAT-IQ4_XS-Q8nextn.gguf", "IQ4_XS", "IQ4_XS", False, False),
        ("DeepSeek-V3-IQ2_KS.gguf", "IQ2_KS", "IQ2_KS", False, False),
        ("model-Q4_K_L.gguf", "Q4_K_L", "Q4_K", False, False),
        ("Model-BF16-00001-of-00003.gguf", "BF16", "BF16", False, False),
        ("UD-Q4_K_XL/GLM-4.6-UD-Q4_K_XL-00001-of-00005.gguf", "UD-Q4_K_XL", "Q4_K", True, False),
        ("Q8_0/model-00001-of-00002.gguf", "Q8_0", "Q8_0", False, False),
        ("model.Q6_K.gguf.part1of2", "Q6_K", "Q6_K", False, False),
        ("model-f16.gguf", "F16", "F16", False, False),
        ("Qwen3-8B-Q4_0_4_4.gguf", "Q4_0_4_4", "Q4_0", False, False),
    ],
)
def test_parse_quant_label(path, text, base, ud, i1):
    label = parse_quant_label(path)
    assert label is not None
    assert (label.text, label.base_type, label.ud, label.imatrix) == (text, base, ud, i1)


@pytest.mark.parametrize("path", ["model.gguf", "mmproj-model.gguf", "Qwen3-30B-A3B.gguf"])
def test_no_label(path):
    assert parse_quant_label(path) is None


def test_name_claims():
    c = name_claims("Qwen3.6-27B-MTP-UD-Q4_K_XL.gguf", "havenoammo/Qwen3.6-27B-MTP-UD-GGUF")
    assert c.mtp and c.dynamic and not c.q8nextn and not c.imatrix
    c = name_claims(
        "Qwen3.6-27B-MTP-IMAT-IQ4_XS-Q8nextn.gguf",
        "localweights/Qwen3.6-27B-MTP-IMAT-IQ4_XS-Q8nextn-GGUF",
    )
    assert c.mtp and c.q8nextn and c.imatrix and not c.dynamic
    c = name_claims("Llama-3-8B.i1-Q4_K_M.gguf", "mradermacher/Llama-3-8B-i1-GGUF")
    assert c.imatrix and not c.mtp and not c.dynamic
    # Letters around the word: not a claim.
    c = name_claims("cloud-Budget-Q4_K_M.gguf", "someone/Templates-GGUF")
    assert not (c.mtp or c.dynamic or c.imatrix)
    assert name_claims("x-Q4_K_M.gguf", "unsloth/Qwen3-30B-A3B-Dynamic-GGUF").dynamic


def test_sidecar_and_split_names():
    assert is_mtp_sidecar_name("mtp-Qwen3.6-27B-Q8_0.gguf")
    assert is_mtp_sidecar_name("sub/MTP_Nemotron.gguf")
    assert not is_mtp_sidecar_name("Qwen3.6-27B-MTP-UD-Q4_K_XL.gguf")
    assert not is_mtp_sidecar_name("Qwen3.6-27B-Q5_K_M-mtp.gguf")  # a full file with MTP
    assert split_info("a/Model-Q4_K_M-00002-of-00003.gguf") == ("split", 2, 3)
    assert split_info("Model.Q4_K_M.gguf.part1of2") == ("part", 1, 2)
    assert split_info("Model.gguf") is None
