"""How typed model names become Hub search terms (crawler.crawl.ondemand)."""

from __future__ import annotations

import pytest

from crawler.crawl.ondemand import name_words, search_terms, state_key


@pytest.mark.parametrize(
    ("typed", "terms"),
    [
        ("llama 2 7b chat", ("llama-2-7b-chat", "llama27bchat")),
        ("qwen3.6 27b", ("qwen3.6-27b", "qwen3.627b")),
        ("Qwen3.6-27B", ("qwen3.6-27b", "qwen3.627b")),
        ("  Qwen3.6_27B  GGUF ", ("qwen3.6-27b", "qwen3.627b")),
        ("gemma3", ("gemma3",)),
        ("GGUF", ()),
    ],
)
def test_typed_names_become_repo_spellings(typed, terms):
    assert search_terms(name_words(typed)) == terms


def test_spellings_of_one_name_share_their_lookup_record():
    assert state_key(name_words("Qwen3.6-27B")) == state_key(name_words("qwen3.6 27b"))
