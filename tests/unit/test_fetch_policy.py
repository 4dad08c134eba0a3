"""Cold header reads take at most two reads, SentencePiece vocabularies included."""

from __future__ import annotations

from dataclasses import replace

import pytest

import tests.synth as synth
from crawler.gguf.parse import read_header
from tests.synth.spm import llama2_like


@pytest.mark.parametrize(
    "make",
    [
        llama2_like,
        lambda: synth.layout(
            replace(synth.preset("llama", "real"), n_vocab=32000), synth.q4_k_m_like()
        ),
        lambda: synth.layout(synth.preset("qwen3", "real"), synth.q8_0()),
    ],
    ids=["llama2-spm-32k", "bpe-32k", "bpe-152k"],
)
def test_a_cold_read_takes_at_most_two_reads(make):
    lay = make()
    reads: list[int] = []

    def read_at(offset: int, length: int) -> bytes:
        reads.append(length)
        return lay.read_at(offset, length)

    header = read_header(read_at, file_size=lay.size)
    assert len(reads) <= 2, reads
    # The synthetic vocabularies are flatter than real ones (tests/unit/test_gguf.py has the
    # real profile at <= 1.05x): they pay the margin on what is extrapolated from the first read.
    assert sum(reads) <= 1.20 * header.data_offset
