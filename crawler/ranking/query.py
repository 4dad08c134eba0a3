"""The search query: fuzzy matching of free text against a quant's names (pure: no I/O).

Typos in words are forgiven, digits never are (a query for 3.5 must not find 3.6).
Details: docs/internals/ranking.md#query
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["QueryMatcher"]

_SPLIT = re.compile(r"[\s/_:,+-]+")
_ALNUM = re.compile(r"[a-z]+|\d+(?:\.\d+)*")


def _text_tokens(text: str) -> set[str]:
    """Tokens of a name, plus their letter/number parts: "qwen3.6" -> qwen3.6, qwen, 3.6."""
    text = text.lower()
    text = text.removesuffix(".gguf")
    out: set[str] = set()
    for tok in _SPLIT.split(text):
        tok = tok.strip(".")
        if not tok:
            continue
        out.add(tok)
        out.update(p for p in _ALNUM.findall(tok) if len(p) >= 2)
    return out


class QueryMatcher:
    """Fuzzy match of free text against a quant's names (repo, base model, file, label, arch).

    Every query token must match some token of those names: exactly; or as a prefix (words of
    3+ letters); or, for purely alphabetic words of 5+ letters, with a small typo (rapidfuzz ratio
    >= 85). Tokens with digits never match fuzzily, so "qwen3.5" does not find "Qwen3.6" and "7b"
    does not find "27B". Repo-level results are cached per repo.
    """

    def __init__(self, query: str) -> None:
        self.query = query
        self.tokens = tuple(sorted({t for t in _SPLIT.split(query.lower()) if t.strip(".")}))
        self._repo_cache: dict[tuple[str, str | None], frozenset[str]] = {}

    @property
    def required_substrings(self) -> tuple[str, ...]:
        """Tokens with digits: each must occur (case-insensitively) in one of the names."""
        return tuple(t.strip(".") for t in self.tokens if any(ch.isdigit() for ch in t))

    @staticmethod
    def _token_hits(q: str, toks: set[str]) -> bool:
        q = q.strip(".")
        if q in toks:
            return True
        if q.isalpha() and len(q) >= 3 and any(t.startswith(q) for t in toks):
            return True
        if q.isalpha() and len(q) >= 5:
            from rapidfuzz import fuzz

            return any(t.isalpha() and fuzz.ratio(q, t) >= 85 for t in toks)
        return False

    def _unmatched(self, texts: Iterable[str | None], among: Iterable[str]) -> frozenset[str]:
        toks: set[str] = set()
        for text in texts:
            if text:
                toks |= _text_tokens(text)
        return frozenset(q for q in among if not self._token_hits(q, toks))

    def matches_names(
        self,
        repo_id: str,
        base_model: str | None,
        path: str,
        quant_label: str | None,
        architecture: str | None,
    ) -> bool:
        """matches on bare names (the catalog calls it before building a Candidate)."""
        if not self.tokens:
            return True
        key = (repo_id, base_model)
        left = self._repo_cache.get(key)
        if left is None:
            left = self._unmatched((repo_id, base_model), self.tokens)
            self._repo_cache[key] = left
        if not left:
            return True
        return not self._unmatched((path, quant_label, architecture), left)
